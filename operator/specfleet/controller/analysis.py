"""One analysis of a live canary: ask Prometheus about both tracks, then let the pure judge decide."""

from datetime import datetime

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import SpeculativeMethod
from specfleet.api.status import Analysis, Measurements, SpeculativeDeploymentStatus, Verdict
from specfleet.controller.metrics import ANALYSES, ANALYSIS_SECONDS
from specfleet.judge import judge
from specfleet.metrics.prometheus import MetricsProvider, ProviderError
from specfleet.metrics.promql import SCALAR_QUERIES, TrackSelector, acceptance_per_position

MAX_REASON = 1000


def measure(provider: MetricsProvider, selector: TrackSelector, window: str) -> Measurements:
    values = {field: provider.scalar(build(selector, window)) for field, build in SCALAR_QUERIES.items()}
    per_position = provider.by_label(acceptance_per_position(selector, window), "position")
    positions = sorted(int(p) for p in per_position if p.isdigit())
    return Measurements(
        **{k: round(v, 6) if v is not None else None for k, v in values.items()},
        acceptance_per_position=[round(per_position[str(p)], 4) for p in positions],
    )


def analyze(
    provider: MetricsProvider, sdep: SpeculativeDeployment, status: SpeculativeDeploymentStatus, now: datetime
) -> Analysis:
    """Blocking: run it in a thread. Prometheus failures become an Error verdict, never an exception."""
    assert status.canary_revision is not None and status.stable_revision is not None
    meta, spec = sdep.metadata, sdep.spec
    window = spec.rollout.analysis.window
    canary = TrackSelector(meta.namespace, meta.name, "canary", status.canary_revision)
    stable = TrackSelector(meta.namespace, meta.name, "stable", status.stable_revision)
    base = {"time": now, "revision": status.canary_revision, "step": status.current_step or 0}
    with ANALYSIS_SECONDS.time():
        try:
            canary_values = measure(provider, canary, window)
            stable_values = measure(provider, stable, window)
        except ProviderError as error:
            ANALYSES.labels(Verdict.ERROR.value).inc()
            return Analysis(**base, verdict=Verdict.ERROR, reasons=[str(error)[:MAX_REASON]])
    result = judge(
        spec.rollout.guardrails,
        canary_values,
        stable_values,
        speculative=spec.speculative.method is not SpeculativeMethod.NONE,
    )
    ANALYSES.labels(result.verdict.value).inc()
    return Analysis(
        **base,
        verdict=result.verdict,
        reasons=[r[:MAX_REASON] for r in result.reasons],
        canary=canary_values,
        stable=stable_values,
    )
