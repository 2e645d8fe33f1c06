"""Benchmark: specfleet side by side with Argo Rollouts and Flagger, in one run, on one dev cluster.

One dev cluster of its own, the real Prometheus (5 s scrape), the simulator, and three controllers, each
in its own namespace: specfleet (`specfleet run`), Argo Rollouts (`rollouts-controller --namespaced`, out
of cluster) and Flagger (`flagger -mesh-provider kubernetes`, out of cluster), the peers built by
`specfleet dev build --peers` (this script builds them when missing). Every fleet is a Llama-3.1-8B
vLLM fleet on fake MI300X nodes whose pods the simulator serves, judged by the same two guardrails:
p95 per-token latency (`vllm:request_time_per_output_token_seconds`) at most 10% above stable's, and
per-token acceptance alpha (position-0 accepted / drafts) at least 0.6. Each controller runs in two
settings: `documented` (the peer's documented example: Argo `interval: 5m`, `failureLimit: 3`, a [5m]
query; Flagger blue/green `interval: 1m`, `threshold: 2`, `iterations: 10`; specfleet's defaults) and
`tuned` (every controller at a 10 s interval and a 30 s window: Flagger's minimum interval).

Phases, one after the other (each fleet is deleted once measured, so the simulator serves a few hundred
pods at most), per setting: `breach` fleets (the canary's drafter turns bad at t0: alpha 0.8 -> 0.3; time
until the canary gets no traffic) together with `good` fleets (a non-speculative stable, an EAGLE-3 canary
1.9x faster per token: who promotes it); then `aa` fleets (an A/A canary with noise whose pods get no
load for their first minute: false rollbacks). Last, `outage` fleets with a live, healthy canary:
Prometheus is stopped for 2 minutes mid-analysis (what each does). One simulator per namespace.

Then fleet scale (`fleetscale.py`): `--scale` one-replica fleets of each controller (a SpeculativeDeployment;
a Rollout and its Service; a Deployment and its Canary; all at the tuned 10 s interval), one controller at
a time, started fresh in a namespace of its own on at least 2 x N / 8 fake MI300X nodes (a Flagger fleet
briefly has two pods): time until all converged (Healthy, Healthy, Initialized), the controller's CPU
seconds and peak RSS, its API requests per object (from the API server's audit log), and its writes per
minute over `--idle` seconds in which nothing changes.

    python benchmarks/peers.py --trials 20 --phases rollback   # both settings, 54 minutes on 2 cores
    python benchmarks/peers.py --phases scale --scale 1000      # about 40 minutes (1,000 per controller)
    python benchmarks/peers.py --quick                # tuned settings, 3 trials, about 15 minutes

Prints the tables and the JSON, writes docs/peers-rollback.png. The cluster and every process stop on exit.
"""

import argparse
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
import yaml

from specfleet.api.vocabulary import GROUP, LABEL_TRACK, PLURAL, VERSION, Track

import fleetscale
from benchkit import ROOT, background, cluster_session, free_port, one_replica_fleet, percentile, wait_until

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


# specfleet


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


# Argo Rollouts


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


# Flagger


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


# scenario


def scenario(load: float, breach: bool, cold: bool) -> dict[str, Any]:
    """The simulator's document: every pod alpha 0.8 with noise; breach drafters at 0.3; A/A canaries idle."""
    pairs: list[dict[str, Any]] = []
    if breach:
        pairs += [{"target": "*", "drafter": drafter("breach", s), "acceptance": 0.3} for s in SETTINGS]
    if cold:
        pairs += [{"target": "*", "drafter": drafter("aa", s), "load": 0.0} for s in SETTINGS]
    return {"defaults": {"acceptance": 0.8, "load": load, "output_tokens": 128, "noise": 0.05}, "pairs": pairs}


# results


def summarize(times: list[float]) -> dict[str, float | None]:
    """Median, p95 (nearest rank) and max of the rollback times; None when nothing was rolled back."""
    if not times:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(statistics.median(times), 1),
        "p95": round(percentile(times, 0.95), 1),
        "max": round(max(times), 1),
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """specfleet / peer (below 1: specfleet faster); None when either is missing."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return round(ours / theirs, 3)


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """p95 time to rollback of specfleet over each peer's: tuned specfleet vs the peer documented and tuned."""
    out: dict[str, float | None] = {}
    for peer in CONTROLLERS[1:]:
        for ours, theirs in (("tuned", "documented"), ("tuned", "tuned"), ("documented", "documented")):
            mine = results.get(f"specfleet/{ours}", {}).get("breach", {}).get("p95")
            other = results.get(f"{peer}/{theirs}", {}).get("breach", {}).get("p95")
            out[f"specfleet {ours} / {peer} {theirs} (p95)"] = ratio(mine, other)
    return out


