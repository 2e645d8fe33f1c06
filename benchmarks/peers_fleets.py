"""What benchmarks/peers.py gives each controller: the settings compared, every controller's fleet manifests
(a SpeculativeDeployment; an Argo Rollout and its AnalysisTemplate; a Flagger Canary, its Deployment and
MetricTemplates) asking the same two guardrails, the simulator's scenario, and the fleets of a phase."""

from dataclasses import dataclass, field
from typing import Any

from specfleet.api.vocabulary import Track

from benchkit import one_replica_fleet

CONTROLLERS = ("specfleet", "argo", "flagger")


SETTINGS = ("documented", "tuned")


KINDS = ("breach", "aa", "good", "outage")


PHASES = ("rollback", "scale")


MODEL = "meta-llama/Llama-3.1-8B-Instruct"


GOOD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
"""The stable's drafter; canaries use the same weights under another owner, which the scenario matches."""


LATENCY_LIMIT = 1.1
"""p95 per-token latency canary / stable at most this (specfleet's maxTokenLatencyP95Regression 0.1)."""


ALPHA_FLOOR = 0.6
"""specfleet's minAcceptanceAlpha."""


COLD_START_SECONDS = 60


OUTAGE_SECONDS = 120


AA_OBSERVE_SECONDS = {"documented": 600, "tuned": 180}


ARGO = ("argoproj.io", "v1alpha1")


FLAGGER = ("flagger.app", "v1beta1")


@dataclass(frozen=True)
class Setting:
    """How one controller is configured in one setting (times in seconds)."""

    interval: int
    window: int
    failures: int
    """Failures tolerated before a rollback: specfleet failureLimit, Argo failureLimit, Flagger threshold - 1."""
    hold: int
    """How long a promotable canary is held before it may be promoted (10 Flagger iterations)."""


SETUPS: dict[tuple[str, str], Setting] = {
    ("specfleet", "documented"): Setting(interval=60, window=300, failures=0, hold=600),
    ("argo", "documented"): Setting(interval=300, window=300, failures=3, hold=600),
    ("flagger", "documented"): Setting(interval=60, window=60, failures=1, hold=600),
    ("specfleet", "tuned"): Setting(interval=10, window=30, failures=0, hold=100),
    ("argo", "tuned"): Setting(interval=10, window=30, failures=3, hold=100),
    ("flagger", "tuned"): Setting(interval=10, window=30, failures=1, hold=100),
}
"""specfleet's defaults are interval 1m, window 5m, failureLimit 0. Argo's documented AnalysisTemplate
(docs/features/analysis.md) measures every 5m over [5m] with failureLimit 3; Flagger's blue/green tutorial
(kubernetes-blue-green.md) uses interval 1m, threshold 2, iterations 10, metric interval 1m. Tuned: the
interval and window only; Flagger's interval cannot go below 10 s."""


def drafter(kind: str, setting: str) -> str:
    """The canary's drafter name: the scenario turns breach drafters bad and starves A/A ones cold."""
    return f"{kind}-{setting}/EAGLE3-LLaMA3.1-Instruct-8B"


def speculative(model: str | None) -> dict[str, Any]:
    """specfleet's `speculative` section: EAGLE-3 at k=4 with this drafter, or none."""
    if model is None:
        return {"method": "none"}
    return {"method": "eagle3", "model": model, "revision": "main", "numSpeculativeTokens": 4}


def stable_drafter(kind: str) -> str | None:
    """The good fleets start from a non-speculative stable; the others from the good drafter."""
    return None if kind == "good" else GOOD


def held(kind: str) -> bool:
    """Breach, A/A and outage canaries stay live (long pause); good ones may be promoted."""
    return kind != "good"


def specfleet_fleet(name: str, kind: str, setting: str, model: str | None) -> dict[str, Any]:
    """A one-replica SpeculativeDeployment; one canary step at 50%."""
    setup = SETUPS["specfleet", setting]
    pause = "2h" if held(kind) else f"{setup.hold}s"
    rollout: dict[str, Any] = {"steps": [{"weight": 50, "pause": {"duration": pause}}]}
    if setting == "tuned":
        rollout["analysis"] = {"interval": f"{setup.interval}s", "window": f"{setup.window}s"}
        rollout["guardrails"] = {"minDraftTokens": 200, "minRequests": 20}
    return one_replica_fleet(name, speculative(model), rollout=rollout)


