"""Output equivalence: token ids compared pair by pair, and the share of identical pairs judged on its bounds."""

import random

import pytest

from specfleet.api.spec import Guardrails, OutputEquivalence
from specfleet.api.status import Verdict
from specfleet.judge import judge, judged_guardrails
from specfleet.judge.equivalence import KEPT_POSITIONS, Comparison, PairTally, compare

from judgekit import track

CONFIDENCE = 0.99
ON = Guardrails(output_equivalence=OutputEquivalence(enabled=True))
CANARY = track(seed=1, alpha=0.8, requests=2500)
STABLE = track(seed=2, alpha=0.8, requests=2500)


def test_identical_token_ids_are_identical() -> None:
    assert compare([1, 2, 3], [1, 2, 3]) == Comparison(True, None)
    assert compare([], []) == Comparison(True, None)


def test_the_first_differing_token_is_where_the_pair_diverges() -> None:
    assert compare([5, 6, 7, 8], [5, 6, 9, 8]) == Comparison(False, 2)
    assert compare([9, 6], [5, 6]) == Comparison(False, 0)


def test_an_answer_that_stops_early_diverges_where_it_stopped() -> None:
    assert compare([1, 2], [1, 2, 3]) == Comparison(False, 2)
    assert compare([1, 2, 3], []) == Comparison(False, 0)


def test_the_tally_counts_every_pair_and_keeps_only_the_first_positions() -> None:
    tally = PairTally()
    for position in range(KEPT_POSITIONS + 10):
        tally = tally.add(Comparison(False, position)).add(Comparison(True, None))
    assert (tally.pairs, tally.identical, tally.differed) == (2 * (KEPT_POSITIONS + 10), KEPT_POSITIONS + 10, 30)
    assert tally.first_divergences == tuple(range(KEPT_POSITIONS))


def pairs_from(prompts: int, diverging: float, rounds: int, seed: int) -> PairTally:
    """The operator's rounds over a fixed prompt set, where a share of the prompts always diverge (a broken
    canary is wrong on the same prompts every time: greedy decoding is deterministic)."""
    rng = random.Random(seed)
    wrong = {i: rng.randrange(1, 32) for i in range(prompts) if rng.random() < diverging}
    tally = PairTally(seconds=0.0)
    for _ in range(rounds):
        for prompt in range(prompts):
            tally = tally.add(Comparison(prompt not in wrong, wrong.get(prompt)))
    return tally


def oe_check(result):
    return next(c for c in result.checks if c.guardrail == "outputEquivalence")


def test_a_canary_diverging_on_a_tenth_of_the_prompts_fails_while_speed_and_acceptance_pass() -> None:
    tally = pairs_from(prompts=50, diverging=0.1, rounds=6, seed=3)
    assert 0.05 < tally.differed / tally.pairs < 0.2
    result = judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, steps=3, pairs=tally)
    assert result.verdict is Verdict.FAIL
    assert oe_check(result).verdict is Verdict.FAIL
    others = [c for c in result.checks if c.guardrail in ("minAcceptanceAlpha", "maxTokenLatencyMeanRegression")]
    assert all(c.verdict is Verdict.PASS for c in others), others
    (reason,) = result.reasons
    assert f"{tally.differed} of {tally.pairs} prompt pairs differed" in reason
    assert f"first differences at token {tally.first_divergences[0]}" in reason


def test_an_identical_canary_passes_once_its_bound_shows_the_floor() -> None:
    few = judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, steps=3, pairs=PairTally(300, 300))
    check = oe_check(few)
    assert check.verdict is Verdict.INCONCLUSIVE
    assert check.needs and "more prompt pairs" in check.needs
    enough = judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, steps=3, pairs=PairTally(1500, 1500))
    assert oe_check(enough).verdict is Verdict.PASS
    assert enough.verdict is Verdict.PASS


def test_no_verdict_before_min_pairs_even_when_every_pair_differs() -> None:
    result = judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, pairs=PairTally(10, 0, (0, 1)))
    check = oe_check(result)
    assert check.verdict is Verdict.INCONCLUSIVE
    assert "need 50 pairs" in next(r for r in result.reasons if "prompt pairs" in r)


def test_no_pairs_is_never_a_pass() -> None:
    result = judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE)
    assert oe_check(result).verdict is Verdict.INCONCLUSIVE
    assert result.verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize("pairs", [1_000, 10_000, 100_000])
def test_a_share_on_the_floor_never_passes(pairs: int) -> None:
    tally = PairTally(pairs, round(pairs * 0.98))
    assert oe_check(judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, pairs=tally)).verdict is not (
        Verdict.PASS
    )


def test_a_canary_just_above_the_floor_is_not_failed() -> None:
    tally = PairTally(100_000, 98_300)
    assert oe_check(judge(ON, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, pairs=tally)).verdict is (
        Verdict.PASS
    )


def test_off_by_default_and_then_neither_judged_nor_budgeted() -> None:
    plain = Guardrails()
    result = judge(plain, CANARY, STABLE, speculative=True, confidence=CONFIDENCE, pairs=PairTally(100, 0))
    assert all(c.guardrail != "outputEquivalence" for c in result.checks)
    assert judged_guardrails(ON, True) == judged_guardrails(plain, True) + 1


def test_prompts_config_map_needs_the_check_enabled() -> None:
    with pytest.raises(ValueError, match="promptsConfigMap"):
        OutputEquivalence(prompts_config_map="my-prompts")
    assert OutputEquivalence(enabled=True, prompts_config_map="my-prompts").prompts_config_map == "my-prompts"