SCALE_FIGURES = {
    "create_seconds": "all created after (s; this script's creates)",
    "all_converged_seconds": "all converged after (s)",
    "per_object_seconds": "per object, created to converged, p50 / p95 (s)",
    "cpu_seconds": "controller CPU until then (s)",
    "peak_rss_mib": "controller peak RSS (MiB)",
    "api_requests_per_object": "API requests per object",
    "idle_writes_per_minute": "writes per minute at idle",
    "idle_reads_per_minute": "reads per minute at idle",
}


def scale_table(scale: dict[str, dict[str, Any]], nodes: int) -> str:
    """Markdown: a row per figure, a column per controller, and specfleet / peer ratios."""
    controllers = list(scale)
    count = next(iter(scale.values()))["objects"]
    lines = [f"| {count} fleets each, {nodes} nodes | {' | '.join(controllers)} |",
             "| --- |" + " --- |" * len(controllers)]  # fmt: skip

    def shown(value: Any) -> str:
        return " / ".join(str(v) for v in value.values()) if isinstance(value, dict) else str(value)

    for key, label in SCALE_FIGURES.items():
        lines.append(f"| {label} | {' | '.join(shown(scale[c].get(key, '-')) for c in controllers)} |")
    lines += ["", "| specfleet / peer | value |", "| --- | --- |"]
    lines += [f"| {name} | {'-' if v is None else f'{v:.2f}'} |" for name, v in scale_ratios(scale).items()]
    return "\n".join(lines)


