"""What `kubectl get sdep` shows. A printer column is the JSONPath of one field, so the status carries each
column's text ready-made (`api.crd.PRINTER_COLUMNS` reads these fields); they are derived from the rest of
the status at the end of every pass, never read back."""

from specfleet.api.spec import (
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    SpeculativeDeploymentSpec,
    SpeculativeMethod,
    SpeculativeSpec,
)
from specfleet.api.status import SpeculativeDeploymentStatus, StatusChanges
from specfleet.rollout.state import served_spec
from specfleet.rollout.types import live_canary


def with_columns(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus) -> SpeculativeDeploymentStatus:
    """`status` with the fields the printer columns read filled in from the rest of it."""
    last = status.last_analysis
    p95 = last.canary.token_latency_p95_seconds if last is not None else None
    return status.model_copy(
        update=StatusChanges(
            step_progress=step_progress(spec, status),
            ready_summary=f"{status.replicas}/{spec.replicas}",
            config=config_summary(spec, status)[:1024],
            canary_token_latency_p95_ms=None if p95 is None else round(p95 * 1000, 2),
        )
    )


def step_progress(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus) -> str:
    """`2/3` while a canary is at its second of three steps; empty without one (or while it is promoted)."""
    if status.current_step is None or live_canary(status) is None:
        return ""
    return f"{status.current_step + 1}/{len(spec.rollout.steps)}"


def config_summary(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus) -> str:
    """Stable's config (`eagle3 k=4`), then the live canary's (`ngram k=5 -> eagle3 k=4`), or the number of
    candidates an experiment measures side by side beside stable."""
    serving = status.stable_serving or {}
    parts = [short_config(SpeculativeSpec.model_validate(serving["speculative"]))] if "speculative" in serving else []
    canary = live_canary(status)
    if canary is not None:
        parts.append(short_config(served_spec(spec, status, canary).speculative))
    text = " -> ".join(parts)
    experiment = status.experiment
    if canary is None and experiment is not None and experiment.side_by_side and experiment.ended_at is None:
        count = len(experiment.candidates)
        text += f" vs {count} candidate{'s' if count != 1 else ''}"
    return text


def short_config(speculative: SpeculativeSpec) -> str:
    """The method and the depth k; with a batch-size schedule, each range's depth from the smallest batch up."""
    if speculative.method is SpeculativeMethod.NONE:
        return "no speculation"
    schedule = sorted(speculative.num_speculative_tokens_per_batch_size or [], key=lambda row: row.start)
    depth = speculative.num_speculative_tokens or DEFAULT_NUM_SPECULATIVE_TOKENS
    depths = "/".join(str(row.num_tokens) for row in schedule) if schedule else str(depth)
    return f"{speculative.method.value} k={depths}"
