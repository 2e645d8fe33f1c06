"""`specfleet demo`: the whole product on one machine, in three acts, unattended.

A dev cluster (real control plane, fake AMD Instinct nodes, real Prometheus), the vLLM fleet simulator
and the operator, then a story: a draft-model config goes Healthy; a better EAGLE-3 config is canaried
and promoted; a badly matched drafter is canaried and rolled back automatically. A timeline shows
what was measured at each decision.

Whatever way it ends (the story told, a failure, Ctrl-C, SIGTERM or SIGHUP), it stops the simulator and
the operator it started and the dev cluster if it brought it up, unless `--keep`: then it prints how to
stop them.
"""

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from rich.console import Console

from specfleet.api.crd import crd
from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet.console import make_console
from specfleet_workshop.devcluster.cluster import ClusterInfo, down, status, up
from specfleet_workshop.devcluster.crds import apply_crds
from specfleet_workshop.devcluster.paths import default_state_dir
from specfleet_workshop.devcluster.process import signals_as_interrupts, signals_deferred, signals_ignored
from specfleet_workshop.fleetpods.loopback import free_port

NAME = "llama-70b"
NAMESPACE = "specfleet-demo"
SCENARIO = {
    # moderate load (8 requests/s per pod): small enough batches for speculative decoding to pay. A step
    # passes once its evidence shows the canary within every guardrail: the error rate within 1 point of
    # stable's takes ~1,700 canary requests, ~3.5 min for one canary pod here, under 2 for two. The
    # scenario states each drafter's per-token acceptance (alpha); what Prometheus shows follows from it.
    "defaults": {"acceptance": 0.8, "load": 8.0, "output_tokens": 128, "noise": 0.05},
    "pairs": [
        {"target": "*Llama-3.1-70B*", "drafter": "*Llama-3.2-1B*", "acceptance": 0.8},
        # an EAGLE-3 head is one decoder layer: its name says 70B (the target it was trained for), its cost does not
        {"target": "*Llama-3.1-70B*", "drafter": "*EAGLE3*", "acceptance": 0.85, "draft_cost": 0.01},
        # another model family's tokenizer and style: most guesses miss
        {"target": "*", "drafter": "*Qwen*", "acceptance": 0.3},
    ],
}
ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 25, "pause": {"duration": "10s"}}, {"weight": 50, "pause": {"duration": "10s"}}],
    "analysis": {"interval": "5s", "window": "60s"},
    "guardrails": {"minAcceptanceAlpha": 0.6, "maxTokenLatencyP95Regression": 0.1, "minDraftTokens": 200},
    "progressDeadline": "5m",
}
ACT_SECONDS = 1200.0
"""Longest an act may take. Act 2's promotion has to show a canary's per-token p95 within +10% of stable's: on a
quiet 2-core machine that took 4 to 10 minutes (the bound narrows to +-10% only after ~3,400 canary requests at the
first step), and more when the machine is busy."""
ACTS = [
    (
        "a draft-model config on MI300X goes Healthy",
        {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "revision": "main"},
    ),
    (
        "a better EAGLE-3 drafter is canaried and promoted",
        {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "revision": "main"},
    ),
    (
        "a badly matched drafter (another model family) is canaried and rolled back",
        {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main"},
    ),
]


def manifest(speculative: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "replicas": 4,
            "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "revision": "main", "sizeGiB": 140},
            "speculative": speculative,
            "engine": {"tensorParallelSize": 2},
            "accelerator": {"productNames": ["AMD_Instinct_MI300X_OAM"]},
            "rollout": ROLLOUT,
        },
    }