def scale_ratios(scale: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """specfleet's figure over each peer's, for time, CPU, memory and requests."""
    mine = scale.get("specfleet", {})
    return {
        f"{key} / {peer}": ratio(mine.get(key), scale[peer].get(key))
        for peer in CONTROLLERS[1:]
        if peer in scale
        for key in ("all_converged_seconds", "cpu_seconds", "peak_rss_mib", "api_requests_per_object")
    }


def outcome_text(counts: dict[str, int]) -> str:
    """`promoted 3, rolled back 1` from outcome counts, leaving out zeros."""
    return ", ".join(f"{name} {n}" for name, n in counts.items() if n) or "-"


def table(results: dict[str, dict[str, Any]]) -> str:
    """One markdown table: a row per controller and setting, then the ratios."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    lines = [
        "| controller / setting | time to no canary traffic p50 / p95 | rolled back after breach |"
        " A/A false rollbacks (cold start) | good speculative canary | Prometheus down 2 min |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, row in results.items():
        breach = row.get("breach", {})
        lines.append(
            f"| {key} | {seconds(breach.get('p50'))} / {seconds(breach.get('p95'))} |"
            f" {breach.get('rolled_back', 0)} / {breach.get('trials', 0)}"
            + (f" ({breach['before_breach']} before t0)" if breach.get("before_breach") else "")
            + f" | {row.get('aa', {}).get('false_rollbacks', '-')} / {row.get('aa', {}).get('trials', '-')} |"
            f" {outcome_text(row.get('good', {}))} | {outcome_text(row.get('outage', {}))} |"
        )
    ratio_lines = [
        f"| {name} | {'-' if value is None else f'{value:.2f}'} |" for name, value in ratios(results).items()
    ]
    return "\n".join([*lines, "", "| ratio | value |", "| --- | --- |", *ratio_lines])


def plot(results: dict[str, dict[str, Any]], times: dict[str, list[float]], path: Path) -> None:
    """Time-to-rollback distributions per controller and setting (points over a box)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [key for key in results if times.get(key)]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(keys) + 1.5))
    ax.boxplot([times[k] for k in keys], orientation="horizontal", tick_labels=keys, widths=0.5, showfliers=False)
    for row, key in enumerate(keys, start=1):
        ax.scatter(times[key], [row] * len(times[key]), s=12, alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("seconds from breach (drafter alpha 0.8 -> 0.3) to no canary traffic (log scale)")
    ax.set_title("Time to rollback, same cluster, simulator and Prometheus")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# the run


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


@dataclass
class Run:
    """The cluster, clients and processes of one benchmark run."""

    cluster: Any
    namespaces: dict[str, str]
    sim_urls: dict[str, str]
    """One simulator per controller's namespace: one process could not serve hundreds of pods' scrapes."""
    custom: kubernetes.client.CustomObjectsApi
    core: kubernetes.client.CoreV1Api
    apps: kubernetes.client.AppsV1Api
    load: float

    def put_scenario(self, document: dict[str, Any]) -> None:
        """Every simulator takes the document (a busy one may take seconds: it advances every engine first)."""
        body = yaml.safe_dump(document).encode()
        for url in self.sim_urls.values():
            request = urllib.request.Request(f"{url}/scenario", data=body, method="PUT")
            for attempt in range(5):
                try:
                    urllib.request.urlopen(request, timeout=60).close()
                    break
                except OSError:
                    if attempt == 4:
                        raise
                    time.sleep(2)

    def delete(self, fleet: Fleet) -> None:
        """Delete a fleet once measured, so its pods stop costing the simulator (children go with their owner)."""
        ns = self.namespaces[fleet.controller]
        with contextlib.suppress(kubernetes.client.ApiException):
            if fleet.controller == "specfleet":
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, fleet.name)
            elif fleet.controller == "argo":
                self.custom.delete_namespaced_custom_object(*ARGO, ns, "rollouts", fleet.name)
                self.core.delete_namespaced_service(fleet.name, ns)
            else:
                self.custom.delete_namespaced_custom_object(*FLAGGER, ns, "canaries", fleet.name)
                self.apps.delete_namespaced_deployment(fleet.name, ns)

    # creating fleets

    def create(self, fleet: Fleet) -> None:
        ns = self.namespaces[fleet.controller]
        stable = stable_drafter(fleet.kind)
        if fleet.controller == "specfleet":
            body = specfleet_fleet(fleet.name, fleet.kind, fleet.setting, stable)
            retried(lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))
        elif fleet.controller == "argo":
            rollout = argo_rollout(fleet.name, fleet.kind, fleet.setting, stable)
            service = {
                "metadata": {"name": fleet.name},
                "spec": {"selector": {"app": fleet.name}, "ports": [{"port": 8000}]},
            }
            retried(lambda: self.custom.create_namespaced_custom_object(*ARGO, ns, "rollouts", rollout))
            retried(lambda: self.core.create_namespaced_service(ns, service))
        else:
            canary = flagger_canary(fleet.name, fleet.kind, fleet.setting)
            retried(lambda: self.apps.create_namespaced_deployment(ns, flagger_deployment(fleet.name, stable)))
            retried(lambda: self.custom.create_namespaced_custom_object(*FLAGGER, ns, "canaries", canary))

    def start_canary(self, fleet: Fleet) -> None:
        """Change the pods' config to the canary's: the drafter of this kind (the good fleets: the good one)."""
        ns = self.namespaces[fleet.controller]
        model = GOOD if fleet.kind == "good" else drafter(fleet.kind, fleet.setting)
        if fleet.controller == "specfleet":
            patch = {"spec": {"speculative": speculative(model)}}
            retried(lambda: self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, fleet.name, patch))
            return
        template = {"spec": {"template": pod_template(fleet.name, model)}}
        if fleet.controller == "argo":
            retried(lambda: self.custom.patch_namespaced_custom_object(*ARGO, ns, "rollouts", fleet.name, template))
        else:
            retried(lambda: self.apps.patch_namespaced_deployment(fleet.name, ns, template))

    # reading state

    def objects(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every fleet object by (controller, name)."""
        listed = {
            "specfleet": (GROUP, VERSION, PLURAL),
            "argo": (*ARGO, "rollouts"),
            "flagger": (*FLAGGER, "canaries"),
        }
        out = {}
        for controller, (group, version, plural) in listed.items():
            ns = self.namespaces[controller]
            items = retried(self.custom.list_namespaced_custom_object, group, version, ns, plural)
            for item in items["items"]:
                out[controller, item["metadata"]["name"]] = item
        return out

    def serving_pods(self, controller: str) -> list[dict[str, str]]:
        """Labels of the Ready, not terminating pods of a namespace: the pods a Service sends traffic to.

        Read as raw JSON: the client's model objects cost ~1 ms a pod, too slow to poll hundreds every second.
        """
        ns = self.namespaces[controller]
        response = retried(lambda: self.core.list_namespaced_pod(ns, _preload_content=False))
        pods = json.loads(response.data)["items"]
        return [
            dict(p["metadata"].get("labels") or {})
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])
        ]

    def selectors(self) -> dict[str, dict[str, str]]:
        ns = self.namespaces["specfleet"]
        response = retried(lambda: self.core.list_namespaced_service(ns, _preload_content=False))
        return {s["metadata"]["name"]: s["spec"].get("selector") or {} for s in json.loads(response.data)["items"]}


def retried(call: Callable[..., Any], *args: Any) -> Any:
    """An API call, again after a server error or timeout (a loaded 2-core machine's API server answers 504
    at times); a create answered 409 was made by an attempt that timed out."""
    for attempt in range(6):
        try:
            return call(*args)
        except kubernetes.client.ApiException as error:
            if error.status == 409:
                return None
            if attempt == 5 or (error.status or 500) < 500:
                raise
        except urllib3.exceptions.HTTPError:
            if attempt == 5:
                raise
        time.sleep(5)
    return None


def settled(controller: str, obj: dict[str, Any]) -> bool:
    """The stable is up and no canary runs: the moment a config change starts a canary."""
    status = obj.get("status") or {}
    if controller == "specfleet":
        return status.get("phase") == "Healthy"
    if controller == "argo":
        return status.get("phase") == "Healthy" and bool(status.get("stableRS"))
    return status.get("phase") == "Initialized"


def outcome(fleet: Fleet, obj: dict[str, Any]) -> str:
    """promoted, rolled back, or held (canary still live or paused)."""
    status = obj.get("status") or {}
    if fleet.controller == "specfleet":
        if status.get("phase") == "RolledBack" or status.get("rejectedRevision"):
            return "rolled back"
        promoted = status.get("stableRevision") not in (None, fleet.initial) and not status.get("canaryRevision")
        return "promoted" if promoted else "held"
    if fleet.controller == "argo":
        if status.get("abort") or status.get("phase") == "Degraded":
            return "rolled back"
        promoted = status.get("phase") == "Healthy" and status.get("stableRS") not in (None, fleet.initial)
        return "promoted" if promoted else "held"
    phase = status.get("phase")
    return {"Failed": "rolled back", "Succeeded": "promoted"}.get(phase, "held")


def canary_serving(run: Run, fleet: Fleet, pods: dict[str, list[dict[str, str]]], selectors: dict[str, Any]) -> bool:
    """Whether the canary still gets traffic: specfleet's Service still selects it; a peer still has a Ready
    canary pod (Argo's basic canary and Flagger's `<name>-canary` Service send traffic to every Ready one)."""
    if fleet.controller == "specfleet":
        return selectors.get(fleet.name, {}).get(LABEL_TRACK) != Track.STABLE
    if fleet.controller == "argo":
        return any(
            p.get("app") == fleet.name and p.get("rollouts-pod-template-hash") == fleet.canary_hash
            for p in pods["argo"]
        )
    return any(p.get("app") == fleet.name for p in pods["flagger"])


def start_fleets(run: Run, fleets: list[Fleet]) -> float:
    """Create the fleets, wait for their stables, start every canary; returns the moment they started."""
    for fleet in fleets:
        run.create(fleet)

    def all_settled() -> bool:
        objects = run.objects()
        return all(
            (f.controller, f.name) in objects and settled(f.controller, objects[f.controller, f.name]) for f in fleets
        )

    wait_until("every stable to be up", all_settled, 900)
    objects = run.objects()
    for fleet in fleets:
        status = objects[fleet.controller, fleet.name].get("status") or {}
        fleet.initial = status.get("stableRevision") if fleet.controller == "specfleet" else status.get("stableRS")
        run.start_canary(fleet)
    started = time.monotonic()

    def hashes_known() -> bool:
        objects = run.objects()
        for fleet in fleets:
            if fleet.controller == "argo":
                current = (objects[fleet.controller, fleet.name].get("status") or {}).get("currentPodHash")
                fleet.canary_hash = current if current != fleet.initial else None
        return all(f.canary_hash for f in fleets if f.controller == "argo")

    wait_until("Argo's canary ReplicaSets", hashes_known, 300)
    return started


def observe(run: Run, fleets: list[Fleet], t0: float, until: Callable[[], bool], deadline: float) -> None:
    """Poll once a second: when each fleet's canary stops getting traffic (after t0), and outcomes at the end."""
    while time.monotonic() < deadline and not until():
        now = time.monotonic()
        pods = {c: run.serving_pods(c) for c in ("argo", "flagger")}
        selectors = run.selectors()
        for fleet in fleets:
            if fleet.rolled_back_at is None and not canary_serving(run, fleet, pods, selectors):
                fleet.rolled_back_at = now - t0
        time.sleep(1.0)
    objects = run.objects()
    for fleet in fleets:
        fleet.outcome = outcome(fleet, objects[fleet.controller, fleet.name])


def warmup_seconds(settings: tuple[str, ...]) -> int:
    """From the canaries' start to the breach: every controller has judged the canary good at least once
    (Argo's documented 5m interval measures at the start, on a cold range, and again at 5 minutes)."""
    return max(90, *(SETUPS[c, s].interval + 30 for c in CONTROLLERS for s in settings))


def fleets_of(kind: str, trials: int, settings: tuple[str, ...]) -> list[Fleet]:
    return [
        Fleet(controller, setting, kind, f"{kind}-{setting[0]}-{i:02d}")
        for controller in CONTROLLERS
        for setting in settings
        for i in range(trials)
    ]


def restart_prometheus_after(cluster: Any, seconds: float) -> None:
    """Stop the dev cluster's Prometheus (its pid file), wait, start it again with the same command."""
    from specfleet.devcluster import process
    from specfleet.devcluster.config import Layout

    layout = Layout(cluster.state_dir)
    record = process.read_record(layout.pid_file("prometheus"))
    if record is None:
        raise SystemExit("no Prometheus pid file")
    process.stop(layout.pid_file("prometheus"))
    time.sleep(seconds)
    process.start(list(record.command), layout.pid_file("prometheus"), layout.log_file("prometheus"))


def peer_binaries() -> tuple[dict[str, Path], Path, Path]:
    """The peers' binaries (built when missing) and their CRD directories, from the project's build cache."""
    from rich.console import Console

    from specfleet.cachedir import cache_root
    from specfleet.devcluster.binaries import PEERS
    from specfleet.devcluster.build import GoBuilder, build_groups

    cache = cache_root()
    binaries = GoBuilder(cache, Console(stderr=True)).ensure(list(PEERS))
    groups = build_groups("")
    return binaries, groups["argo-rollouts"].extra_files_dir(cache), groups["flagger"].extra_files_dir(cache)


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """One dev cluster with the peers' CRDs; the rollback phases, then fleet scale (as `--phases` asks)."""
    binaries, argo_crds, flagger_crds = peer_binaries()
    settings = tuple(args.settings)
    measured = tuple(dict.fromkeys([*settings, *(args.outage_settings or ())]))
    largest = 3 * max(args.trials + args.side_trials, args.side_trials * len(measured))
    nodes = max(-(-3 * largest // 8) + 2 if "rollback" in args.phases else 0,
                -(-2 * args.scale // 8) + 2 if "scale" in args.phases else 0)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="specfleet-peers-"))
    print(f"logs in {work}", file=sys.stderr)
    with cluster_session(args.state_dir, nodes, keep=args.keep) as (cluster, specfleet_namespace):
        kubectl = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig)]
        for crd in [*sorted(argo_crds.glob("*.yaml")), flagger_crds / "crd.yaml"]:
            subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(crd)], check=True,
                           capture_output=True)  # fmt: skip
        subprocess.run([*kubectl, "wait", "--for=condition=Established", "crd", "--all"], check=True,
                       capture_output=True)  # fmt: skip
        api = cluster.api_client()
        api.user_agent = fleetscale.BENCH_USER_AGENT
        figures: dict[str, Any] = {"nodes": nodes}
        if "rollback" in args.phases:
            figures |= rollback_phases(args, cluster, api, binaries, specfleet_namespace, work)
        if "scale" in args.phases:
            figures["scale"] = scale_phase(args, cluster, api, binaries, work)
        return figures


