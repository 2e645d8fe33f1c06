"""The short version of benchmarks/judge_roc.py: a few simulated canaries, each judged as the operator does.

The simulator is the ground truth: an effect states what the canary has (errors, a smaller k, a drafter
under the floor, nothing at all) and the tests check what the operator, fed the judge's verdicts, did.
"""

import pytest

from specfleet.api.status import Measurements, Verdict
from specfleet.judge import Judgement

import judge_roc

LOAD = 12.0
SHORT = judge_roc.SETTINGS[0]
"""30 s window, 1 minute pause, an analysis every 10 s: the quickest to decide."""


def rollout(key: str, seed: int, load: float = LOAD) -> judge_roc.Rollout:
    (decided,) = judge_roc.canary(judge_roc.effect(key), load, seed, settings=(SHORT,), horizon=300.0)
    return decided


@pytest.mark.parametrize("seed", [1])
def test_a_drafter_under_the_floor_is_rolled_back_on_its_acceptance(seed: int) -> None:
    decided = rollout("alpha", seed)
    assert decided.outcome == judge_roc.FAILED
    assert "minAcceptanceAlpha" in decided.failed
    assert decided.first_pass is None


@pytest.mark.parametrize("seed", [2])
def test_five_percent_more_errors_are_rolled_back_and_never_passed(seed: int) -> None:
    decided = rollout("err5", seed)
    assert decided.outcome == judge_roc.FAILED
    assert "maxErrorRateIncrease" in decided.failed
    assert decided.first_pass is None


@pytest.mark.parametrize("seed", [3])
def test_an_aa_canary_at_12_requests_per_second_is_promoted_without_a_failed_analysis(seed: int) -> None:
    decided = rollout("aa", seed)
    assert decided.outcome == judge_roc.PROMOTED
    assert decided.failed_looks == 0
    assert decided.decided_at is not None and decided.decided_at >= SHORT.pause


@pytest.mark.parametrize("seed", [4])
def test_a_canary_50_percent_slower_on_average_with_a_lower_p95_is_rolled_back_on_its_mean(seed: int) -> None:
    decided = rollout("mean50", seed)
    assert decided.outcome == judge_roc.FAILED
    assert decided.failed == ("maxTokenLatencyMeanRegression",)


def _judgement(verdict: Verdict) -> Judgement:
    return Judgement(verdict, (verdict.value,), Measurements(), Measurements())


def feed(verdicts: str, setting: judge_roc.Setting = SHORT) -> judge_roc.Rollout:
    """The operator's moves on a sequence of verdicts, one per analysis interval (P, F, I)."""
    decided = judge_roc.Rollout(setting)
    codes = {"P": Verdict.PASS, "F": Verdict.FAIL, "I": Verdict.INCONCLUSIVE}
    for n, code in enumerate(verdicts, start=1):
        t = n * setting.interval
        decided.pause_over(t)
        decided.take(t, _judgement(codes[code]))
    return decided


def test_the_operator_promotes_at_the_pauses_end_on_an_earlier_pass_and_only_on_a_pass() -> None:
    on_time = feed("IIIIPI")  # the pass at the pause's end acts on the analysis before it, Pass at 50 s
    assert (on_time.outcome, on_time.decided_at) == (judge_roc.PROMOTED, SHORT.pause)
    assert feed("IIPIIII").outcome is None  # the last analysis before the pause's end did not pass
    late = feed("I" * 7 + "P")
    assert (late.outcome, late.decided_at, late.first_pass) == (judge_roc.PROMOTED, 80.0, 80.0)
    assert feed("P" * 5).outcome is None  # the pause is not over


def test_inconclusive_analyses_in_a_row_roll_back_after_on_no_data_and_a_pass_restarts_the_count() -> None:
    looks = round(judge_roc.ON_NO_DATA / SHORT.interval)
    assert feed("I" * looks).outcome is None
    stopped = feed("I" * (looks + 1))
    assert (stopped.outcome, stopped.decided_at) == (judge_roc.NO_DATA, judge_roc.ON_NO_DATA + SHORT.interval)
    assert feed("I" * (looks - 1) + "F").outcome == judge_roc.FAILED
    long = judge_roc.SETTINGS[1]  # a Pass before the pause's end, then Inconclusive again: counted anew
    enough = round(judge_roc.ON_NO_DATA / long.interval) + 1
    assert feed("I" * enough, long).outcome == judge_roc.NO_DATA
    assert feed("I" * 5 + "P" + "I" * (enough - 1), long).outcome is None
