"""Benchmark: how often each error-rate bound wrongly fails a canary, and how many requests it needs.

Sequences of requests that fail at a true `rate` are looked at as the judge looks at a growing step (at 20
requests and every 10% more, to about 3,700). A false Fail is a lower bound above the true rate at any look.
The normal mixture around Wilson's bound (the error guardrails' bound before they were judged as counts) is
set against the beta-binomial sequence (`stats.binomial_sequence_bounds`), each at the same nominal error.
Then the requests each needs at the judge's per-side error (0.00125: confidence 0.99, 4 guardrails): to
show a clean canary within 1 point, and a canary at 2% past it against a clean stable, with one canary pod
of 4 (stable has 3x its requests) and with two canary pods beside three stable ones (1.5x); and, for the
second, what no valid test can beat: one fixed look (an exact binomial test, stable known clean, at power
0.5) and a sequential test that knows the alternative (log(1 / error) / KL(2% || 1%) requests on average).

    python benchmarks/error_bounds.py               # 1,000 sequences per row, about a minute
"""

import argparse
import math
import random
from collections.abc import Callable

from specfleet.judge.verdicts import difference_bounds
from specfleet.stats import binomial_sequence_bounds, sequence_z, wilson_bounds

from benchkit import markdown_table

LOOKS = sorted({round(20 * 1.1**i) for i in range(55)})
LIMIT = 0.01
JUDGE_ERROR = 0.00125

Bound = Callable[[float, float, float], tuple[float, float]]
BOUNDS: dict[str, Bound] = {
    "normal mixture (Wilson)": lambda s, n, e: wilson_bounds(s, n, sequence_z(n, e)),
    "beta-binomial sequence": lambda s, n, e: binomial_sequence_bounds(s, n, e, LIMIT),
}


def false_fails(bound: Bound, rate: float, error: float, sequences: int, seed: int) -> int:
    rng = random.Random(seed)
    crossed = 0
    for _ in range(sequences):
        successes = done = 0
        for n in LOOKS:
            successes += sum(rng.random() < rate for _ in range(n - done))
            done = n
            if bound(successes, n, error)[0] > rate:
                crossed += 1
                break
    return crossed


def requests_needed(bound: Bound, rate: float, stable_share: float = 3.0) -> int:
    """Fewest canary requests at which the difference's bounds settle a 1-point limit (rate 0: within it),
    stable clean with `stable_share` times the canary's requests."""
    for n in range(50, 50_000, 5):
        stable = bound(0.0, stable_share * n, JUDGE_ERROR)
        lower, upper = difference_bounds(rate, bound(rate * n, n, JUDGE_ERROR), 0.0, stable)
        if (rate == 0 and upper <= LIMIT) or (rate > 0 and lower > LIMIT):
            return n
    return -1


def binomial_tail(n: int, p: float, at_least: int) -> float:
    """P(X >= at_least) for X ~ Binomial(n, p), from the few terms below it."""
    below = (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)
        for k in range(at_least)
    )
    return 1.0 - sum(math.exp(t) for t in below)


def one_look_requests(rate: float) -> int:
    """Fewest canary requests at which one exact binomial test at the judge's error, against a rate on the
    limit, fails half the canaries at `rate` (the median count reaches the critical count): stable taken as
    known clean, so no valid one-look test needs fewer."""
    for n in range(50, 50_000, 5):
        critical = next(k for k in range(n + 1) if binomial_tail(n, LIMIT, k) <= JUDGE_ERROR)
        if binomial_tail(n, rate, critical) >= 0.5:
            return n
    return -1


def sequential_requests(rate: float) -> float:
    """Average requests of the likelihood-ratio test of `rate` against the limit crossing log(1 / error) (Wald):
    a test that knows the alternative; a confidence sequence, which does not, needs more."""
    divergence = rate * math.log(rate / LIMIT) + (1 - rate) * math.log((1 - rate) / (1 - LIMIT))
    return math.log(1 / JUDGE_ERROR) / divergence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for rate in (0.01, 0.003):
        for error in (0.05, 0.01):
            row: list[object] = [f"{rate:.1%}", f"{error:g}"]
            for bound in BOUNDS.values():
                crossed = false_fails(bound, rate, error, args.sequences, args.seed)
                row.append(f"{crossed / args.sequences:.1%}")
            rows.append(row)
    print(f"false Fails over {args.sequences} sequences, {len(LOOKS)} looks each:")
    print(markdown_table(["true rate", "nominal error", *BOUNDS], rows))
    print(f"\ncanary requests to settle a 1-point limit at a per-side error of {JUDGE_ERROR}:")
    needed = [
        [name, requests_needed(b, 0.0), requests_needed(b, 0.02), requests_needed(b, 0.02, 1.5)]
        for name, b in BOUNDS.items()
    ]
    headers = ["bound", "shown within (0 errors)", "shown past (2% vs 0%)", "shown past, 2 canary pods"]
    print(markdown_table(headers, needed))
    fixed, sequential = one_look_requests(0.02), sequential_requests(0.02)
    print(f"2% vs 0% past a 1-point limit, bounds no valid test beats: one exact look {fixed} requests (power 0.5), "
          f"a sequential test knowing the alternative {sequential:.0f} on average")  # fmt: skip
    beta = requests_needed(BOUNDS["beta-binomial sequence"], 0.02, 1.5)
    print(f"at 4 requests/s per canary pod, 2 canary pods (8/s): the sequence {beta / 8 / 60:.1f} min, one exact look "
          f"{fixed / 8 / 60:.1f} min, the sequential test {sequential / 8 / 60:.1f} min")  # fmt: skip


if __name__ == "__main__":
    main()