@dataclass
class Timeline:
    """Prints each change of phase, step or analysis once, with what was measured."""

    console: Console
    start: float = field(default_factory=time.monotonic)
    seen: set[str] = field(default_factory=set)

    def show(self, status: dict[str, Any]) -> None:
        analysis = status.get("lastAnalysis") or {}
        canary, stable = analysis.get("canary") or {}, analysis.get("stable") or {}
        facts = [f"phase={status.get('phase', 'Pending')}"]
        step = status.get("currentStep")
        if step is not None:
            target = ROLLOUT["steps"][step]["weight"]
            facts.append(
                f"step={step + 1}/{len(ROLLOUT['steps'])} ({target}%: canary serves "
                f"{status.get('canaryWeight', 0)}% of ready replicas)"
            )
        progressing: dict[str, Any] = next((c for c in status.get("conditions", []) if c["type"] == "Progressing"), {})
        if progressing.get("reason") in ("CanaryStarting", "Unschedulable", "ReplicasStarting"):
            facts.append(progressing.get("message", ""))
        key = " ".join(facts) + analysis.get("time", "")
        if key in self.seen:
            return
        self.seen.add(key)
        if analysis:
            facts.append(
                f"analysis={analysis['verdict']} alpha canary={_fmt(canary.get('acceptanceAlpha'))} "
                f"stable={_fmt(stable.get('acceptanceAlpha'))} p95 per token "
                f"canary={_ms(canary.get('tokenLatencyP95Seconds'))} stable={_ms(stable.get('tokenLatencyP95Seconds'))}"
            )
            if analysis.get("reasons") and analysis["verdict"] != "Pass":
                facts.append("(" + "; ".join(analysis["reasons"]) + ")")
        self.console.print(f"  [dim]{time.monotonic() - self.start:6.1f}s[/]  " + "  ".join(facts))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}ms"


