"""What one pass of the operator costs in calls of the pure `decide`, and in checks of the spec's rules: how many a
pass makes and how long each takes.

A pass decides, then answers what the decision asked for (an analysis, a fleet look, the GPU room) and
decides again with the answer when it can change the decision (`Reconciler._decide`). This drives the real
`Reconciler` through a fleet's life (created, Healthy with fleet looks, a two-step judged canary with its
analyses and room checks, promoted, Healthy again) against an in-memory API server whose Deployments are
Ready as soon as they are written, with canned Prometheus answers (every analysis passes), and counts. It
counts the spec's checks too: every rule (`validation.spec_problems`) as the observation runs it, and the
engine's rules again where an argv is rendered (`render.argv.vllm_argv` refuses a config vLLM would refuse).

    .venv/bin/python benchmarks/pass_cost.py [--rollouts 20]
"""

import argparse
import asyncio
import contextlib
import copy
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specfleet import observation as observation_module
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import Analysis, Verdict
from specfleet.api.vocabulary import API_VERSION, KIND, LABEL_REVISION
from specfleet.controller.queue import WorkQueue
from specfleet.controller.reconciler import Reconciler
from specfleet.controller.store import Store
from specfleet.hardware import GPU_RESOURCE, MI300X, PRODUCT_NAME_LABEL
from specfleet.render import argv as argv_module
from specfleet.rollout import Decision, FleetLook, Observation
from specfleet.rollout.types import GpuRequest, GpuRoom, Watch

NAMESPACE, NAME = "bench", "pass-cost"
START = datetime(2026, 12, 1, tzinfo=UTC)
TICK = timedelta(seconds=15)
"""Time between two passes: a fleet is looked at about this often while its rollout moves."""
NODE = {
    "metadata": {"name": "gpu-1", "labels": {PRODUCT_NAME_LABEL: MI300X.product_name}},
    "spec": {},
    "status": {"allocatable": {GPU_RESOURCE: "64"}, "conditions": [{"type": "Ready", "status": "True"}]},
}