def controller_command(controller: str, binaries: dict[str, Path], cluster: Any, namespace: str) -> tuple[
    list[str], str]:  # fmt: skip
    """How each controller runs out of cluster for one namespace, at its defaults, and the URL that answers
    once it serves."""
    kubeconfig = str(cluster.kubeconfig)
    port = free_port()
    if controller == "specfleet":
        return [sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "",
                "--kubeconfig", kubeconfig, "--prometheus-url", cluster.prometheus_url, "--workers", "8",
                "--metrics-port", str(port)], f"http://127.0.0.1:{port}/metrics"  # fmt: skip
    if controller == "argo":
        return [str(binaries["rollouts-controller"]), "--kubeconfig", kubeconfig, "--namespaced", "--namespace",
                namespace, "--leader-elect=false", "--metricsPort", str(free_port()), "--healthzPort", str(port),
                "--loglevel", "info"], f"http://127.0.0.1:{port}/healthz"  # fmt: skip
    return [str(binaries["flagger"]), "-kubeconfig", kubeconfig, "-namespace", namespace, "-mesh-provider",
            "kubernetes", "-metrics-server", cluster.prometheus_url, "-port", str(port), "-log-level", "info"], \
        f"http://127.0.0.1:{port}/healthz"  # fmt: skip


def rollback_phases(args: argparse.Namespace, cluster: Any, api: Any, binaries: dict[str, Path],
                    specfleet_namespace: str, work: Path) -> dict[str, Any]:  # fmt: skip
    """Breach and good, A/A (per setting), then outage fleets, every controller at once with its simulator."""
    settings = tuple(args.settings)
    measured = tuple(dict.fromkeys([*settings, *(args.outage_settings or ())]))
    core = kubernetes.client.CoreV1Api(api)
    suffix = specfleet_namespace.rpartition("-")[2]
    namespaces = {"specfleet": specfleet_namespace, "argo": f"argo-{suffix}", "flagger": f"flagger-{suffix}"}
    for ns in (namespaces["argo"], namespaces["flagger"]):
        core.create_namespace({"metadata": {"name": ns}})
    custom = kubernetes.client.CustomObjectsApi(api)
    for setting in measured:
        custom.create_namespaced_custom_object(
            *ARGO, namespaces["argo"], "analysistemplates",
            argo_template(namespaces["argo"], setting, cluster.prometheus_url),
        )  # fmt: skip
    for template in flagger_templates(namespaces["flagger"], cluster.prometheus_url):
        custom.create_namespaced_custom_object(*FLAGGER, namespaces["flagger"], "metrictemplates", template)
    run = Run(cluster, namespaces, {c: f"http://127.0.0.1:{free_port()}" for c in CONTROLLERS}, custom, core,
              kubernetes.client.AppsV1Api(api), args.load)  # fmt: skip
    scenario_file = work / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario(args.load, breach=False, cold=False)))
    sims = {
        f"sim-{controller}": [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario_file),
                              "--kubeconfig", str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir),
                              "--listen", run.sim_urls[controller].removeprefix("http://"), "--seed", "13",
                              "--namespace", namespaces[controller]]
        for controller in CONTROLLERS
    }  # fmt: skip
    controllers = {c: controller_command(c, binaries, cluster, namespaces[c])[0] for c in CONTROLLERS}
    environments = {"argo": {"POD_NAMESPACE": namespaces["argo"]}}
    done: list[Fleet] = []
    with background(sims | controllers, work, keep=args.keep, environments=environments):
        for url in run.sim_urls.values():
            wait_until(f"the simulator at {url}", lambda url=url: _ready(url, "/healthz"), 180)
        for setting in settings:
            breach_and_good = [*fleets_of("breach", args.trials, (setting,)),
                               *fleets_of("good", args.side_trials, (setting,))]  # fmt: skip
            breach_phase(run, breach_and_good, setting, args)
            done += breach_and_good
            checkpoint(done, measured, args.json)
            aa = fleets_of("aa", args.trials, (setting,))
            aa_phase(run, aa, setting)
            done += aa
            checkpoint(done, measured, args.json)
        outage = fleets_of("outage", args.side_trials, tuple(args.outage_settings or settings))
        outage_phase(run, outage, args)
        done += outage
    return collect(done, measured)


