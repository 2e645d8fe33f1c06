"""Builders for the engines behind `specfleet sim` (the simulator, real vLLM on CPU) and the load test: pods as
they read them, vLLM argv, one simulated engine, and waiting on what their servers do in wall time."""

import json
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import LABEL_NAME, LABEL_TRACK, Track
from specfleet.hardware import MI325X, PRODUCT_NAME_LABEL, GpuProduct
from specfleet.render.manifests import deployment, revision
from specfleet_workshop.fleetpods.pods import parse_vllm_args
from specfleet_workshop.sim import load_scenario
from specfleet_workshop.sim.engine import Engine, configure
from specfleet_workshop.sim.scenario import resolve

from repokit import EXAMPLES

MI325X_NODE = {PRODUCT_NAME_LABEL: "AMD_Instinct_MI325_OAM"}
"""The labels of a node with MI325X GPUs, as the AMD node labeller writes them."""
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
K = 4
PLAIN = [TARGET, "--served-model-name", "llama"]
"""`vllm serve` argv without speculation."""
GOOD = [*PLAIN, "--speculative-config", json.dumps(
    {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": K}
)]  # fmt: skip
"""`vllm serve` argv with a well-matched EAGLE-3 drafter at k=4 (acceptance 0.8 in SCENARIO)."""
BAD = [*PLAIN, "--speculative-config", json.dumps(
    {"method": "draft_model", "model": "acme/Llama-3.2-1B-draft", "num_speculative_tokens": K}
)]  # fmt: skip
"""`vllm serve` argv with a poor, costly draft model at k=4 (acceptance 0.3 in SCENARIO)."""
SCENARIO = """
defaults: {load: 0, acceptance_spread: 0}     # only the test's requests; every prompt alike
pairs:
  - {target: "*", drafter: "yuhuili/EAGLE3-*", acceptance: 0.8}                 # a well-matched EAGLE-3 head
  - {target: "*", drafter: "acme/*", acceptance: 0.3, draft_cost: 0.3}          # a poor, costly draft model
"""
"""What a user states: alpha and the drafter's cost per pair, k in the pods' arguments, no other load."""


def vllm_pod(
    name: str, argv: list[str], track: str = "stable", sdep: str = "llama", ready: bool = True
) -> dict[str, Any]:
    """A running pod of fleet `sdep` in namespace `team` whose container runs `vllm serve` with `argv`."""
    return {
        "metadata": {
            "namespace": "team",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {LABEL_NAME: sdep, LABEL_TRACK: track},
        },
        "spec": {"nodeName": "mi325x-0", "containers": [{"name": "vllm", "command": ["vllm", "serve"], "args": argv}]},
        "status": {
            "phase": "Running",
            "podIP": "10.64.0.7",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def example_pod(
    name: str,
    example: str = "llama-8b-eagle3-mi325x.yaml",
    track: Track = Track.CANARY,
    ready: bool = True,
    phase: str = "Running",
    vllm_version: str | None = None,
) -> dict[str, Any]:
    """A pod in namespace `team` from the template `specfleet render` makes of an example (at `vllm_version`)."""
    document = yaml.safe_load((EXAMPLES / example).read_text())
    if vllm_version is not None:
        document["spec"]["engine"]["vllmVersion"] = vllm_version
    sdep = SpeculativeDeployment.from_mapping(document)
    template = deployment(sdep, track, revision(sdep.spec), 1)["spec"]["template"]
    return {
        "metadata": {**template["metadata"], "namespace": "team", "name": name, "uid": f"uid-{name}"},
        "spec": {**template["spec"], "nodeName": "mi325x-0"},
        "status": {
            "phase": phase,
            "podIP": "10.64.0.7",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def engine(
    argv: list[str], scenario: str = "", seed: int = 1, gpu: GpuProduct = MI325X, track: str = "canary"
) -> Engine:
    """One simulated engine at time 0 for a pod of this track running `vllm serve argv` under `scenario`."""
    args = parse_vllm_args(argv)
    config = configure(args, resolve(load_scenario(scenario), args.identity(track)), gpu)
    return Engine(config, args.histogram_buckets, random.Random(seed), start=0.0)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll `probe` until it answers something true, and return that; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value