class Demo:
    def __init__(self, console: Console, workdir: Path) -> None:
        self.console, self.workdir = console, workdir
        self.processes: list[subprocess.Popen[bytes]] = []
        self.cluster: ClusterInfo | None = None

    def start(self) -> ClusterInfo:
        self.console.rule("[bold]specfleet demo")
        self.console.print("bringing up the dev cluster (the first run builds the binaries: minutes)...")
        cluster = up(console=self.console)
        self.cluster = cluster
        api = cluster.api_client()
        apply_crds(cluster, [yaml.safe_dump(crd())])
        core = kubernetes.client.CoreV1Api(api)
        try:
            core.create_namespace(
                kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=NAMESPACE))
            )
        except kubernetes.client.exceptions.ApiException as error:
            if error.status != 409:
                raise
        scenario = self.workdir / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(SCENARIO))
        cli = [sys.executable, "-m", "specfleet.cli"]
        sim = f"127.0.0.1:{free_port()}"  # the operator reaches pods there (output equivalence's requests)
        self._spawn("sim", [*cli, "sim", "--scenario", str(scenario), "--kubeconfig", str(cluster.kubeconfig),
                            "--file-sd-dir", str(cluster.file_sd_dir), "--namespace", NAMESPACE,
                            "--listen", sim])  # fmt: skip
        self._spawn("operator", [*cli, "run", "--namespace", NAMESPACE, "--liveness", "", "--kubeconfig",
                                 str(cluster.kubeconfig), "--prometheus-url", cluster.prometheus_url,
                                 "--pod-url-template", f"http://{sim}/pods/{{namespace}}/{{name}}"])  # fmt: skip
        self.console.print(
            f"cluster, CRD, Prometheus ({cluster.prometheus_url}), simulator and operator are up "
            f"(logs in {self.workdir})"
        )
        return cluster

    def _spawn(self, name: str, command: list[str]) -> None:
        """In a session of their own: a Ctrl-C reaches only the demo, which then stops them (or keeps them)."""
        with signals_deferred(), (self.workdir / f"{name}.log").open("wb") as log:  # no Ctrl-C before it is listed
            self.processes.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )

    def play(self) -> list[str]:
        """The three acts; returns the outcome of each."""
        assert self.cluster is not None
        custom = kubernetes.client.CustomObjectsApi(self.cluster.api_client())
        outcomes = []
        for number, (title, speculative) in enumerate(ACTS, start=1):
            self.console.rule(f"act {number}: {title}")
            body = manifest(speculative)
            if number == 1:
                try:
                    custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME)
                    self._wait(lambda: not self._exists(custom), "the previous run's fleet to go", timeout=120)
                except kubernetes.client.exceptions.ApiException as error:
                    if error.status != 404:
                        raise
                custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
            else:
                custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME,
                                                      {"spec": {"speculative": speculative}})  # fmt: skip
            outcomes.append(self._follow(custom, expect_canary=number > 1))
        return outcomes

    def _exists(self, custom: kubernetes.client.CustomObjectsApi) -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME)
        except kubernetes.client.exceptions.ApiException:
            return False
        return True

    def _status(self, custom: kubernetes.client.CustomObjectsApi) -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME)
        if not isinstance(obj, dict):
            raise TypeError(f"{NAMESPACE}/{NAME}: the API answered {type(obj).__name__}, not an object")
        return obj.get("status") or {}

    def _follow(
        self, custom: kubernetes.client.CustomObjectsApi, expect_canary: bool, timeout: float = ACT_SECONDS
    ) -> str:
        """Print the timeline until the act ends (Healthy without a canary, or a rollback)."""
        timeline = Timeline(self.console)
        deadline = time.monotonic() + timeout
        started = not expect_canary
        while time.monotonic() < deadline:
            status = self._status(custom)
            timeline.show(status)
            started = started or status.get("canaryRevision") is not None
            phase = status.get("phase")
            if (started and phase in ("RolledBack", "Aborted")) or (
                started and phase == "Healthy" and not status.get("canaryRevision")
            ):
                last = (status.get("history") or [{}])[-1]
                outcome = last.get("outcome", phase) if expect_canary else "Healthy"
                self.console.print(f"  => [bold]{outcome}[/] {last.get('reason', '') if expect_canary else ''}")
                return outcome
            time.sleep(1)
        raise TimeoutError(f"the act did not finish within {timeout:.0f}s")

    def _wait(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.5)

    def stop(self, keep: bool, started_cluster: bool) -> None:
        """Stop what the demo started, each step even when an earlier one fails; or say how, with --keep."""
        state_dir = default_state_dir()
        if keep and self.cluster is not None:
            self.console.rule("explore")
            cleanup = f"kill {' '.join(str(p.pid) for p in self.processes)} (simulator, operator)"
            if started_cluster:
                cleanup += f", then `specfleet dev down --state-dir {state_dir}`"
            self.console.print(f"""everything keeps running. Try:
  export KUBECONFIG={self.cluster.kubeconfig}
  specfleet status {NAME} -n {NAMESPACE} -w       (or: kubectl specfleet status ...)
  specfleet history {NAME} -n {NAMESPACE}
  kubectl get sdep,deploy,pods -n {NAMESPACE}
  Prometheus: {self.cluster.prometheus_url}/graph?g0.expr=vllm:spec_decode_num_accepted_tokens_total
clean up: {cleanup}""")
            return
        try:
            stop_processes(self.processes)
            if self.cluster is not None and not started_cluster:  # free the GPUs of a cluster we only borrowed
                kubernetes.client.CoreV1Api(self.cluster.api_client()).delete_namespace(NAMESPACE)
        finally:
            if started_cluster:
                down(state_dir)
                self.console.print("cleaned up: processes stopped, dev cluster down")
            else:
                self.console.print("cleaned up the demo's processes; the dev cluster you had running is left running")


def stop_processes(processes: list[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    """SIGTERM each, then SIGKILL whichever is still there after `timeout` seconds; reap them all."""
    for child in processes:
        if child.poll() is None:
            child.terminate()
    for child in processes:
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run_demo(keep: bool, console: Console | None = None) -> list[str]:
    console = console or make_console()
    workdir = Path(tempfile.mkdtemp(prefix="specfleet-demo-"))
    started_cluster = status().info is None  # a cluster already there (even one `up` repairs) is only borrowed
    demo = Demo(console, workdir)
    with signals_as_interrupts():
        try:
            demo.start()
            outcomes = demo.play()
            console.rule("summary")
            for (title, _), outcome in zip(ACTS, outcomes, strict=True):
                console.print(f"  {outcome:<10} {title}")
            return outcomes
        finally:
            with signals_ignored():
                demo.stop(keep, started_cluster)