def scale_phase(args: argparse.Namespace, cluster: Any, api: Any, binaries: dict[str, Path], work: Path) -> dict[
    str, Any]:  # fmt: skip
    """`--scale` fleets of each controller, one controller at a time (see fleetscale.py)."""
    figures = {}
    for controller in CONTROLLERS:
        namespace = f"scale-{controller}-{free_port()}"
        command, ready_url = controller_command(controller, binaries, cluster, namespace)
        serving = functools.partial(serve, controller, command, ready_url, {"POD_NAMESPACE": namespace}, work)
        say(f"scale: {args.scale} {controller} fleets")
        figures[controller] = fleetscale.measure(
            SCALE_CONTENDERS[controller](cluster.prometheus_url), args.scale, api, namespace, serving,
            cluster.state_dir / "logs" / "audit.log", args.idle, timeout=1800,
        )  # fmt: skip
        say(f"scale: {controller}: {json.dumps(figures[controller])}")
    return figures


@contextlib.contextmanager
def serve(controller: str, command: list[str], ready_url: str, environment: dict[str, str], work: Path) -> Iterator[
    int]:  # fmt: skip
    """Run one controller until the block ends; yields its pid once `ready_url` answers."""
    with background({controller: command}, work, environments={controller: environment}) as [process]:
        wait_until(f"{controller} serving {ready_url}", lambda: _ready(ready_url, ""), 120)
        yield process.pid


