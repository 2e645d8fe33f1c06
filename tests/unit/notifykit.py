"""A notification as the notify tests share it: a canary rolled back at its first step, with the judge's reason."""

from datetime import UTC, datetime

from specfleet.api.status import Phase
from specfleet.notify.transitions import Config, Fleet, Notification, Transition

ROLLED_BACK = Notification(
    transition=Transition.ROLLED_BACK,
    fleet=Fleet("team-a", "llama-eagle3", "8d1c-uid", 4),
    time=datetime(2026, 12, 4, 15, 0, tzinfo=UTC),
    phase=Phase.ROLLED_BACK,
    step=0,
    steps=2,
    weight=0,
    stable=Config("6f1e2d", "eagle3 k=4"),
    canary=Config("20c9a9", "eagle3 k=3"),
    message="canary 20c9a9 rolled back: acceptance alpha 0.31 < 0.6",
    reasons=("acceptance alpha 0.31: upper bound 0.35 < floor 0.6",),
    run="2026-12-04T14:50:00+00:00",
)
