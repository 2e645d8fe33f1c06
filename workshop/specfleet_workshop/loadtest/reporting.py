"""A load test's results for people (a rich table, a PNG plot) and for scripts (JSON)."""

import json
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from specfleet_workshop.loadtest.measurements import LevelResult, as_dict

COLUMNS = (
    "CONC", "TARGET", "OK", "ERR", "E2E P50", "E2E P95", "TTFT P50", "TTFT P95",
    "TOKEN P50", "TOKEN P95", "TOKENS/S", "REQ/S",
)  # fmt: skip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def row(result: LevelResult) -> tuple[str, ...]:
    """One line of the table."""
    return (
        str(result.concurrency),
        result.target,
        str(result.requests),
        str(result.errors),
        _seconds(result.e2e.p50),
        _seconds(result.e2e.p95),
        _ms(result.ttft.p50),
        _ms(result.ttft.p95),
        _ms(result.per_token.p50),
        _ms(result.per_token.p95),
        f"{result.tokens_per_second:.0f}",
        f"{result.requests_per_second:.2f}",
    )


def table(results: Sequence[LevelResult]) -> Table:
    """Levels in order, the targets of a level next to each other."""
    grid = Table(box=None, header_style="bold")
    for index, column in enumerate(COLUMNS):
        grid.add_column(column, no_wrap=True, justify="left" if index == 1 else "right")
    for index, result in enumerate(results):
        last_of_level = index + 1 < len(results) and results[index + 1].concurrency != result.concurrency
        grid.add_row(*row(result), end_section=last_of_level, style="yellow" if result.errors else None)
    return grid


def to_json(results: Sequence[LevelResult]) -> str:
    return json.dumps({"levels": [as_dict(result) for result in results]}, indent=2)


class PlotError(RuntimeError):
    """The plot cannot be made (matplotlib missing, or the file cannot be written)."""


def plot(results: Sequence[LevelResult], path: Path, title: str = "specfleet loadtest") -> None:
    """Per-token latency (p50 solid, p95 dashed) and output tokens/s against concurrency, one colour per target."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise PlotError("--plot needs matplotlib: pip install 'specfleet-workshop[plot]'") from error
    targets = list(dict.fromkeys(result.target for result in results))
    levels = sorted({result.concurrency for result in results})
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, target in enumerate(targets):
        mine = sorted((r for r in results if r.target == target), key=lambda r: r.concurrency)
        colour = f"C{index}"
        for attribute, style, label in (("p50", "-", "p50"), ("p95", "--", "p95")):
            points = [(r.concurrency, getattr(r.per_token, attribute)) for r in mine]
            points = [(x, y * 1000) for x, y in points if y is not None]
            if points:
                latency.plot(*zip(*points, strict=True), style, marker="o", color=colour, label=f"{target} {label}")
        throughput.plot(
            [r.concurrency for r in mine],
            [r.tokens_per_second for r in mine],
            "-",
            marker="o",
            color=colour,
            label=target,
        )
    for axes, label in ((latency, "per-output-token latency (ms)"), (throughput, "output tokens/s")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(levels, [str(level) for level in levels])
        axes.set_xlabel("concurrent requests")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110)
    except OSError as error:
        raise PlotError(f"cannot write {path}: {error.strerror or error}") from error
    finally:
        plt.close(figure)