def pod_template(name: str, model: str | None) -> dict[str, Any]:
    """The pod specfleet would run for this config, with only the label `app: <name>` (peers' pods)."""
    from specfleet.api.resource import SpeculativeDeployment
    from specfleet.render.manifests import deployment, revision

    sdep = SpeculativeDeployment.from_mapping(one_replica_fleet(name, speculative(model)))
    template = deployment(sdep, Track.STABLE, revision(sdep.spec), 1)["spec"]["template"]
    return {"metadata": {"labels": {"app": name}}, "spec": template["spec"]}


def argo_queries(namespace: str, window: int) -> dict[str, str]:
    """The two guardrails in PromQL, canary and stable told apart by `rollouts_pod_template_hash`."""

    def track(hash_arg: str) -> str:
        return f'namespace="{namespace}",app="{{{{args.app}}}}",rollouts_pod_template_hash="{{{{args.{hash_arg}}}}}"'

    def p95(hash_arg: str) -> str:
        bucket = "vllm:request_time_per_output_token_seconds_bucket"
        return f"histogram_quantile(0.95, sum by (le) (rate({bucket}{{{track(hash_arg)}}}[{window}s])))"

    canary = track("canary-hash")
    return {
        "token-latency-p95-ratio": f"{p95('canary-hash')} / {p95('stable-hash')}",
        "acceptance-alpha": (
            f'sum(increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{{{canary},position="0"}}[{window}s]))'
            f" / sum(increase(vllm:spec_decode_num_drafts_total{{{canary}}}[{window}s]))"
        ),
    }


def argo_template(namespace: str, setting: str, prometheus_url: str) -> dict[str, Any]:
    """One AnalysisTemplate per setting, run as background analysis of every Rollout of that setting."""
    setup = SETUPS["argo", setting]
    conditions = {
        "token-latency-p95-ratio": f"result[0] <= {LATENCY_LIMIT}",
        "acceptance-alpha": f"result[0] >= {ALPHA_FLOOR}",
    }
    metrics = [
        {
            "name": metric,
            "interval": f"{setup.interval}s",
            "failureLimit": setup.failures,
            "successCondition": conditions[metric],
            "provider": {"prometheus": {"address": prometheus_url, "query": query}},
        }
        for metric, query in argo_queries(namespace, setup.window).items()
    ]
    return {
        "apiVersion": "/".join(ARGO),
        "kind": "AnalysisTemplate",
        "metadata": {"name": f"vllm-{setting}"},
        "spec": {"args": [{"name": "app"}, {"name": "canary-hash"}, {"name": "stable-hash"}], "metrics": metrics},
    }


def argo_rollout(name: str, kind: str, setting: str, model: str | None) -> dict[str, Any]:
    """A basic canary (replica weights through one Service): 2 replicas, 50%, background analysis."""
    setup = SETUPS["argo", setting]
    pause: dict[str, Any] = {} if held(kind) else {"duration": f"{setup.hold}s"}
    return {
        "apiVersion": "/".join(ARGO),
        "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, model),
            "strategy": {
                "canary": {
                    "steps": [{"setWeight": 50}, {"pause": pause}],
                    "analysis": {
                        "templates": [{"templateName": f"vllm-{setting}"}],
                        "args": [
                            {"name": "app", "value": name},
                            {"name": "canary-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
                            {"name": "stable-hash", "valueFrom": {"podTemplateHashValue": "Stable"}},
                        ],
                    },
                }
            },
        },
    }


