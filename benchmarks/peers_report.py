"""What benchmarks/peers.py reports: rollback times and outcomes per controller and setting, the specfleet /
peer ratios, the markdown tables and the time-to-rollback plot."""

import json
import statistics
from pathlib import Path
from typing import Any

from benchkit import percentile
from peers_fleets import CONTROLLERS, Fleet


def summarize(times: list[float]) -> dict[str, float | None]:
    """Median, p95 (nearest rank) and max of the rollback times; None when nothing was rolled back."""
    if not times:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(statistics.median(times), 1),
        "p95": round(percentile(times, 0.95), 1),
        "max": round(max(times), 1),
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """specfleet / peer (below 1: specfleet faster); None when either is missing."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return round(ours / theirs, 3)


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """p95 time to rollback of specfleet over each peer's: tuned specfleet vs the peer documented and tuned."""
    out: dict[str, float | None] = {}
    for peer in CONTROLLERS[1:]:
        for ours, theirs in (("tuned", "documented"), ("tuned", "tuned"), ("documented", "documented")):
            mine = results.get(f"specfleet/{ours}", {}).get("breach", {}).get("p95")
            other = results.get(f"{peer}/{theirs}", {}).get("breach", {}).get("p95")
            out[f"specfleet {ours} / {peer} {theirs} (p95)"] = ratio(mine, other)
    return out


SCALE_FIGURES = {
    "create_seconds": "all created after (s; this script's creates)",
    "all_converged_seconds": "all converged after (s)",
    "per_object_seconds": "per object, created to converged, p50 / p95 (s)",
    "cpu_seconds": "controller CPU until then (s)",
    "peak_rss_mib": "controller peak RSS (MiB)",
    "api_requests_per_object": "API requests per object",
    "idle_writes_per_minute": "writes per minute at idle",
    "idle_reads_per_minute": "reads per minute at idle",
}


def scale_table(scale: dict[str, dict[str, Any]], nodes: int) -> str:
    """Markdown: a row per figure, a column per controller, and specfleet / peer ratios."""
    controllers = list(scale)
    count = next(iter(scale.values()))["objects"]
    lines = [f"| {count} fleets each, {nodes} nodes | {' | '.join(controllers)} |",
             "| --- |" + " --- |" * len(controllers)]  # fmt: skip

    def shown(value: Any) -> str:
        return " / ".join(str(v) for v in value.values()) if isinstance(value, dict) else str(value)

    for key, label in SCALE_FIGURES.items():
        lines.append(f"| {label} | {' | '.join(shown(scale[c].get(key, '-')) for c in controllers)} |")
    lines += ["", "| specfleet / peer | value |", "| --- | --- |"]
    lines += [f"| {name} | {'-' if v is None else f'{v:.2f}'} |" for name, v in scale_ratios(scale).items()]
    return "\n".join(lines)


