"""Where the test suite's time went: each worker's tests along the run, from the record the last `pytest` left.

    pytest                                                   # any run of the suite records its timeline
    python benchmarks/suite_timeline.py                      # prints the summary
    python benchmarks/suite_timeline.py --plot docs/suite-timeline.png

The record (`test-timeline.json` in the cache directory, written by tests/conftest.py) holds, per test, the
xdist worker that ran it, its kind (real vLLM, integration, unit) and when its set-up began and its tear-down
ended. Printed: the run's length, each
worker's busy time and when it ran out of tests, the longest tests with their start, and the tests still
running in the run's last minutes (what the end of the run waited on).
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from specfleet_workshop.cachedir import cache_root

KINDS = {"vllm": "tab:red", "integration": "tab:blue", "unit": "tab:green"}


def load(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())


def summary(spans: list[dict[str, Any]], tail: float) -> list[str]:
    """Lines of text: the run, the workers, the longest tests and what ran in the last `tail` seconds."""
    t0, end = min(s["start"] for s in spans), max(s["stop"] for s in spans)
    lines = [f"run: {end - t0:.0f} s, {len(spans)} tests"]
    busy: dict[str, float] = defaultdict(float)
    last: dict[str, float] = defaultdict(float)
    for span in spans:
        busy[span["worker"]] += span["stop"] - span["start"]
        last[span["worker"]] = max(last[span["worker"]], span["stop"] - t0)
    lines += [f"  {worker}: busy {busy[worker]:.0f} s, out of tests at {last[worker]:.0f} s" for worker in sorted(busy)]
    lines.append("longest (start, seconds):")
    for span in sorted(spans, key=lambda s: s["start"] - s["stop"])[:12]:
        lines.append(f"  {span['start'] - t0:6.0f} {span['stop'] - span['start']:6.0f}  {span['test']}")
    lines.append(f"running in the last {tail:.0f} s (start, end):")
    for span in sorted((s for s in spans if s["stop"] > end - tail), key=lambda s: s["start"]):
        if span["stop"] - span["start"] > 5:
            lines.append(f"  {span['start'] - t0:6.0f} {span['stop'] - t0:6.0f}  {span['test']}")
    return lines


def plot(spans: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(s["start"] for s in spans)
    workers = sorted({s["worker"] for s in spans})
    fig, axis = plt.subplots(figsize=(11, 0.5 + 0.45 * len(workers)))
    for span in spans:
        axis.barh(workers.index(span["worker"]), (span["stop"] - span["start"]) / 60, left=(span["start"] - t0) / 60,
                  color=KINDS[span["kind"]], edgecolor="white", linewidth=0.3)  # fmt: skip
    axis.set_yticks(range(len(workers)), workers)
    axis.invert_yaxis()
    axis.set(xlabel="minutes into the run")
    axis.set_title("The suite's tests on each pytest-xdist worker", loc="left")
    for name, color in KINDS.items():
        axis.barh(0, 0, color=color, label=name)
    axis.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(KINDS), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, default=cache_root() / "test-timeline.json")
    parser.add_argument("--tail", type=float, default=300.0, help="seconds at the end of the run to list")
    parser.add_argument("--plot", type=Path, help="write a PNG of each worker's tests along the run")
    args = parser.parse_args()
    spans = load(args.record)
    print("\n".join(summary(spans, args.tail)))
    if args.plot:
        plot(spans, args.plot)


if __name__ == "__main__":
    main()
