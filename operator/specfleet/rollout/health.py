"""`Ready`, `Reconciling` and `Stalled`: the fleet's health in the kstatus convention GitOps tools read.

kstatus (sigs.k8s.io/cli-utils; Flux, `kubectl wait --for=condition=Ready`) calls an object Current once
`observedGeneration` catches up unless `Reconciling` (in progress) or `Stalled` (failed) is True, so each says
so when it holds and is False otherwise. They are never True together: kstatus reads `Reconciling` first, and
a stalled fleet must read as failed. `Ready` is True only when the rollout of the current generation succeeded
(`api.rollout_result`: Healthy with no live canary). Set last in every pass, after `RolledOut`, from the status
the pass leaves; each carries the pass's generation.
"""

from specfleet.api.rollout_result import Ending, RolloutResult
from specfleet.api.vocabulary import ConditionType
from specfleet.rollout.canary import NO_ROOM
from specfleet.rollout.lifecycle import PAUSED_FOR_A_HUMAN
from specfleet.rollout.rolled_out import MAX_MESSAGE, judged_rollout, rolled_out
from specfleet.rollout.state import Pass

STALLED_PROGRESS = frozenset((NO_ROOM, "ProgressDeadlineExceeded")) | PAUSED_FOR_A_HUMAN
"""Progressing reasons of a fleet that will not move on by itself: canary pods the nodes have no room for, a
promotion past its deadline, a canary paused by its failure until a human promotes or aborts it."""


def with_rollout_conditions(p: Pass) -> Pass:
    """`RolledOut`, `Ready`, `Reconciling` and `Stalled` from one judgement of the status the pass leaves."""
    result = judged_rollout(p)
    return with_health(rolled_out(p, result), result)


def with_health(p: Pass, result: RolloutResult) -> Pass:
    message = result.message[:MAX_MESSAGE]
    p = p.with_condition(ConditionType.READY, result.ending is Ending.SUCCEEDED, result.reason.value, message)
    progressing = next((c for c in p.status.conditions if c.type == ConditionType.PROGRESSING), None)
    if result.ending is Ending.FAILED:
        return _stalled(p, result.reason.value, message)
    if progressing is not None and progressing.reason in STALLED_PROGRESS:
        return _stalled(p, progressing.reason, progressing.message)
    p = p.with_condition(ConditionType.STALLED, False, "NotStalled")
    if result.ending is Ending.SUCCEEDED:
        return p.with_condition(ConditionType.RECONCILING, False, result.reason.value, message)
    phase = p.status.phase.value
    reason = progressing.reason if progressing is not None and progressing.reason else phase
    what = f"{phase}: {progressing.message}" if progressing is not None and progressing.message else phase
    return p.with_condition(ConditionType.RECONCILING, True, reason, what[:MAX_MESSAGE])


def _stalled(p: Pass, reason: str, message: str) -> Pass:
    p = p.with_condition(ConditionType.STALLED, True, reason, message)
    return p.with_condition(ConditionType.RECONCILING, False, "Stalled", "the rollout waits for a change or command")