def scale_ratios(scale: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """specfleet's figure over each peer's, for time, CPU, memory and requests."""
    mine = scale.get("specfleet", {})

    def figure(figures: dict[str, Any], key: str) -> Any:
        if key == "per_object_p50_seconds":
            return (figures.get("per_object_seconds") or {}).get("p50")
        return figures.get(key)

    keys = ("all_converged_seconds", "per_object_p50_seconds", "cpu_seconds", "peak_rss_mib", "api_requests_per_object")
    return {
        f"{key} / {peer}": ratio(figure(mine, key), figure(scale[peer], key))
        for peer in CONTROLLERS[1:]
        if peer in scale
        for key in keys
    }


def outcome_text(counts: dict[str, int]) -> str:
    """`promoted 3, rolled back 1` from outcome counts, leaving out zeros."""
    return ", ".join(f"{name} {n}" for name, n in counts.items() if n) or "-"


def table(results: dict[str, dict[str, Any]]) -> str:
    """One markdown table: a row per controller and setting, then the ratios."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    lines = [
        "| controller / setting | time to no canary traffic p50 / p95 | rolled back after breach |"
        " A/A false rollbacks (cold start) | good speculative canary | Prometheus down 2 min |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, row in results.items():
        breach = row.get("breach", {})
        lines.append(
            f"| {key} | {seconds(breach.get('p50'))} / {seconds(breach.get('p95'))} |"
            f" {breach.get('rolled_back', 0)} / {breach.get('trials', 0)}"
            + (f" ({breach['before_breach']} before t0)" if breach.get("before_breach") else "")
            + f" | {row.get('aa', {}).get('false_rollbacks', '-')} / {row.get('aa', {}).get('trials', '-')} |"
            f" {outcome_text(row.get('good', {}))} | {outcome_text(row.get('outage', {}))} |"
        )
    ratio_lines = [
        f"| {name} | {'-' if value is None else f'{value:.2f}'} |" for name, value in ratios(results).items()
    ]
    return "\n".join([*lines, "", "| ratio | value |", "| --- | --- |", *ratio_lines])


def scrape_warning(shares: dict[str, float | None], least: float) -> str | None:
    """What to say when the simulators answered too few scrapes in time (`shares`: per controller, the share
    answered before Prometheus' timeout) for the run to measure the controllers."""
    short = {c: share for c, share in shares.items() if share is None or share < least}
    if not short:
        return None
    said = ", ".join(f"{c} {'no scrapes' if s is None else f'{s:.1%}'}" for c, s in short.items())
    return (
        f"INVALID RUN: the simulated pods answered below {least:.0%} of their scrapes in time ({said}): the machine"
        " was too busy for the simulator to answer Prometheus, so the tables measure the overload, not the controllers"
    )


def plot(results: dict[str, dict[str, Any]], times: dict[str, list[float]], path: Path) -> None:
    """Time-to-rollback distributions per controller and setting (points over a box)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [key for key in results if times.get(key)]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(keys) + 1.5))
    ax.boxplot([times[k] for k in keys], orientation="horizontal", tick_labels=keys, widths=0.5, showfliers=False)
    for row, key in enumerate(keys, start=1):
        ax.scatter(times[key], [row] * len(times[key]), s=12, alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("seconds from breach (drafter alpha 0.8 -> 0.3) to no canary traffic (log scale)")
    ax.set_title("Time to rollback, same cluster, simulator and Prometheus")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collect(fleets: list[Fleet], settings: tuple[str, ...]) -> dict[str, Any]:
    """Per controller and setting: rollback times and outcome counts. Also the raw times, for the plot."""
    results: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {}
    for controller in CONTROLLERS:
        for setting in settings:
            key = f"{controller}/{setting}"
            mine = [f for f in fleets if f.controller == controller and f.setting == setting]
            breach = [f for f in mine if f.kind == "breach"]
            before = [f for f in breach if f.notes]
            rolled = [f.rolled_back_at for f in breach if not f.notes and f.rolled_back_at is not None]
            times[key] = [round(t, 2) for t in rolled]
            row: dict[str, Any] = {
                "breach": {
                    "trials": len(breach),
                    "rolled_back": len(rolled),
                    "before_breach": len(before),
                    **summarize(rolled),
                },
                "aa": {
                    "trials": sum(f.kind == "aa" for f in mine),
                    "false_rollbacks": sum(f.kind == "aa" and f.outcome == "rolled back" for f in mine),
                },
            }
            for kind in ("good", "outage"):
                counts = {"promoted": 0, "rolled back": 0, "held": 0}
                for f in mine:
                    if f.kind == kind and f.outcome:
                        counts[f.outcome] += 1
                row[kind] = counts
            results[key] = row
    return {"results": results, "times": times}


def checkpoint(fleets: list[Fleet], settings: tuple[str, ...], path: Path | None) -> None:
    """The figures so far, so a run that dies late still leaves what it measured."""
    if path is not None:
        path.write_text(json.dumps(collect(fleets, settings), indent=2))