def flagger_templates(namespace: str, prometheus_url: str) -> list[dict[str, Any]]:
    """MetricTemplates with the same PromQL: canary pods have `app=<target>`, primary ones `<target>-primary`."""

    def track(suffix: str) -> str:
        return f'namespace="{{{{ namespace }}}}",app="{{{{ target }}}}{suffix}"'

    def p95(suffix: str) -> str:
        bucket = "vllm:request_time_per_output_token_seconds_bucket"
        return f"histogram_quantile(0.95, sum by (le) (rate({bucket}{{{track(suffix)}}}[{{{{ interval }}}}])))"

    queries = {
        "token-latency-p95-ratio": f"{p95('')} / {p95('-primary')}",
        "acceptance-alpha": (
            f'sum(increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{{{track("")},position="0"}}'
            f"[{{{{ interval }}}}])) / sum(increase(vllm:spec_decode_num_drafts_total{{{track('')}}}"
            f"[{{{{ interval }}}}]))"
        ),
    }
    return [
        {
            "apiVersion": "/".join(FLAGGER),
            "kind": "MetricTemplate",
            "metadata": {"name": metric, "namespace": namespace},
            "spec": {"provider": {"type": "prometheus", "address": prometheus_url}, "query": query},
        }
        for metric, query in queries.items()
    ]


def flagger_deployment(name: str, model: str | None) -> dict[str, Any]:
    """The target Deployment; Flagger copies it to `<name>-primary` and scales it to 0 between canaries."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": pod_template(name, model)},
    }


def flagger_canary(name: str, kind: str, setting: str) -> dict[str, Any]:
    """Blue/green (the kubernetes provider's only mode) with iterations; the two MetricTemplates."""
    setup = SETUPS["flagger", setting]
    iterations = 10_000 if held(kind) else setup.hold // setup.interval
    metric_interval = f"{setup.window}s"
    return {
        "apiVersion": "/".join(FLAGGER),
        "kind": "Canary",
        "metadata": {"name": name},
        "spec": {
            "provider": "kubernetes",
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "progressDeadlineSeconds": 600,
            "service": {"port": 8000, "targetPort": 8000},
            "analysis": {
                "interval": f"{setup.interval}s",
                "threshold": setup.failures + 1,
                "iterations": iterations,
                "metrics": [
                    {
                        "name": "token-latency-p95-ratio",
                        "templateRef": {"name": "token-latency-p95-ratio"},
                        "thresholdRange": {"max": LATENCY_LIMIT},
                        "interval": metric_interval,
                    },
                    {
                        "name": "acceptance-alpha",
                        "templateRef": {"name": "acceptance-alpha"},
                        "thresholdRange": {"min": ALPHA_FLOOR},
                        "interval": metric_interval,
                    },
                ],
            },
        },
    }


def scenario(load: float, breach: bool, cold: bool) -> dict[str, Any]:
    """The simulator's document: every pod alpha 0.8 with noise; breach drafters at 0.3; A/A canaries idle."""
    pairs: list[dict[str, Any]] = []
    if breach:
        pairs += [{"target": "*", "drafter": drafter("breach", s), "acceptance": 0.3} for s in SETTINGS]
    if cold:
        pairs += [{"target": "*", "drafter": drafter("aa", s), "load": 0.0} for s in SETTINGS]
    return {"defaults": {"acceptance": 0.8, "load": load, "output_tokens": 128, "noise": 0.05}, "pairs": pairs}


@dataclass
class Fleet:
    """One fleet of one controller in one setting, and what was seen of it."""

    controller: str
    setting: str
    kind: str
    name: str
    canary_hash: str | None = None
    initial: str | None = None
    """specfleet: stable revision before the canary; Argo: stable pod hash."""
    rolled_back_at: float | None = None
    outcome: str | None = None
    notes: list[str] = field(default_factory=list)


def fleets_of(kind: str, trials: int, settings: tuple[str, ...]) -> list[Fleet]:
    return [
        Fleet(controller, setting, kind, f"{kind}-{setting[0]}-{i:02d}")
        for controller in CONTROLLERS
        for setting in settings
        for i in range(trials)
    ]


def warmup_seconds(settings: tuple[str, ...]) -> int:
    """From the canaries' start to the breach: every controller has judged the canary good at least once
    (Argo's documented 5m interval measures at the start, on a cold range, and again at 5 minutes)."""
    return max(90, *(SETUPS[c, s].interval + 30 for c in CONTROLLERS for s in settings))
