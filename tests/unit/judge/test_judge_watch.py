"""The watch: every guardrail checked for failures over a few trailing scrapes alone, at each new scrape.

Scenarios state what the canary has (a drafter's alpha, the requests a few scrapes hold), never the number a
bound should show."""

import random

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.judge import Recent, TrackEvidence, judge, watch
from specfleet.judge.canary import WATCH_SHARE

from judgekit import track

GUARDRAILS = Guardrails.model_validate({"minRequests": 20, "minDraftTokens": 200})


def scrapes(alpha: float, requests: int, seed: int, look: int, seconds: float = 10.0) -> Recent:
    """Both tracks over a trailing range of `requests` finished requests each (1 request/s per pod, 128 tokens:
    ~38 drafts a request at alpha 0.8, ~90 at 0.3)."""
    drafts = round(128 / (1 + sum(alpha ** (i + 1) for i in range(4))))
    canary = track(seed=seed, alpha=alpha, requests=requests, drafts_per_request=drafts, rate_per_pod=1.0)
    stable = track(seed=seed + 1, alpha=0.8, requests=requests, drafts_per_request=38, rate_per_pod=1.0)
    return Recent(canary, stable, seconds, look)


def test_a_drafter_turned_bad_fails_on_two_scrapes_of_its_requests() -> None:
    """alpha 0.8 -> 0.3 at 1 request/s per pod, 5 s scrapes: 3 minutes into the canary (look 36) the 10 requests
    of two scrapes show it; an hour in (look 720) each look is held to a stricter level and three scrapes do."""
    judged = watch(GUARDRAILS, [scrapes(0.3, 10, seed=1, look=36)], speculative=True, confidence=0.99)
    assert judged is not None and judged.verdict is Verdict.FAIL
    assert judged.reasons[0].startswith("over the last 10 s: acceptance alpha 0.3"), judged.reasons
    assert "upper bound < 0.60" in judged.reasons[0]
    later = [scrapes(0.3, 10, seed=1, look=720), scrapes(0.3, 15, seed=1, look=720, seconds=15.0)]
    assert watch(GUARDRAILS, later[:1], speculative=True, confidence=0.99) is None
    judged = watch(GUARDRAILS, later, speculative=True, confidence=0.99)
    assert judged is not None and judged.reasons[0].startswith("over the last 15 s"), judged


def test_a_watch_never_passes_and_says_nothing_of_a_good_canary() -> None:
    assert watch(GUARDRAILS, [scrapes(0.8, 10, seed=2, look=3)], speculative=True, confidence=0.99) is None
    assert watch(GUARDRAILS, [], speculative=True, confidence=0.99) is None


def test_each_guardrail_fails_once_with_its_shortest_failing_range() -> None:
    ranges = [scrapes(0.2, 10, seed=3, look=5), scrapes(0.2, 20, seed=4, look=5, seconds=20.0)]
    judged = watch(GUARDRAILS, ranges, speculative=True, confidence=0.99)
    assert judged is not None
    alpha = [r for r in judged.reasons if "acceptance alpha" in r]
    assert len(alpha) == 1 and alpha[0].startswith("over the last 10 s"), judged.reasons


def test_a_a_canaries_are_not_failed_by_watches_at_every_scrape_of_an_hour() -> None:
    """60 A/A canaries, each watched over two ranges (10 and 20 s at 1 request/s per pod, noise in every draw) at
    every 72nd of an hour's 720 scrapes (those between are held to the same or stricter levels): at most one is
    failed. The bound allows (1 - 0.99) / 2 x WATCH_SHARE = 0.25% of them over all the scrapes."""
    rng = random.Random(7)
    failed = 0
    for _ in range(60):
        for look in range(1, 721, 72):
            seed = rng.randrange(1 << 30)
            ranges = [scrapes(0.8, 10, seed, look), scrapes(0.8, 20, seed + 7, look, seconds=20.0)]
            if watch(GUARDRAILS, ranges, speculative=True, confidence=0.99) is not None:
                failed += 1
                break
    assert failed <= 1, failed
    assert WATCH_SHARE == 0.5


def test_the_analyses_window_check_keeps_the_rest_of_the_trailing_budget() -> None:
    """The window check at an analysis and the watch share the trailing half: a canary failed by a trailing
    range at one is failed at the other (the window's z is for its own look count)."""
    bad = scrapes(0.3, 60, seed=5, look=4, seconds=60.0)
    whole = scrapes(0.7, 600, seed=6, look=4, seconds=600.0)
    judged = judge(GUARDRAILS, whole.canary, whole.stable, speculative=True, confidence=0.99, recent=bad)
    assert judged.verdict is Verdict.FAIL and judged.reasons[0].startswith("over the last 60 s")


def counts(requests: int, error_share: float, rng: random.Random, seconds: float) -> TrackEvidence:
    """A track's finished requests since the step's evidence began, each an error with `error_share`."""
    errors = sum(rng.random() < error_share for _ in range(requests))
    return TrackEvidence(finished={"stop": float(requests - errors), "error": float(errors)}, seconds=seconds)