def scale_contenders() -> dict[str, Callable[[str], fleetscale.Contender]]:
    """Each controller's fleet for the scale phase: one replica of the good EAGLE-3 config, a stable only."""

    def specfleet(prometheus_url: str) -> fleetscale.Contender:
        def create(api: Any, namespace: str, name: str) -> None:
            body = specfleet_fleet(name, "scale", "tuned", GOOD)
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, GROUP, VERSION,
                    namespace, PLURAL, body)  # fmt: skip

        return fleetscale.Contender("specfleet", (GROUP, VERSION, PLURAL), create, lambda api, ns: None,
                                    lambda obj: settled("specfleet", obj))  # fmt: skip

    def argo(prometheus_url: str) -> fleetscale.Contender:
        def prepare(api: Any, namespace: str) -> None:
            template = argo_template(namespace, "tuned", prometheus_url)
            kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                *ARGO, namespace, "analysistemplates", template
            )

        def create(api: Any, namespace: str, name: str) -> None:
            rollout = argo_rollout(name, "scale", "tuned", GOOD)
            rollout["spec"]["replicas"] = 1
            service = {"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [{"port": 8000}]}}
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, *ARGO, namespace,
                    "rollouts", rollout)  # fmt: skip
            retried(kubernetes.client.CoreV1Api(api).create_namespaced_service, namespace, service)

        return fleetscale.Contender("argo", (*ARGO, "rollouts"), create, prepare, lambda obj: settled("argo", obj))

    def flagger(prometheus_url: str) -> fleetscale.Contender:
        def prepare(api: Any, namespace: str) -> None:
            for template in flagger_templates(namespace, prometheus_url):
                kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                    *FLAGGER, namespace, "metrictemplates", template
                )

        def create(api: Any, namespace: str, name: str) -> None:
            retried(kubernetes.client.AppsV1Api(api).create_namespaced_deployment, namespace,
                    flagger_deployment(name, GOOD))  # fmt: skip
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, *FLAGGER, namespace,
                    "canaries", flagger_canary(name, "scale", "tuned"))  # fmt: skip

        return fleetscale.Contender("flagger", (*FLAGGER, "canaries"), create, prepare,
                                    lambda obj: settled("flagger", obj))  # fmt: skip

    return {"specfleet": specfleet, "argo": argo, "flagger": flagger}


