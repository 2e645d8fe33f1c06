"""When a rollout has ended, and how, from the status as the API serves it: what `kubectl specfleet status
--wait` exits on and what the `RolledOut` condition says."""

from typing import Any

import pytest

from specfleet.api.rollout_result import (
    FAILED_PHASES,
    HEALTHY,
    KEPT_STABLE,
    Ending,
    ResultReason,
    rollout_result,
)
from specfleet.api.status import Outcome, Phase


def status(phase: str, generation: int = 3, progressing: tuple[str, str] = ("", ""), **fields: Any) -> dict:
    """A status written for `generation`, in `phase`, its Progressing condition's (reason, message)."""
    reason, message = progressing
    conditions = [
        {"type": "SpecValid", "status": "True", "reason": "Rendered", "message": "revision new"},
        {"type": "Progressing", "status": "True", "reason": reason, "message": message},
    ]
    return {"phase": phase, "observedGeneration": generation, "conditions": conditions, **fields}


def entry(revision: str, outcome: str, reason: str) -> dict:
    return {"revision": revision, "outcome": outcome, "time": "2026-11-29T12:00:00Z", "reason": reason}


def test_a_status_of_an_earlier_generation_says_nothing_of_the_spec_yet() -> None:
    healthy_before_the_change = status("Healthy", generation=2, stableRevision="old")
    result = rollout_result(healthy_before_the_change, generation=3)
    assert (result.ending, result.reason) == (Ending.PENDING, ResultReason.NOT_OBSERVED)
    assert "generation 3" in result.message and "generation 2" in result.message
    assert rollout_result({}, generation=1).ending is Ending.PENDING  # the operator never wrote one


def test_healthy_with_the_promoted_revision_as_stable_succeeded() -> None:
    promoted = status(
        "Healthy",
        progressing=("RolloutComplete", "serving new"),
        stableRevision="new",
        history=[entry("new", "Promoted", "every step passed")],
    )
    result = rollout_result(promoted, generation=3)
    assert (result.ending, result.reason) == (Ending.SUCCEEDED, ResultReason.ROLLOUT_COMPLETE)
    assert result.message == "serving revision new"


def test_nothing_to_do_succeeds_at_once() -> None:
    """A spec applied again unchanged: same generation, Healthy, no canary, no history."""
    assert rollout_result(status("Healthy", stableRevision="same"), generation=3).ending is Ending.SUCCEEDED


def test_an_experiment_that_kept_stable_ended_well() -> None:
    kept = status(
        "Healthy",
        progressing=(KEPT_STABLE, "no candidate beat stable's mean per-token latency by 2%: stable kept"),
        stableRevision="old",
        rejectedRevision="new",
        history=[entry("new", "KeptStable", "no candidate beat stable")],
    )
    result = rollout_result(kept, generation=3)
    assert (result.ending, result.reason) == (Ending.SUCCEEDED, ResultReason.KEPT_STABLE)
    assert "by 2%" in result.message


@pytest.mark.parametrize(
    ("phase", "progressing", "revisions"),
    [
        ("Pending", ("ReplicasStarting", "0/2 replicas ready"), {"stableRevision": "new"}),
        ("Progressing", ("CanaryStep", "step 1/2 (25%): waiting for pause"), {"canaryRevision": "new"}),
        ("Progressing", ("Preflight", "checking the drafter of canary new"), {"canaryRevision": "new"}),
        ("Paused", ("ManualGate", "step 1/1 (50%): waiting for promote"), {"canaryRevision": "new"}),
        ("Paused", ("AnalysisFailedPaused", "a guardrail failed; promote or abort"), {"canaryRevision": "new"}),
        ("Progressing", ("Promoting", "stable rolling to new"), {"stableRevision": "new", "canaryRevision": "new"}),
        ("Degraded", ("ProgressDeadlineExceeded", "stable not rolled to new within 10m"), {"stableRevision": "new"}),
        ("Healthy", ("RolloutComplete", ""), {"stableRevision": "old", "canaryRevision": "new"}),
    ],
)
def test_a_live_canary_a_promotion_still_rolling_or_a_pause_is_not_an_end(
    phase: str, progressing: tuple[str, str], revisions: dict[str, str]
) -> None:
    result = rollout_result(status(phase, progressing=progressing, **revisions), generation=3)
    assert (result.ending, result.reason) == (Ending.PENDING, ResultReason.ROLLING_OUT)
    assert result.message.startswith(phase) and progressing[0] in result.message


def test_a_rollback_fails_with_the_reason_of_the_latest_entry_of_that_revision() -> None:
    rolled_back = status(
        "RolledBack",
        progressing=("RevisionRejected", "revision new was rolledback; change the spec or run retry"),
        stableRevision="old",
        rejectedRevision="new",
        history=[
            entry("new", "RolledBack", "an earlier try: error rate 3%"),
            entry("other", "RolledBack", "another revision's reason"),
            entry("new", "RolledBack", "acceptance alpha 0.31, upper bound < 0.60"),
            entry("other", "Superseded", "replaced by revision new"),
        ],
    )
    result = rollout_result(rolled_back, generation=3)
    assert (result.ending, result.reason) == (Ending.FAILED, ResultReason.ROLLED_BACK)
    assert result.message == "revision new was rolled back: acceptance alpha 0.31, upper bound < 0.60"


def test_an_abort_fails_with_its_reason() -> None:
    aborted = status(
        "Aborted",
        progressing=("Aborted", "aborted by user"),
        rejectedRevision="new",
        history=[entry("new", "Aborted", "preflight failed: vocabulary sizes differ")],
    )
    result = rollout_result(aborted, generation=3)
    assert (result.ending, result.reason) == (Ending.FAILED, ResultReason.ABORTED)
    assert result.message == "revision new was aborted: preflight failed: vocabulary sizes differ"


def test_without_the_revisions_entry_the_latest_that_ended_so_then_the_condition_gives_the_reason() -> None:
    candidate = status(  # an experiment's candidate is aborted under its own revision
        "Aborted", rejectedRevision="exp", history=[entry("cand-1", "Aborted", "pods never Ready")]
    )
    assert rollout_result(candidate, generation=3).message == "revision exp was aborted: pods never Ready"
    cut = status("RolledBack", progressing=("RolledBack", "p95 per token +40%"), rejectedRevision="new")
    assert rollout_result(cut, generation=3).message == "revision new was rolled back: p95 per token +40%"


def test_a_spec_that_cannot_be_rendered_fails() -> None:
    invalid = status("Degraded", stableRevision="old")
    invalid["conditions"][0] = {"type": "SpecValid", "status": "False", "reason": "InvalidSpec", "message": "x: bad"}
    result = rollout_result(invalid, generation=3)
    assert (result.ending, result.reason, result.message) == (Ending.FAILED, ResultReason.INVALID_SPEC, "x: bad")


def test_the_operator_judges_the_status_it_is_writing_without_a_generation() -> None:
    assert rollout_result(status("Healthy", generation=2), generation=None).ending is Ending.SUCCEEDED


def test_the_names_it_reads_are_the_api_s() -> None:
    phases = {p.value for p in Phase}
    assert HEALTHY in phases and set(FAILED_PHASES) <= phases
    assert set(FAILED_PHASES) <= {o.value for o in Outcome}  # a failed phase is named as its history outcome
    assert {ResultReason.ROLLED_BACK.value, ResultReason.ABORTED.value} == set(FAILED_PHASES)
