"""How the judge writes numbers in reasons: one formatter per kind of quantity, so every reason reads alike."""

import math


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.01 else f"{seconds * 1000:.1f} ms"


def duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else ms(seconds)


def signed_pct(value: float) -> str:
    return "+inf%" if math.isinf(value) else f"{value:+.0%}"


def whole_pct(value: float) -> str:
    return f"{value:.0%}"


def share(value: float) -> str:
    return f"{value:.2%}"


def alpha(value: float) -> str:
    return f"{value:.2f}"


def about(count: float) -> str:
    """A count as a user reads an estimate: two significant figures, thousands separated."""
    return f"{float(f'{count:.2g}'):,.0f}"


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
