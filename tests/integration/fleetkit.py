"""Helpers for integration tests that run the operator: process wrappers (the operator, the vLLM fleet
simulator), API shortcuts, manifests and the canary scenario the analysis tests share."""

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
import yaml

from specfleet.api.vocabulary import API_VERSION, GROUP, KIND, PLURAL, VERSION
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.fleetpods.loopback import free_port

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 60.0) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` and the last value at the deadline."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not value:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {value!r}")
        time.sleep(0.25)
        value = probe()
    return value


class Operator:
    """`specfleet run` as a child process, restricted to one namespace."""

    def __init__(
        self,
        cluster: ClusterInfo,
        namespace: str,
        log: Path,
        prometheus_url: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.cluster, self.namespace, self.log = cluster, namespace, log
        self.prometheus_url, self.extra = prometheus_url, extra
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "specfleet.cli", "run", "--namespace", self.namespace, "--liveness", ""]
        command += ["--kubeconfig", str(self.cluster.kubeconfig), "--resync", "30"]
        if self.prometheus_url:
            command += ["--prometheus-url", self.prometheus_url]
        command += self.extra
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL: no clean-up code runs, as when a node dies."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def running(operator: Operator) -> Iterator[Operator]:
    """`operator` started, and stopped on the way out."""
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


class Fleet:
    """Helpers over the API for one namespace."""

    def __init__(self, api: kubernetes.client.ApiClient, cluster: ClusterInfo, namespace: str) -> None:
        self.unguarded = False
        """Whether the fleets applied here that name no Prometheus say `rollout.unguarded: true` unless they
        say otherwise: set for an operator without a Prometheus, as a user of a cluster without one must."""
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.apps = kubernetes.client.AppsV1Api(api)
        self.core = kubernetes.client.CoreV1Api(api)
        self.cluster, self.namespace = cluster, namespace

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.cluster.kubectl), "--kubeconfig", str(self.cluster.kubeconfig), "-n", self.namespace]
        return subprocess.run([*command, *args], input=stdin, capture_output=True, text=True, timeout=60, check=check)

    def specfleet(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`kubectl specfleet ARGS` in this namespace, as the plugin runs it (kubectl itself would take no flags
        before a plugin's name)."""
        command = [sys.executable, "-m", "specfleet.cli", *args]
        command += ["--kubeconfig", str(self.cluster.kubeconfig), "-n", self.namespace]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    def apply(self, document: dict[str, Any]) -> None:
        spec = document.get("spec")
        if self.unguarded and document.get("kind") == KIND and isinstance(spec, dict) and "prometheus" not in spec:
            rollout = document["spec"].get("rollout", {})
            if isinstance(rollout, dict):
                document = {**document, "spec": {**document["spec"], "rollout": {"unguarded": True, **rollout}}}
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(document))

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def make_room_for(self, template: dict[str, Any]) -> None:
        """Create what a pod template names and a pod cannot start without: its ServiceAccount (here) and its
        PriorityClass (cluster-wide, shared by the tests that name the same one)."""
        objects = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": template["spec"]["serviceAccountName"]}}
        ]
        priority = {"metadata": {"name": template["spec"]["priorityClassName"]}, "value": 1000}
        objects.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **priority})
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def annotate(self, name: str, key: str, value: str) -> None:
        self.kubectl("annotate", "--overwrite", f"sdep/{name}", f"{key}={value}")

    def deployments(self) -> dict[str, Any]:
        return {d.metadata.name: d for d in self.apps.list_namespaced_deployment(self.namespace).items}

    def pods(self, selector: str) -> list[Any]:
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def phase_is(self, name: str, phase: str) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            status = self.status(name)
            return status if status.get("phase") == phase else None

        return probe


def canaried(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The history's canaried revisions: all but the `Created` entry of the revision the fleet started on."""
    return [h for h in status.get("history", []) if h["outcome"] != "Created"]


OUTCOME_SECONDS = 900
"""How long a canary may take to end. A Pass needs evidence that shows the canary within every limit: an A/A
canary's took 2-4 minutes on a quiet machine and over 7 in the suite's CPU-bound first quarter hour."""


def outcome_of(fleet: "Fleet", name: str = "llama", timeout: float = OUTCOME_SECONDS) -> dict[str, Any]:
    """The fleet's status once its canary has ended (an outcome beside `Created` in its history): a rollback
    ends the wait at once, so a test of a promotion fails with the reason, not at a deadline."""
    return wait_for("the canary's outcome", lambda: canaried(s := fleet.status(name)) and s, timeout)


def promotion_of(fleet: "Fleet", canary: str, name: str = "llama") -> dict[str, Any]:
    """The fleet's status once its canary ended, which must be `canary` promoted (the status says why not)."""
    status = outcome_of(fleet, name)
    assert [h["outcome"] for h in canaried(status)] == ["Promoted"] and status["stableRevision"] == canary, status
    return status


def schemaless_crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    """A namespaced CRD serving `group`/v1 `kind` with no schema: a stand-in for another project's kind."""
    names = {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"}
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


def sdep(name: str = "llama", replicas: int = 2, steps: list[dict[str, Any]] | None = None, **spec: Any) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculative": {
                "method": "eagle3",
                "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "revision": "main",
                "numSpeculativeTokens": 4,
            },
            "engine": {"tensorParallelSize": 2},
            "accelerator": {"productNames": ["AMD_Instinct_MI300X_OAM"]},
            "rollout": {
                "steps": steps
                or [{"weight": 25, "pause": {"duration": "2s"}}, {"weight": 50, "pause": {"duration": "2s"}}]
            },
            **spec,
        },
    }


def healthy(fleet: Fleet, name: str = "llama", **kwargs: Any) -> dict[str, Any]:
    fleet.apply(sdep(name, **kwargs))
    return wait_for(f"{name} Healthy", fleet.phase_is(name, "Healthy"))


GOOD_DRAFTER = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SCENARIO: dict[str, Any] = {
    "defaults": {"acceptance": 0.8, "load": 15.0, "output_tokens": 128, "noise": 0.05},
    "pairs": [{"target": "*", "drafter": "bad/*", "acceptance": 0.3}],
}
ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 50, "pause": {"duration": "1s"}}],
    "analysis": {
        "interval": "5s",
        "window": "45s",
        "onNoData": {"after": "10m", "action": "Rollback"},
        "onProviderError": {"after": "20s", "action": "Rollback"},
    },
    "guardrails": {"minDraftTokens": 200},
    "progressDeadline": "2m",
}
"""Fast looks for the dev cluster. A canary as good as stable needs a few thousand requests to show its per-token
p95 within +10%; on a busy 2-core box the simulator's batches skew a little and that took over 5 minutes
(an A/A canary rolled back by `onNoData` at 5m with its bound at +10.05%), so no-data rolls back after 10m
(users' default is 30m), within the 15 minutes `outcome_of` waits."""
SCRAPE_SECONDS = 5
"""The dev cluster's Prometheus scrape interval (`specfleet dev up --scrape-interval`, default 5s)."""
PLAIN = {"method": "none"}
EAGLE3_K5 = {"method": "eagle3", "model": GOOD_DRAFTER, "revision": "main", "numSpeculativeTokens": 5}


class Simulator:
    """`specfleet sim` as a child process for one namespace, with its control endpoint."""

    def __init__(self, cluster: ClusterInfo, namespace: str, workdir: Path, extra: tuple[str, ...] = ()) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        scenario = workdir / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(SCENARIO))
        command = [
            sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario),
            "--kubeconfig", str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir),
            "--namespace", namespace, "--listen", self.url.removeprefix("http://"), "--seed", "7", *extra,
        ]  # fmt: skip
        self.log = (workdir / "sim.log").open("wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("the simulator to listen", self._answers, timeout=120)  # a start-up, not a speed: busy runs are slow

    def _answers(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/scenario", timeout=2).status == 200
        except OSError:
            return False

    def put(self, scenario: dict[str, Any]) -> None:
        body = yaml.safe_dump(scenario).encode()
        request = urllib.request.Request(f"{self.url}/scenario", data=body, method="PUT")
        # A control call, not a speed: on a busy machine the simulator's threads can wait seconds for a core.
        assert urllib.request.urlopen(request, timeout=60).status in (200, 204)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 30 s (on a busy machine it can take that long)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


def start_canary(fleet: Fleet, canary: dict[str, Any], stable: dict[str, Any] | None = None) -> str:
    """A Healthy fleet serving `stable`'s speculative config, then changed to `canary`'s; the canary revision."""
    fleet.apply(sdep(rollout=ROLLOUT, speculative=stable or EAGLE3_K5))
    old = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": canary})
    return wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != old and c)


def oom_killed(fleet: Fleet, pod: str, container: str = "vllm") -> None:
    """Report, as a kubelet would, that `pod`'s container was OOM-killed and restarted (Ready again).

    kwok sets a pod's status only while it is Pending and not Ready (its pod-ready stage), so a Running
    pod keeps the status written here; containerStatuses is replaced as a whole by the patch.
    """
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "name": container,
        "image": fleet.core.read_namespaced_pod(pod, fleet.namespace).spec.containers[0].image,
        "ready": True,
        "restartCount": 1,
        "state": {"running": {"startedAt": now}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": now, "finishedAt": now}},
    }
    fleet.core.patch_namespaced_pod_status(pod, fleet.namespace, {"status": {"containerStatuses": [status]}})
