"""The simulator serves vLLM pods whoever owns them, labelled so Argo Rollouts' and Flagger's PromQL can tell
canary from stable."""

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from specfleet.api.vocabulary import LABEL_NAME
from specfleet.hardware import PRODUCT_NAME_LABEL
from specfleet.metrics import names
from specfleet_workshop.fleetpods.pods import runs_vllm
from specfleet_workshop.fleetpods.watch import KubePodSource
from specfleet_workshop.sim import Simulator
from specfleet_workshop.sim.scenario import load_scenario

MI300X_NODE = {PRODUCT_NAME_LABEL: "AMD_Instinct_MI300X_OAM"}
EAGLE3 = json.dumps({"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4})


def peer_pod(name: str, labels: dict[str, str], command: tuple[str, ...] = ("vllm", "serve")) -> dict[str, Any]:
    """A pod as a peer controller's ReplicaSet makes it: no specfleet label, only the workload's own."""
    return {
        "metadata": {"namespace": "peers", "name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {
            "nodeName": "mi300x-0",
            "containers": [
                {
                    "name": "server",
                    "command": list(command),
                    "args": ["meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", EAGLE3],
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "10.64.0.9", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    with Simulator(load_scenario("{}"), file_sd_dir=tmp_path, listen=("127.0.0.1", 0)) as simulator:
        yield simulator


def labels_by_pod(sim: Simulator) -> dict[str, dict[str, str]]:
    assert sim.targets_file is not None
    return {group["labels"][names.POD]: group["labels"] for group in json.loads(sim.targets_file.read_text())}


def test_argo_rollout_pods_carry_their_pod_template_hash(sim: Simulator) -> None:
    sim.upsert_pod(peer_pod("llm-6b9f-a", {"app": "llm", "rollouts-pod-template-hash": "6b9f"}), MI300X_NODE)
    sim.upsert_pod(peer_pod("llm-7c44-b", {"app": "llm", "rollouts-pod-template-hash": "7c44"}), MI300X_NODE)
    labels = labels_by_pod(sim)
    assert labels["llm-6b9f-a"]["rollouts_pod_template_hash"] == "6b9f"
    assert labels["llm-7c44-b"]["rollouts_pod_template_hash"] == "7c44"
    assert names.TRACK not in labels["llm-6b9f-a"]


def test_flagger_primary_and_canary_pods_differ_in_app(sim: Simulator) -> None:
    sim.upsert_pod(peer_pod("llm-primary-5d-x", {"app": "llm-primary"}), MI300X_NODE)
    sim.upsert_pod(peer_pod("llm-8f-y", {"app": "llm"}), MI300X_NODE)
    assert {pod: labels["app"] for pod, labels in labels_by_pod(sim).items()} == {
        "llm-primary-5d-x": "llm-primary",
        "llm-8f-y": "llm",
    }


def test_pods_without_vllm_are_ignored_quietly(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    other = peer_pod("dns", {"app": "dns"}, command=("coredns",))
    assert not runs_vllm(other)
    sim.upsert_pod(other, MI300X_NODE)
    assert labels_by_pod(sim) == {}
    assert "dns" not in caplog.text


class FakeCore:
    """Records the keyword arguments of each pod listing."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> None:
        self.calls.append({"namespace": namespace, **kwargs})


@pytest.mark.parametrize(("selector", "expected"), [(LABEL_NAME, {"label_selector": LABEL_NAME}), (None, {})])
def test_the_watch_selects_specfleet_pods_unless_told_to_take_all(selector: str | None, expected: dict) -> None:
    source = KubePodSource(None, ["peers"], sink=None, label_selector=selector)  # type: ignore[arg-type]
    source.core = FakeCore()  # type: ignore[assignment]
    source._list("peers", watch=True)
    assert source.core.calls == [{"namespace": "peers", "watch": True, **expected}]  # type: ignore[attr-defined]
