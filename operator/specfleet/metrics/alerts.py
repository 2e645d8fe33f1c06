"""Alert rules that ship with the chart: PromQL written once, here, and rendered into a PrometheusRule."""

from specfleet.metrics import names

_BY = f"{names.NAMESPACE}, {names.SDEP}, {names.TRACK}"

ACCEPTANCE_FLOOR = 0.60
"""Seed 002: below 60% accepted, speculation rarely pays for its drafter."""
CUSTOM_GUARDRAILS = 'guardrail=~"custom:.+"'
"""The operator's `specfleet_guardrail*` series of user-defined guardrails (`rollout.guardrails.custom`)."""
OPERATOR_TARGET = ("specfleet_io_component", "operator")
"""The target label the chart's ServiceMonitor puts on the operator's scrape targets (and so on their `up`
series), whatever the release is called: how SpecfleetOperatorDown finds them."""
STUCK_FOR = "2h"
"""How long a fleet may stay Pending or Progressing before SpecfleetFleetStuck fires: past any default rollout
(its steps' pauses plus analyses) and the default 30m progress deadline of each step."""


def _by_track(metric: str, extra: str = "") -> str:
    return f"sum by ({_BY}) (rate({metric}{extra}[5m]))"


def _p95_by_fleet(histogram: str, track: str) -> str:
    return (
        f"histogram_quantile(0.95, sum by ({names.NAMESPACE}, {names.SDEP}, le) "
        f'(rate({histogram}_bucket{{{names.TRACK}="{track}"}}[5m])))'
    )


def _custom_verdict(verdict: str) -> str:
    """A custom guardrail at this verdict in the live canary's last analysis (`max`: every operator replica
    exports it)."""
    series = f'specfleet_guardrail_verdict{{{CUSTOM_GUARDRAILS}, verdict="{verdict}"}}'
    return f"max by ({names.NAMESPACE}, {names.SDEP}, guardrail) ({series}) == 1"


def _in_phase(phases: str) -> str:
    """A fleet in one of `phases` (a regex); `max`: every operator replica exports the phase."""
    return f'max by ({names.NAMESPACE}, {names.SDEP}, phase) (specfleet_rollout_phase{{phase=~"{phases}"}}) == 1'


_OPERATOR_UP = f'up{{{OPERATOR_TARGET[0]}="{OPERATOR_TARGET[1]}"}}'

