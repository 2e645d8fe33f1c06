"""The watch: every guardrail checked for failures over a few trailing scrapes alone, at each new scrape.

Scenarios state what the canary has (a drafter's alpha, the requests a few scrapes hold), never the number a
bound should show."""

import random

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.judge import Recent, judge, watch
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