SCALE_CONTENDERS = scale_contenders()


def breach_phase(run: Run, fleets: list[Fleet], setting: str, args: argparse.Namespace) -> None:
    """Breach and good fleets of one setting: the breach drafters turn bad once every canary was judged good."""
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    started = start_fleets(run, fleets)
    say(f"{setting}: {len(fleets)} breach and good canaries started")
    time.sleep(max(0.0, started + warmup_seconds((setting,)) - time.monotonic()))
    objects = run.objects()
    breach = [f for f in fleets if f.kind == "breach"]
    for fleet in breach:
        if outcome(fleet, objects[fleet.controller, fleet.name]) == "rolled back":
            fleet.notes.append("rolled back before the breach")
    run.put_scenario(scenario(run.load, breach=True, cold=False))
    t0 = time.monotonic()
    say(f"{setting}: breach at {t0 - started:.0f} s after the canaries started")
    minimum_end = started + max(SETUPS[c, setting].hold for c in CONTROLLERS) + 120
    observe(
        run, fleets, t0,
        until=lambda: time.monotonic() > minimum_end and all(f.rolled_back_at is not None for f in breach),
        deadline=t0 + args.observe,
    )  # fmt: skip
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    for fleet in fleets:
        run.delete(fleet)


def aa_phase(run: Run, fleets: list[Fleet], setting: str) -> None:
    """A/A canaries whose pods get no load for their first minute (a cold start), observed for 10 intervals of
    the slowest controller's specfleet-equal setting (10 minutes documented, 3 tuned)."""
    run.put_scenario(scenario(run.load, breach=False, cold=True))
    started = start_fleets(run, fleets)
    say(f"{setting}: {len(fleets)} A/A canaries started")
    time.sleep(max(0.0, started + COLD_START_SECONDS - time.monotonic()))
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    watch = AA_OBSERVE_SECONDS[setting]
    observe(run, fleets, started, until=lambda: False, deadline=started + watch)
    for fleet in fleets:
        run.delete(fleet)