RULES: list[dict[str, object]] = [
    {
        "alert": "SpecfleetCanaryRolledBack",
        "expr": _in_phase("RolledBack|Aborted"),
        "for": "0m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A fleet's canary was rolled back or aborted",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} is {{ $labels.phase }}: its last "
            "canary was stopped and stable serves. kubectl specfleet status shows the judge's reasons; the alert "
            "resolves once the spec changes or kubectl specfleet retry starts a new canary.",
        },
    },
    {
        "alert": "SpecfleetFleetDegraded",
        "expr": _in_phase("Degraded"),
        "for": "5m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A fleet is Degraded: a promotion overran its progress deadline, or its spec is invalid",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} has been Degraded for 5 minutes: "
            "its promotion overran rollout.progressDeadline (the canary keeps serving) or its spec cannot be "
            "rendered (condition SpecValid says why).",
        },
    },
    {
        "alert": "SpecfleetFleetStuck",
        "expr": _in_phase("Pending|Progressing"),
        "for": STUCK_FOR,
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": f"A fleet has been Pending or Progressing for {STUCK_FOR}",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} has been {{ $labels.phase }} "
            f"for {STUCK_FOR}: no replica Ready, or a rollout that neither finishes nor fails. The Progressing "
            "condition's reason says what it waits for (kubectl specfleet status).",
        },
    },
    {
        "alert": "SpecfleetReconcileErrors",
        "expr": 'sum by (namespace, pod) (rate(specfleet_reconciles_total{result="error"}[5m])) > 0',
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "The operator has failed reconciles for 15 minutes",
            "description": "{{ $labels.namespace }}/{{ $labels.pod }} failed {{ $value | humanize }} reconciles per "
            "second over the last 5 minutes, for 15 minutes: its log says which fleets and why (RBAC, the API "
            "server, an invalid object).",
        },
    },
    {
        "alert": "SpecfleetOperatorDown",
        "expr": f"absent({_OPERATOR_UP} == 1)",
        "for": "5m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "No specfleet operator answers Prometheus' scrapes",
            "description": "For 5 minutes no target of the operator's ServiceMonitor was up: no replica runs or is "
            "Ready, or Prometheus cannot reach it. Rollouts in progress neither advance nor roll back meanwhile.",
        },
    },
    {
        "alert": "SpecfleetSpeculationNotPaying",
        "expr": "specfleet_speculation_paying == 0",
        "for": "0m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A fleet's speculative config no longer measures as it did when promoted",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }}: the operator found drift for "
            "rollout.drift.looks windows in a row (acceptance alpha fallen, or per-token latency risen at comparable "
            "load). kubectl specfleet status shows the numbers; onDrift: Rollback canaries back to the previous "
            "config.",
        },
    },
    {
        "alert": "SpecfleetCustomGuardrailFailing",
        "expr": _custom_verdict("Fail"),
        "for": "0m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A canary fails a user-defined guardrail",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }}: the live canary's last analysis "
            "failed {{ $labels.guardrail }} (rollout.guardrails.custom): its bound is surely past the limit. The "
            "canary is rolled back once analysis.failureLimit is exceeded; kubectl specfleet status shows the "
            "numbers.",
        },
    },
    {
        "alert": "SpecfleetCustomGuardrailUndecided",
        "expr": _custom_verdict("Inconclusive"),
        "for": "30m",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": "A user-defined guardrail has been Inconclusive for 30 minutes",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }}: {{ $labels.guardrail }} "
            "has not been decided for 30 minutes. With 'no data for ...' in the verdict's reason Prometheus has no "
            "such series for the canary or stable (a misspelt metric name, matchLabels that match nothing, a "
            "metric the pods do not export): the rollout waits, then analysis.onNoData acts.",
        },
    },
    {
        "alert": "SpecfleetLowAcceptanceAlpha",
        "expr": (
            _by_track(names.ACCEPTED_PER_POSITION, '{position="0"}')
            + f" / ({_by_track(names.NUM_DRAFTS)} > 0) < {ACCEPTANCE_FLOOR}"
        ),
        "for": "5m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Per-token acceptance alpha below 60% for 5 minutes",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} ({{ $labels.specfleet_io_track }}) "
            "accepts the first draft token of {{ $value | humanizePercentage }} of drafts: the drafter may cost "
            "more than it saves. This ratio does not depend on numSpeculativeTokens.",
        },
    },
    {
        "alert": "SpecfleetLowAcceptanceRate",
        "expr": (f"{_by_track(names.ACCEPTED_TOKENS)} / ({_by_track(names.DRAFT_TOKENS)} > 0) < {ACCEPTANCE_FLOOR}"),
        "for": "5m",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": "Accepted/drafted tokens below 60% for 5 minutes (falls as numSpeculativeTokens grows)",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} ({{ $labels.specfleet_io_track }}) "
            "accepts {{ $value | humanizePercentage }} of drafted tokens. This is E[accepted] / k: a good drafter "
            "(alpha 0.8) shows 0.59 at k=4, so compare with SpecfleetLowAcceptanceAlpha before acting.",
        },
    },
    {
        "alert": "SpecfleetCanaryTokenLatencyWorseThanStable",
        "expr": (
            f"{_p95_by_fleet(names.TIME_PER_OUTPUT_TOKEN, 'canary')}"
            f" > on ({names.NAMESPACE}, {names.SDEP}) 1.1 * {_p95_by_fleet(names.TIME_PER_OUTPUT_TOKEN, 'stable')}"
        ),
        "for": "5m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Canary p95 per-token latency more than 10% above stable",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }}: the canary's p95 time per "
            "output token is {{ $value | humanizeDuration }}, more than 10% above the stable track's.",
        },
    },
]
