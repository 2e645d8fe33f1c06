"""The short version of benchmarks/judge_roc.py: a few simulated canaries, each judged as the benchmark does.

The simulator is the ground truth: a scenario states what the canary has (a slower engine, a weaker
drafter, nothing at all) and the test checks what the judge did about it.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import judge_roc

LOAD = 12.0


def rolled_back(effect: judge_roc.Effect, judge: str, looks: int, seed: int) -> int | None:
    decide, limit = judge_roc.JUDGES[judge]
    return judge_roc.rollback_look(decide, limit, judge_roc.simulate(effect, LOAD, looks, seed))


def by_name(prefix: str) -> judge_roc.Effect:
    return next(e for e in judge_roc.effects() if e.name.startswith(prefix))


@pytest.mark.parametrize("seed", [1])
def test_a_drafter_under_the_floor_is_rolled_back_at_the_first_analysis(seed: int) -> None:
    assert rolled_back(by_name("alpha -0.10"), "new", 2, seed) == 1


@pytest.mark.parametrize("seed", [3])
def test_a_20_percent_slower_engine_is_rolled_back_within_three_analyses_when_no_slowdown_is_allowed(
    seed: int,
) -> None:
    look = rolled_back(by_name("engine steps +20%"), "new, limit 0", 3, seed)
    assert look is not None and look <= 3


@pytest.mark.parametrize("seed", [5])
def test_a_weaker_drafter_with_the_same_step_time_is_caught_by_per_token_latency_not_by_step_itl(seed: int) -> None:
    effect = by_name("alpha 0.8 -> 0.65")
    assert rolled_back(effect, "new", 3, seed) is not None
    assert rolled_back(effect, "old, step ITL only", 3, seed) is None


@pytest.mark.parametrize("seed", [7])
def test_good_changes_are_not_rolled_back(seed: int) -> None:
    for change in ("A/A", "plain stable -> EAGLE-3"):
        assert rolled_back(by_name(change), "new, limit 0", 4, seed) is None, change


def test_the_old_judge_rolled_back_a_good_eagle3_config() -> None:
    """Why the judge changed: per-step ITL and accepted/drafted both call a 2x faster config worse."""
    assert rolled_back(by_name("plain stable -> EAGLE-3"), "old (step ITL, accepted/drafted)", 3, 9) is not None
