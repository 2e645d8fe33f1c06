"""The registry of built-in guardrails, one module each (`judge.guardrail.Guardrail`). The judge runs them in
this order, which is the order of the checks in status and in the CLI's table."""

from specfleet.judge.guardrail import Guardrail
from specfleet.judge.guardrails import (
    acceptance,
    error_rate,
    error_rate_increase,
    kv_cache,
    queue_time,
    step_latency,
    throughput,
    time_to_first_token,
    token_latency_mean,
    token_latency_p95,
)

GUARDRAILS: tuple[Guardrail, ...] = (
    acceptance.GUARDRAIL,
    kv_cache.GUARDRAIL,
    token_latency_p95.GUARDRAIL,
    token_latency_mean.GUARDRAIL,
    step_latency.GUARDRAIL,
    queue_time.GUARDRAIL,
    throughput.GUARDRAIL,
    error_rate.GUARDRAIL,
    error_rate_increase.GUARDRAIL,
    time_to_first_token.GUARDRAIL,
)


def described() -> list[dict[str, object]]:
    """The registry as data, for what reads it without importing the judge (the CLI's guardrail table)."""
    return [
        {
            "name": g.name,
            "field": g.field,
            "default": g.default(),
            "label": g.label,
            "reads": g.reads.value,
            "metrics": list(g.metrics),
            "bounded": g.bounded,
        }
        for g in GUARDRAILS
    ]
