"""Plot the fleet-scale figures in docs/data/fleet-scale (create_many.py and cluster_floor.py outputs, as JSON).

    python benchmarks/fleetscale_plot.py     # writes docs/fleet-scale.png

Left: the operator's RSS against the fleets it holds, with the growth law fitted on the two largest runs.
Right: 1,000 new fleets, per-object p50 and all-Healthy time against the operator's workers, with the time
the dev cluster needs for the same Deployments with no operator at all.
"""

import argparse
import json
from pathlib import Path
from typing import Any

from benchkit import ROOT

DATA = ROOT / "docs" / "data" / "fleet-scale"


def load(pattern: str) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(DATA.glob(pattern))]


def growth_law(runs: list[dict[str, Any]]) -> tuple[float, float]:
    """(MiB at zero fleets, MiB per fleet) through the two runs with the most fleets."""
    small, large = sorted(runs, key=lambda r: r["objects"])[-2:]
    slope = (large["operator_rss_mib"] - small["operator_rss_mib"]) / (large["objects"] - small["objects"])
    return large["operator_rss_mib"] - slope * large["objects"], slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "fleet-scale.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r for r in load("now-n*-w*.json") if r["objects"] != 1000 or r["workers"] == 8]
    curve = sorted((r for r in load("now-n1000-w*.json")), key=lambda r: r["workers"])
    floor = load("cluster-floor-n1000.json")[0]
    before = load("before-n1000-w8.json")[0]
    base, per_fleet = growth_law(sizes)

    fig, (memory, workers) = plt.subplots(1, 2, figsize=(11, 4.2))
    fleets = [r["objects"] for r in sizes]
    memory.scatter(fleets, [r["operator_rss_mib"] for r in sizes], zorder=3, label="measured")
    xs = [0, 10_000]
    memory.plot(xs, [base + per_fleet * x for x in xs], "--", label=f"{base:.0f} MiB + {per_fleet:.3f} MiB/fleet")
    memory.axhline(512, color="grey", lw=0.8, label="chart's default limit (512 MiB)")
    memory.set(xlabel="fleets held by one operator process", ylabel="RSS (MiB)", title="Memory grows linearly")
    memory.legend(fontsize=8)

    counts = [r["workers"] for r in curve]
    workers.plot(counts, [r["total_seconds"] for r in curve], "o-", label="all 1,000 Healthy")
    workers.plot(counts, [r["per_object_seconds"]["p50"] for r in curve], "s-", label="per fleet, p50")
    workers.axhline(floor["all_available_seconds"], color="grey", ls=":", label="cluster alone: all available")
    workers.scatter([before["workers"]] * 2, [before["total_seconds"], before["per_object_seconds"]["p50"]],
                    marker="x", color="black", zorder=3, label="before (FIFO queue, 8 workers)")  # fmt: skip
    workers.set(xscale="log", xlabel="operator workers", ylabel="seconds", title="1,000 fleets created at once")
    workers.set_xticks(counts, [str(c) for c in counts])
    workers.minorticks_off()
    workers.set_ylim(bottom=0)
    workers.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
