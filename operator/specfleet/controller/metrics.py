"""The operator's own Prometheus metrics (served by `specfleet run --metrics-port`).

Counters and histograms are updated where things happen. The per-object gauges (rollout phase, canary
weight) are read from the watch store at scrape time, so they can never disagree with it. Names are
constants because the chart's Grafana dashboard (`specfleet_workshop.chartgen`) queries them.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from specfleet.api.status import Phase, Verdict
from specfleet.api.vocabulary import ConditionType
from specfleet.metrics import names

RECONCILES_TOTAL = "specfleet_reconciles_total"
ROLLOUT_EVENTS_TOTAL = "specfleet_rollout_events_total"
ANALYSES_TOTAL = "specfleet_analyses_total"
ANALYSIS_DURATION = "specfleet_analysis_duration_seconds"
WATCHES_TOTAL = "specfleet_watches_total"
WATCH_DURATION = "specfleet_watch_duration_seconds"
ROLLOUT_PHASE = "specfleet_rollout_phase"
CANARY_WEIGHT = "specfleet_canary_weight"
SPECULATION_PAYING = "specfleet_speculation_paying"
SPEEDUP = "specfleet_speedup"
GUARDRAIL = "specfleet_guardrail"
GUARDRAIL_VERDICT = "specfleet_guardrail_verdict"
CHECK_BOUNDS = ("estimate", "lower", "upper", "limit")
LEADING = "specfleet_leader"

API_REQUESTS = Counter(
    "specfleet_api_requests_total", "Kubernetes API requests the operator made", ["verb", "resource"]
)
RECONCILES = Counter(RECONCILES_TOTAL, "Reconciles of SpeculativeDeployments", ["result"])
RECONCILE_SECONDS = Histogram("specfleet_reconcile_duration_seconds", "Time to reconcile one object")
TRANSITIONS = Counter(ROLLOUT_EVENTS_TOTAL, "Rollout transitions (Promoted, RolledBack, Aborted, ...)", ["reason"])
ANALYSES = Counter(ANALYSES_TOTAL, "Canary analyses by verdict", ["verdict"])
ANALYSIS_SECONDS = Histogram(ANALYSIS_DURATION, "Time to query Prometheus for one analysis")
WATCHES = Counter(WATCHES_TOTAL, "Canary scrapes checked for failures between analyses, by verdict", ["verdict"])
WATCH_SECONDS = Histogram(WATCH_DURATION, "Time to query Prometheus for the ranges of one watch")
LEADER = Gauge(LEADING, "1 while this replica runs the reconcile workers (it holds the lease, or runs alone)")
OWNED_FLEETS = "specfleet_owned_fleets"
OWNED = Gauge(
    OWNED_FLEETS,
    "SpeculativeDeployments this process reconciles: its shard's, stamped with its Lease (with leader election)",
)
STANDBY_FLEETS = "specfleet_standby_fleets"
STANDBY = Gauge(
    STANDBY_FLEETS,
    "SpeculativeDeployments this process leaves to the live holder of another Lease (another operator, or during "
    "a hand-over another shard), by that Lease",
    ["lease"],
)
NOTIFICATIONS_SENT_TOTAL = "specfleet_notifications_sent_total"
NOTIFICATIONS_FAILED_TOTAL = "specfleet_notifications_failed_total"
NOTIFICATIONS_DROPPED_TOTAL = "specfleet_notifications_dropped_total"
NOTIFICATIONS_SENT = Counter(
    NOTIFICATIONS_SENT_TOTAL, "Notifications delivered, by sink and transition", ["sink", "transition"]
)
NOTIFICATIONS_FAILED = Counter(
    NOTIFICATIONS_FAILED_TOTAL,
    "Notifications given up on after every attempt failed, by sink and transition",
    ["sink", "transition"],
)
NOTIFICATIONS_DROPPED = Counter(
    NOTIFICATIONS_DROPPED_TOTAL,
    "Notifications not attempted: the queue was full (queue_full), or a namespace's Secret could not be read "
    "(secret_unreadable)",
    ["reason"],
)
NOTIFICATION_RETRIES = Counter(
    "specfleet_notification_retries_total", "Notification attempts that failed and were tried again", ["sink"]
)


class FleetCollector(Collector):
    """`specfleet_rollout_phase` (1 for the current phase, 0 for the others), `specfleet_canary_weight`,
    `specfleet_speculation_paying`, `specfleet_speedup`, and the live canary's guardrails at its last
    analysis (`specfleet_guardrail`, `specfleet_guardrail_verdict`, one `guardrail` label value per check,
    `custom:<name>` for user-defined ones).

    Labelled like the vLLM pods' series (`namespace`, `specfleet_io_name`), so dashboards can put the
    rollout next to the acceptance rate. `objects` is called from the metrics server's thread: it must
    return a snapshot, not a live view of the store.
    """

    def __init__(self, objects: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._objects = objects

    def collect(self) -> Iterator[GaugeMetricFamily]:
        keys = [names.NAMESPACE, names.SDEP]
        phase = GaugeMetricFamily(ROLLOUT_PHASE, "Rollout phase of a SpeculativeDeployment", labels=[*keys, "phase"])
        weight = GaugeMetricFamily(CANARY_WEIGHT, "Canary share of traffic, percent", labels=keys)
        paying = GaugeMetricFamily(
            SPECULATION_PAYING,
            "1 while the serving revision measures as it did at promotion, 0 once it drifted (rollout.drift)",
            labels=keys,
        )
        speedup = GaugeMetricFamily(
            SPEEDUP,
            "Stable's per-token speed-up over the holdback (rollout.holdback), last window: estimate and bounds",
            labels=[*keys, "bound"],
        )
        guardrail = GaugeMetricFamily(
            GUARDRAIL,
            "The live canary's guardrails at its last analysis: estimate, bounds and limit, in the limit's unit",
            labels=[*keys, "guardrail", "bound"],
        )
        verdict = GaugeMetricFamily(
            GUARDRAIL_VERDICT,
            "The live canary's guardrails at its last analysis: 1 for the check's verdict, 0 for the others",
            labels=[*keys, "guardrail", "verdict"],
        )
        for obj in self._objects():
            meta, status = obj.get("metadata") or {}, obj.get("status") or {}
            key = [meta.get("namespace", ""), meta.get("name", "")]
            current = status.get("phase", Phase.PENDING.value)
            for candidate in Phase:
                phase.add_metric([*key, candidate.value], 1.0 if candidate.value == current else 0.0)
            weight.add_metric(key, float(status.get("canaryWeight", 0)))
            condition: Mapping[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == ConditionType.SPECULATION_PAYING), {}
            )
            if condition.get("status") in ("True", "False"):
                paying.add_metric(key, 1.0 if condition["status"] == "True" else 0.0)
            measured = (status.get("holdback") or {}).get("speedup") or {}
            for bound in ("estimate", "lower", "upper"):
                if isinstance(measured.get(bound), int | float):
                    speedup.add_metric([*key, bound], float(measured[bound]))
            for check in _live_checks(status):
                name = str(check.get("guardrail", ""))
                for bound in CHECK_BOUNDS:
                    if isinstance(check.get(bound), int | float):
                        guardrail.add_metric([*key, name, bound], float(check[bound]))
                for judged in Verdict:
                    verdict.add_metric([*key, name, judged.value], 1.0 if check.get("verdict") == judged else 0.0)
        yield phase
        yield weight
        yield paying
        yield speedup
        yield guardrail
        yield verdict


def _live_checks(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The last analysis's checks while the canary it judged is live: a finished rollout's stay in status,
    but are no longer a state to alert on."""
    analysis = status.get("lastAnalysis") or {}
    live = status.get("canaryRevision")
    if not live or analysis.get("revision") != live:
        return []
    return [c for c in analysis.get("checks") or [] if isinstance(c, Mapping)]
