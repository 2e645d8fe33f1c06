"""A new drafter's preflight against the real dev cluster: the operator creates the Job, the dev cluster's Job
controller runs it, the simulator plays the kubelet for its pod (the real check, `python -m specfleet.preflight`,
on tokenizer files made here and laid out as the pods' Hugging Face cache). A tokenizer mismatch fails the
preflight and the canary never starts; a drafter with the target's tokenizer passes it and is promoted."""

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from specfleet.api.vocabulary import LABEL_PREFLIGHT
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.fleetpods.tiny_tokenizers import hub_snapshot, write_tokenizer

from fleetkit import PLAIN, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

TARGET, DRAFTER, OTHER_VOCAB = "specfleet-test/target", "specfleet-test/drafter", "specfleet-test/other-vocab"


def draft_model(model: str) -> dict[str, Any]:
    return {"method": "draft_model", "model": model, "revision": "main", "numSpeculativeTokens": 3}


@pytest.fixture
def model_cache(tmp_path: Path) -> Path:
    """The pods' model cache (HF_HOME) on this machine: three hub models, one with another vocabulary size."""
    cache = tmp_path / "model-cache"
    write_tokenizer(hub_snapshot(cache, TARGET, "main"))
    write_tokenizer(hub_snapshot(cache, DRAFTER, "main"))
    write_tokenizer(hub_snapshot(cache, OTHER_VOCAB, "main"), vocab_size=600)
    return cache


class Seen:
    """The names of every Deployment and Job the API server reports in a namespace while this runs: a watch
    from a listing's resourceVersion on, so an object that comes and goes between two looks is seen too."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.deployments: set[str] = set()
        self.jobs: set[str] = set()
        self._stop = threading.Event()
        apps, batch = kubernetes.client.AppsV1Api(api), kubernetes.client.BatchV1Api(api)
        self._threads = [
            threading.Thread(target=self._watch, args=(apps.list_namespaced_deployment, namespace, self.deployments)),
            threading.Thread(target=self._watch, args=(batch.list_namespaced_job, namespace, self.jobs)),
        ]
        for thread in self._threads:
            thread.start()

    def _watch(self, list_call: Any, namespace: str, names: set[str]) -> None:
        listing = list_call(namespace)
        names.update(item.metadata.name for item in listing.items)
        version = listing.metadata.resource_version
        while not self._stop.is_set():
            for event in kubernetes.watch.Watch().stream(
                list_call, namespace, resource_version=version, timeout_seconds=2
            ):
                names.add(event["object"].metadata.name)
                version = event["object"].metadata.resource_version

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


@pytest.fixture
def seen(k8s_api: kubernetes.client.ApiClient, namespace: str) -> Iterator[Seen]:
    watching = Seen(k8s_api, namespace)
    yield watching
    watching.stop()


def events(fleet: Fleet, reason: str) -> list[str]:
    listing = fleet.core.list_namespaced_event(fleet.namespace, field_selector="involvedObject.name=llama")
    return [e.message for e in listing.items if e.reason == reason]


def test_a_tokenizer_mismatch_fails_preflight_and_the_canary_never_starts_a_match_passes(
    dev_cluster: ClusterInfo,
    operator: Operator,
    fleet: Fleet,
    namespace: str,
    tmp_path: Path,
    model_cache: Path,
    seen: Seen,
) -> None:
    simulator = Simulator(dev_cluster, namespace, tmp_path, extra=("--model-cache", str(model_cache)))
    try:
        fleet.apply(sdep(model={"name": TARGET, "revision": "main"}, speculative=PLAIN))
        stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]

        fleet.patch_spec("llama", {"speculative": draft_model(OTHER_VOCAB)})
        aborted = wait_for("the canary aborted", fleet.phase_is("llama", "Aborted"), timeout=120)
        preflight = aborted["preflight"]
        assert preflight["state"] == "Failed" and preflight["revision"] == aborted["rejectedRevision"], aborted
        assert "vocabulary size differs: target 512 tokens, drafter 600" in preflight["message"], preflight
        # events are posted after the status that they explain is written: wait for it
        failed = wait_for("the PreflightFailed event", lambda: events(fleet, "PreflightFailed"), timeout=30)
        assert "vocabulary size differs: target 512 tokens, drafter 600" in failed[0], failed
        assert f"llama-preflight-{preflight['revision']}" in seen.jobs
        assert "llama-canary" not in seen.deployments, "a failed preflight never gets a canary"
        assert aborted["stableRevision"] == stable

        fleet.patch_spec("llama", {"speculative": draft_model(DRAFTER)})
        promoted = wait_for(
            "the matching drafter promoted",
            lambda: (s := fleet.status("llama")).get("stableRevision") not in (None, stable) and s,
            timeout=180,
        )
        assert promoted["preflight"]["state"] == "Passed", promoted["preflight"]
        assert promoted["preflight"]["message"].startswith("same vocabulary (512 tokens, bos 1, eos 2, pad 0)")
        wait_for("the PreflightPassed event", lambda: events(fleet, "PreflightPassed"), timeout=30)
        assert "llama-canary" in seen.deployments, "a passed preflight lets the canary start"
        wait_for(
            "the preflight Jobs deleted once decided",
            lambda: not fleet.kubectl("get", "jobs", "-l", LABEL_PREFLIGHT, "-o", "name").stdout.strip(),
            timeout=60,
        )
    finally:
        simulator.stop()


def test_without_a_model_cache_the_simulator_gives_hub_models_one_stand_in_tokenizer(
    dev_cluster: ClusterInfo, operator: Operator, fleet: Fleet, namespace: str, tmp_path: Path
) -> None:
    """What the demo and the other tests rely on: hub ids that are not on this machine all get the same
    stand-in tokenizer, so their drafters pass preflight and their canaries are judged as before."""
    simulator = Simulator(dev_cluster, namespace, tmp_path)
    try:
        fleet.apply(sdep(speculative=PLAIN))
        stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
        fleet.patch_spec("llama", {"speculative": draft_model("meta-llama/Llama-3.2-1B-Instruct")})
        promoted = wait_for(
            "the canary promoted",
            lambda: (s := fleet.status("llama")).get("stableRevision") not in (None, stable) and s,
            timeout=180,
        )
        assert promoted["preflight"]["state"] == "Passed", promoted["preflight"]
    finally:
        simulator.stop()
    assert "wrote a stand-in tokenizer" in (tmp_path / "sim.log").read_text()