def outage_phase(run: Run, fleets: list[Fleet], args: argparse.Namespace) -> None:
    """Live, healthy canaries (every setting at once); Prometheus stopped for 2 minutes 90 s into the analysis."""
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    started = start_fleets(run, fleets)
    say(f"outage: {len(fleets)} canaries started")
    time.sleep(max(0.0, started + 90 - time.monotonic()))
    outage_start = time.monotonic()
    restart_prometheus_after(run.cluster, OUTAGE_SECONDS)
    wait_until("Prometheus back", lambda: _ready(run.cluster.prometheus_url), 120)
    say("outage: Prometheus is back")
    observe(run, fleets, outage_start, until=lambda: False, deadline=time.monotonic() + args.after_outage)


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def checkpoint(fleets: list[Fleet], settings: tuple[str, ...], path: Path | None) -> None:
    """The figures so far, so a run that dies late still leaves what it measured."""
    if path is not None:
        path.write_text(json.dumps(collect(fleets, settings), indent=2))


def _ready(url: str, path: str = "/-/ready") -> bool:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def collect(fleets: list[Fleet], settings: tuple[str, ...]) -> dict[str, Any]:
    """Per controller and setting: rollback times and outcome counts. Also the raw times, for the plot."""
    results: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {}
    for controller in CONTROLLERS:
        for setting in settings:
            key = f"{controller}/{setting}"
            mine = [f for f in fleets if f.controller == controller and f.setting == setting]
            breach = [f for f in mine if f.kind == "breach"]
            before = [f for f in breach if f.notes]
            rolled = [f.rolled_back_at for f in breach if not f.notes and f.rolled_back_at is not None]
            times[key] = [round(t, 2) for t in rolled]
            row: dict[str, Any] = {
                "breach": {
                    "trials": len(breach),
                    "rolled_back": len(rolled),
                    "before_breach": len(before),
                    **summarize(rolled),
                },
                "aa": {
                    "trials": sum(f.kind == "aa" for f in mine),
                    "false_rollbacks": sum(f.kind == "aa" and f.outcome == "rolled back" for f in mine),
                },
            }
            for kind in ("good", "outage"):
                counts = {"promoted": 0, "rolled back": 0, "held": 0}
                for f in mine:
                    if f.kind == kind and f.outcome:
                        counts[f.outcome] += 1
                row[kind] = counts
            results[key] = row
    return {"results": results, "times": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="breach and A/A fleets per controller and setting")
    parser.add_argument("--side-trials", type=int, default=5, help="good and outage fleets per controller and setting")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--outage-settings", nargs="+", choices=SETTINGS, help="default: --settings")
    parser.add_argument("--load", type=float, default=1.0, help="requests per second per pod")
    parser.add_argument("--observe", type=float, default=1800.0, help="seconds after the breach, at most")
    parser.add_argument("--after-outage", type=float, default=120.0, help="seconds observed after Prometheus is back")
    parser.add_argument("--quick", action="store_true", help="3 trials, 1 side trial, tuned settings only")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-peers-bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the processes running")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here after each phase")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "peers-rollback.png")
    phases = "rollback: breach, good, A/A, outage fleets; scale: --scale fleets per controller"
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help=phases)
    parser.add_argument("--scale", type=int, default=1000, help="fleets per controller in the scale phase")
    parser.add_argument("--idle", type=float, default=300.0, help="seconds the scale phase counts idle writes")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.side_trials, args.settings, args.observe = 3, 1, ["tuned"], 600.0
    started = time.monotonic()
    figures = run_benchmark(args)
    settings = {
        "trials": args.trials,
        "side_trials": args.side_trials,
        "load_per_pod": args.load,
        "scrape_interval": "5s",
        "setups": {f"{c}/{s}": vars(SETUPS[c, s]) for c in CONTROLLERS for s in SETTINGS},
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    if "results" in figures:
        print(table(figures["results"]))
        figures["ratios"] = ratios(figures["results"])
        plot(figures["results"], figures["times"], args.plot)
    if "scale" in figures:
        print(scale_table(figures["scale"], figures["nodes"]))
        figures["scale_ratios"] = scale_ratios(figures["scale"])
    print(json.dumps({"settings": settings, **figures}, indent=2))


if __name__ == "__main__":
    main()
