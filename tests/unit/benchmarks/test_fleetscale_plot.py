"""The fleet-scale plot: the growth law through the largest runs, and the figure from the committed data."""

import sys
from pathlib import Path

import pytest

import fleetscale_plot


def test_the_growth_law_goes_through_the_two_largest_runs() -> None:
    runs = [{"objects": n, "operator_rss_mib": 100 + 0.1 * n + (5 if n == 10 else 0)} for n in (10, 1000, 3000)]
    base, per_fleet = fleetscale_plot.growth_law(runs)
    assert (base, per_fleet) == (pytest.approx(100), pytest.approx(0.1))  # the small run's offset is not fitted


def test_the_plot_is_drawn_from_the_committed_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "fleet-scale.png"
    monkeypatch.setattr(sys, "argv", ["fleetscale_plot.py", "--out", str(out)])
    fleetscale_plot.main()
    assert out.read_bytes().startswith(b"\x89PNG")
