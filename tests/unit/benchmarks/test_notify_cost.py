"""The short version of benchmarks/notify_cost.py: each rolled-back canary is notified (its step, its rollback)
and every notification to a receiver that is down ends given up, none dropped. Counts, never times."""

import asyncio

from prometheus_client import REGISTRY

from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.sinks import SINKS
from specfleet.notify.targets import parse_targets

import notify_cost
from receiverkit import dead_port


def failed() -> float:
    return sum(
        REGISTRY.get_sample_value("specfleet_notifications_failed_total", {"sink": "webhook", "transition": t}) or 0.0
        for t in ("StepAdvanced", "RolledBack")
    )


def test_every_rollback_is_notified_and_a_dead_receiver_is_given_up_after_the_passes() -> None:
    own = parse_targets(f"targets: [{{sink: webhook, url: 'http://127.0.0.1:{dead_port()}/'}}]", "operator", SINKS)
    notifier = Notifier(own, policy=DeliveryPolicy(attempts=2, timeout=1.0, backoff=0.01))
    before = failed()
    result = asyncio.run(notify_cost.rollbacks(3, notifier))
    assert result["passes"] >= 3 * 5 and failed() == before + 3 * 2  # each canary: its first step, its rollback
    assert asyncio.run(notify_cost.rollbacks(1, None))["notifications_queued_after_the_last_pass"] == 0
