"""Benchmark: how often each error-rate bound wrongly fails a canary, and how many requests it needs.

Sequences of requests that fail at a true `rate` are looked at as the judge looks at a growing step (at 20
requests and every 10% more, to about 3,700). A false Fail is a lower bound above the true rate at any look.
The normal mixture around Wilson's bound (the error guardrails' bound before they were judged as counts) is
set against the beta-binomial sequence (`stats.binomial_sequence_bounds`), each at the same nominal error.
Then the requests each needs at the judge's per-side error (0.00125: confidence 0.99, 4 guardrails): to
show a clean canary within 1 point, and a canary at 2% (stable at 0% with 3x its requests) past it.

    python benchmarks/error_bounds.py               # 1,000 sequences per row, about a minute
"""

import argparse
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


def requests_needed(bound: Bound, rate: float) -> int:
    """Fewest canary requests at which the difference's bounds settle a 1-point limit (rate 0: within it)."""
    for n in range(50, 50_000, 5):
        lower, upper = difference_bounds(rate, bound(rate * n, n, JUDGE_ERROR), 0.0, bound(0.0, 3 * n, JUDGE_ERROR))
        if (rate == 0 and upper <= LIMIT) or (rate > 0 and lower > LIMIT):
            return n
    return -1


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
    needed = [[name, requests_needed(b, 0.0), requests_needed(b, 0.02)] for name, b in BOUNDS.items()]
    print(markdown_table(["bound", "shown within (0 errors)", "shown past (2% vs 0%)"], needed))


if __name__ == "__main__":
    main()
