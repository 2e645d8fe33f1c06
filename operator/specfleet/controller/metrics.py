"""The operator's own Prometheus metrics (served by `specfleet run --metrics-port`)."""

from prometheus_client import Counter, Histogram

API_REQUESTS = Counter(
    "specfleet_api_requests_total", "Kubernetes API requests the operator made", ["verb", "resource"]
)
RECONCILES = Counter("specfleet_reconciles_total", "Reconciles of SpeculativeDeployments", ["result"])
RECONCILE_SECONDS = Histogram("specfleet_reconcile_duration_seconds", "Time to reconcile one object")
TRANSITIONS = Counter(
    "specfleet_rollout_events_total", "Rollout transitions (Promoted, RolledBack, Aborted, ...)", ["reason"]
)
ANALYSES = Counter("specfleet_analyses_total", "Canary analyses by verdict", ["verdict"])
ANALYSIS_SECONDS = Histogram("specfleet_analysis_duration_seconds", "Time to query Prometheus for one analysis")
