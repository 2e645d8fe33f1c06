"""`specfleet loadtest`: a load matrix against OpenAI-compatible servers (vLLM, or the simulator's pods).

Pure core: `measurements` (samples, percentiles, per-level figures). Shell: `driving` (aiohttp, closed-loop
clients), `reporting` (table, JSON, plot). An experiment can call it without the CLI:

    from specfleet_workshop.loadtest import LoadPlan, Target, run_load_test
    results = run_load_test([Target("stable", stable_url), Target("canary", canary_url)], LoadPlan(levels=(1, 8, 32)))
    {(r.target, r.concurrency): r.per_token.p95 for r in results}

Importing this package loads aiohttp; the CLI imports it only when the command runs.
"""

from specfleet_workshop.loadtest.driving import (
    DEFAULT_LEVELS,
    LoadPlan,
    LoadTestError,
    Target,
    run_load_test,
    run_load_test_async,
)
from specfleet_workshop.loadtest.measurements import LevelResult, Quantiles, RequestSample

__all__ = [
    "DEFAULT_LEVELS",
    "LevelResult",
    "LoadPlan",
    "LoadTestError",
    "Quantiles",
    "RequestSample",
    "Target",
    "run_load_test",
    "run_load_test_async",
]
