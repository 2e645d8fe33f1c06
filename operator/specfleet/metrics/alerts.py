"""Alert rules that ship with the chart: PromQL written once, here, and rendered into a PrometheusRule."""

from specfleet.metrics import names

_BY = f"{names.NAMESPACE}, {names.SDEP}, {names.TRACK}"

ACCEPTANCE_FLOOR = 0.60
"""Seed 002: below 60% accepted, speculation rarely pays for its drafter."""

RULES: list[dict[str, object]] = [
    {
        "alert": "SpecfleetLowAcceptanceRate",
        "expr": (
            f"sum by ({_BY}) (rate({names.ACCEPTED_TOKENS}[5m]))"
            f" / (sum by ({_BY}) (rate({names.DRAFT_TOKENS}[5m])) > 0) < {ACCEPTANCE_FLOOR}"
        ),
        "for": "5m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Speculative decoding acceptance below 60% for 5 minutes",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }} ({{ $labels.specfleet_io_track }}) "
            "accepts {{ $value | humanizePercentage }} of drafted tokens: the drafter may cost more than it saves.",
        },
    },
    {
        "alert": "SpecfleetCanaryInterTokenLatencyWorseThanStable",
        "expr": (
            f"histogram_quantile(0.95, sum by ({names.NAMESPACE}, {names.SDEP}, le) "
            f'(rate({names.INTER_TOKEN_LATENCY}_bucket{{{names.TRACK}="canary"}}[5m])))'
            f" > on ({names.NAMESPACE}, {names.SDEP}) 1.1 * histogram_quantile(0.95, sum by "
            f"({names.NAMESPACE}, {names.SDEP}, le) "
            f'(rate({names.INTER_TOKEN_LATENCY}_bucket{{{names.TRACK}="stable"}}[5m])))'
        ),
        "for": "5m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Canary p95 inter-token latency more than 10% above stable",
            "description": "{{ $labels.namespace }}/{{ $labels.specfleet_io_name }}: canary p95 ITL is "
            "{{ $value | humanizeDuration }}, worse than the stable track.",
        },
    },
]