def fleet(k: int) -> dict[str, Any]:
    """Four replicas of Llama 3.1 8B with EAGLE-3 at depth k, judged over two canary steps, and watched for
    drift while Healthy (so fleet looks are due)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-fleet", "generation": 1},
        "spec": {
            "replicas": 4,
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculative": {
                "method": "eagle3",
                "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "numSpeculativeTokens": k,
            },
            "accelerator": {"productNames": [MI300X.product_name]},
            "rollout": {
                "steps": [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "1m"}}],
                "analysis": {"interval": "1m", "window": "2m"},
                "drift": {},
            },
        },
    }


@dataclass
class InMemoryKube:
    """The API server as the reconciler uses it, over the store the watch would fill: what is written is in
    the store at once (the watch caught up), and a Deployment's pods are Ready as soon as it is written."""

    store: Store
    version: int = 1

    def _put(self, manifest: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(manifest))
        obj["metadata"].setdefault("namespace", NAMESPACE)
        obj["metadata"].setdefault("uid", f"uid-{obj['kind']}-{obj['metadata']['name']}")
        if obj["kind"] == "Deployment":
            self._ready(obj)
        self.store.put_child(obj["kind"], obj, deleted=False)

    def _ready(self, deployment: dict[str, Any]) -> None:
        replicas = deployment["spec"].get("replicas", 1)
        deployment["metadata"]["generation"] = 1
        deployment["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas}
        name = deployment["metadata"]["name"]
        for pod in self.store.children("Pod", (NAMESPACE, NAME)).values():
            if pod["metadata"]["name"].startswith(f"{name}-"):
                self.store.put_child("Pod", pod, deleted=True)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        for i in range(replicas):
            pod = {
                "metadata": {"name": f"{name}-{labels[LABEL_REVISION]}-{i}", "namespace": NAMESPACE, "labels": labels},
                "spec": {"nodeName": "gpu-1"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            self.store.put_child("Pod", pod, deleted=False)

    def apply(self, manifest: dict[str, Any]) -> None:
        self._put(manifest)

    def create(self, manifest: dict[str, Any]) -> None:
        self._put(manifest)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        self.store.put_child(kind, self.store.children(kind, (NAMESPACE, NAME))[name], deleted=True)
        if kind == "Deployment":
            for pod in self.store.children("Pod", (NAMESPACE, NAME)).values():
                if pod["metadata"]["name"].startswith(f"{name}-"):
                    self.store.put_child("Pod", pod, deleted=True)

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        obj = copy.deepcopy(self.store.children(kind, (NAMESPACE, NAME))[name])
        obj["spec"].update(body.get("spec", {}))
        self._put(obj)

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any], resource_version: str) -> str:
        obj = copy.deepcopy(self.store.sdeps[namespace, name])
        obj["status"] = _merged(obj.get("status") or {}, patch)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.store.put_sdep(obj, deleted=False)
        return str(self.version)

    def remove_annotations(self, namespace: str, name: str, keys: list[str], resource_version: str) -> None:
        pass

    def has_kind(self, api_version: str, kind: str) -> bool:
        return False

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def list_in(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        return []

    def post_event(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        pass

    def list_nodes(self) -> list[dict[str, Any]]:
        return [NODE]

    def list_pods_on_nodes(self) -> list[dict[str, Any]]:
        return list(self.store.children("Pod", (NAMESPACE, NAME)).values())


def _merged(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch applied (RFC 7386): null removes, objects merge, anything else replaces."""
    out = dict(old)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class CountingReconciler(Reconciler):
    """The reconciler, counting and timing its calls of `decide`; Prometheus answers canned (a passing
    analysis, a fleet look that measured nothing), so only the shell's own work is counted."""

    calls: int = 0
    seconds: float = 0.0
    asked: dict[str, int] = field(default_factory=dict)

    def _decision(self, sdep: SpeculativeDeployment, observation: Observation) -> Decision:
        started = time.perf_counter()
        decision = super()._decision(sdep, observation)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return decision

    async def _analyses(
        self, sdep: SpeculativeDeployment, url: str | None, decision: Decision, observation: Observation
    ) -> Observation:
        self.asked["analysis"] = self.asked.get("analysis", 0) + 1
        status, now = decision.status, observation.now
        assert status.canary_revision is not None
        analysis = Analysis(
            time=now,
            revision=status.canary_revision,
            step=status.current_step or 0,
            look=status.analyses + 1,
            verdict=Verdict.PASS,
            evidence_seconds=60,
        )
        return replace(observation, analysis=analysis)

    def _room(self, key: Any, sdep: SpeculativeDeployment, request: GpuRequest) -> GpuRoom | None:
        room = super()._room(key, sdep, request)
        answer = "room that fits" if room is not None and room.fits else "room too small or unknown"
        self.asked[answer] = self.asked.get(answer, 0) + 1
        return room

    async def _watch(self, key: Any, sdep: SpeculativeDeployment, url: str, status: Any, now: datetime) -> Watch:
        self.asked["watch"] = self.asked.get("watch", 0) + 1
        return Watch(status.canary_revision, next_at=now + timedelta(seconds=5))

    async def _look(self, sdep: SpeculativeDeployment, url: str, status: Any, now: datetime) -> FleetLook:
        self.asked["fleet look"] = self.asked.get("fleet look", 0) + 1
        assert status.stable_revision is not None
        return FleetLook(time=now, revision=status.stable_revision, error="not measured (benchmark)")


CHECKS = {
    "every rule (spec_problems)": (observation_module, "spec_problems"),
    "the engine's rules again (vllm_argv)": (argv_module, "engine_problems"),
}
"""The checks of a spec a pass runs: the module attribute each is called through, by what it checks."""


@contextlib.contextmanager
def counting_checks(calls: Counter[str], seconds: Counter[str]) -> Iterator[None]:
    """Count and time the calls of each of CHECKS while inside."""
    saved = {what: getattr(module, name) for what, (module, name) in CHECKS.items()}

    def counted(what: str, check: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return check(*args, **kwargs)
            finally:
                seconds[what] += time.perf_counter() - started
                calls[what] += 1

        return call

    for what, (module, name) in CHECKS.items():
        setattr(module, name, counted(what, saved[what]))
    try:
        yield
    finally:
        for what, (module, name) in CHECKS.items():
            setattr(module, name, saved[what])


@dataclass(frozen=True)
class PassCost:
    passes: int
    calls: int
    seconds: float
    asked: Mapping[str, int]
    rollouts: int
    checks: Mapping[str, int]
    check_seconds: Mapping[str, float]

    @property
    def calls_per_pass(self) -> float:
        return self.calls / self.passes

    @property
    def ms_per_call(self) -> float:
        return 1000 * self.seconds / self.calls


def measure(rollouts: int, passes_per_phase: int = 12) -> PassCost:
    """A fleet created, then `rollouts` times: Healthy for a while, k changed, canaried to promotion."""
    store = Store()
    kube = InMemoryKube(store)
    now = [START]
    reconciler = CountingReconciler(
        kube,  # type: ignore[arg-type]  # the methods the reconciler calls, in memory
        store,
        WorkQueue(),
        clock=lambda: now[0],
        default_prometheus_url="http://prometheus.bench:9090",
    )
    body = fleet(k=4)
    body["metadata"]["resourceVersion"] = "1"
    store.put_sdep(body, deleted=False)
    passes, done, ks = 0, 0, [3, 4]
    checks: Counter[str] = Counter()
    check_seconds: Counter[str] = Counter()
    with counting_checks(checks, check_seconds):
        while done < rollouts:
            passes += _rollout(reconciler, store, now, ks[done % 2], passes_per_phase)
            done += 1
    return PassCost(
        passes, reconciler.calls, reconciler.seconds, dict(reconciler.asked), rollouts, checks, check_seconds
    )


def _rollout(reconciler: "CountingReconciler", store: Store, now: list[datetime], k: int, passes_per_phase: int) -> int:
    """Healthy for a while, then k changed and canaried until promoted: the passes it took."""
    key = (NAMESPACE, NAME)
    for _ in range(passes_per_phase):  # Healthy: fleet looks
        now[0] += TICK
        asyncio.run(reconciler.reconcile(key))
    changed = copy.deepcopy(store.sdeps[key])
    changed["spec"]["speculative"]["numSpeculativeTokens"] = k
    changed["metadata"]["generation"] += 1
    store.put_sdep(changed, deleted=False)
    passes = passes_per_phase
    while passes < 11 * passes_per_phase:  # the canary, until it is promoted and stable rolled
        now[0] += TICK
        asyncio.run(reconciler.reconcile(key))
        passes += 1
        status = store.sdeps[key].get("status", {})
        if status.get("phase") == "Healthy" and not status.get("canaryRevision"):
            break
    history = store.sdeps[key]["status"]["history"]
    assert history[-1]["outcome"] == "Promoted", history[-1]
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=20)
    args = parser.parse_args()
    cost = measure(args.rollouts)
    print(f"{cost.rollouts} rollouts, {cost.passes} passes, {cost.calls} decide calls, asked: {cost.asked}")
    print(f"{cost.calls_per_pass:.2f} decide calls/pass, {cost.ms_per_call:.2f} ms/call, ", end="")
    print(f"{cost.calls_per_pass * cost.ms_per_call:.2f} ms/pass in decide")
    again = cost.calls + cost.asked.get("room that fits", 0)
    print(f"deciding again after every answer (a room that fits too): {again / cost.passes:.2f} decide calls/pass")
    for what, calls in cost.checks.items():
        ms = 1000 * cost.check_seconds[what] / calls
        print(f"{what}: {calls / cost.passes:.2f} calls/pass, {ms:.3f} ms/call")


if __name__ == "__main__":
    main()