def exactly(requests: int, error_share: float, seconds: float) -> TrackEvidence:
    """A track's finished requests, `error_share` of them errors (rounded)."""
    errors = round(requests * error_share)
    return TrackEvidence(finished={"stop": float(requests - errors), "error": float(errors)}, seconds=seconds)


def test_errors_at_twice_the_limit_fail_at_a_scrape_over_the_whole_step_not_its_last_scrapes() -> None:
    """A canary failing 2% of requests against stable's 0% (twice the 1-point limit) at 8 requests/s on two
    pods, 5 minutes in: its last few scrapes hold too few requests to show it, the step's 2,400 do, and the
    watch fails it at this scrape, not at the next analysis."""
    whole = exactly(2400, 0.02, 300.0), exactly(3600, 0.0, 300.0)
    recent = Recent(exactly(160, 0.02, 20.0), exactly(240, 0.0, 20.0), 20.0, look=30)
    assert watch(GUARDRAILS, [recent], speculative=False, confidence=0.99) is None
    judged = watch(GUARDRAILS, [recent], speculative=False, confidence=0.99, whole_step=whole)
    assert judged is not None and judged.verdict is Verdict.FAIL
    assert [c.guardrail for c in judged.checks] == ["maxErrorRateIncrease"], judged.checks
    assert judged.reasons[0].startswith("over the step's 5 min: error rate"), judged.reasons


def test_the_whole_step_watch_fails_exactly_where_the_analysis_error_check_would() -> None:
    """The same sequence as the analysis: on the same counts the watch fails the error guardrails the analysis
    fails, and no other (anytime-valid, so looking at every scrape spends nothing more)."""
    rng = random.Random(12)
    for share in (0.0, 0.01, 0.015, 0.02, 0.03):
        for requests in (300, 1200, 2400):
            canary = track(seed=rng.randrange(1 << 30), requests=requests, error_share=share)
            stable = track(seed=rng.randrange(1 << 30), requests=requests * 3 // 2, error_share=0.0)
            analysis = judge(GUARDRAILS, canary, stable, speculative=False, confidence=0.99, steps=3)
            failed = {c.guardrail for c in analysis.checks if c.verdict is Verdict.FAIL} & {"maxErrorRateIncrease"}
            judged = watch(GUARDRAILS, [], speculative=False, confidence=0.99, steps=3, whole_step=(canary, stable))
            watched = {c.guardrail for c in judged.checks} if judged else set()
            assert watched == failed, (share, requests, watched, failed)


def test_an_absolute_error_ceiling_is_watched_over_the_whole_step_too() -> None:
    ceiling = GUARDRAILS.model_copy(update={"max_error_rate": 0.01})
    rng = random.Random(13)
    whole = counts(3000, 0.03, rng, 600.0), counts(4500, 0.03, rng, 600.0)
    judged = watch(ceiling, [], speculative=False, confidence=0.99, whole_step=whole)
    assert judged is not None and [c.guardrail for c in judged.checks] == ["maxErrorRate"], judged.checks


def test_whole_step_errors_never_pass_and_wait_for_min_requests() -> None:
    rng = random.Random(14)
    clean = counts(5000, 0.0, rng, 600.0), counts(7500, 0.0, rng, 600.0)
    assert watch(GUARDRAILS, [], speculative=False, confidence=0.99, whole_step=clean) is None
    few = TrackEvidence(finished={"error": 19.0}, seconds=60.0), TrackEvidence(finished={"stop": 19.0}, seconds=60.0)
    assert watch(GUARDRAILS, [], speculative=False, confidence=0.99, whole_step=few) is None  # minRequests 20


def test_a_a_canaries_watched_at_every_scrape_of_their_step_are_not_failed_by_errors() -> None:
    """100 A/A canaries at 1% errors on both tracks, 8 canary requests an 8-s scrape for 2 hours (7,200
    requests), looked at every 10th scrape (to keep the test quick; the sequence's error is the same at every
    scrape): at most one is failed. The sequence allows (1 - 0.99) / 2 / GUARDRAILS' share each, however often
    it is looked at."""
    rng = random.Random(15)
    failed = 0
    for _ in range(100):
        errors = [0, 0]
        for scrape in range(1, 901):
            errors[0] += sum(rng.random() < 0.01 for _ in range(8))
            errors[1] += sum(rng.random() < 0.01 for _ in range(12))
            tracks = [
                TrackEvidence(finished={"stop": n - e, "error": float(e)}, seconds=scrape * 8.0)
                for n, e in ((8.0 * scrape, errors[0]), (12.0 * scrape, errors[1]))
            ]
            if scrape % 10 == 0 and watch(GUARDRAILS, [], speculative=False, confidence=0.99, whole_step=tuple(tracks)):
                failed += 1
                break
    assert failed <= 1, failed
