"""The preflight Job as rendered (pure), as observed (its conditions and its pod's termination message), and
what the shell does with a decision's `preflight`: create it once, delete the fleet's other ones, never touch
a Job the fleet does not control."""

import json
from typing import Any

import pytest

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import LABEL_NAME, LABEL_PREFLIGHT, LABEL_REVISION, Track
from specfleet.controller.queue import WorkQueue
from specfleet.controller.reconciler import Reconciler
from specfleet.controller.store import PREFLIGHT_POD, Store
from specfleet.observation import preflight_observations
from specfleet.preflight.__main__ import parser
from specfleet.preflight.job import MAX_NAME, job_name, preflight_job
from specfleet.render.manifests import deployment, service
from specfleet.rollout import PreflightObservation, PreflightState, TrackTarget

from bad_specs import BASE, merged

UID = "u1"
KEY = ("default", "llama-eagle3")
DRAFTER = {"speculative": {"model": "org/new-drafter", "revision": "v2", "sizeGiB": 2.5}}


def fleet(**spec: Any) -> SpeculativeDeployment:
    document = merged(BASE, {"metadata": {"uid": UID}, "spec": merged(DRAFTER, spec)})
    return SpeculativeDeployment.from_mapping(document)


def job(rev: str = "abc123", **spec: Any) -> dict[str, Any]:
    sdep = fleet(**spec)
    return preflight_job(sdep, rev, sdep.spec.serving())


def test_the_job_runs_the_check_once_in_the_serving_image_without_a_gpu() -> None:
    manifest, sdep = job(), fleet()
    serving = deployment(sdep, Track.CANARY, "abc123", 1)["spec"]["template"]["spec"]
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert manifest["apiVersion"] == "batch/v1" and manifest["metadata"]["name"] == "llama-eagle3-preflight-abc123"
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["activeDeadlineSeconds"] > 0
    # one failure of the check fails it, but a pod lost with its node (PodGC marks it DisruptionTarget) or
    # evicted is run again: a chaos run's node deletion aborted two canaries on "BackoffLimitExceeded"
    assert manifest["spec"]["podFailurePolicy"] == {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    assert "ttlSecondsAfterFinished" not in manifest["spec"], "the operator deletes it"
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert container["image"] == serving["containers"][0]["image"]
    assert container["command"] == ["python3", "-m", "specfleet.preflight"]
    assert container["env"] == serving["containers"][0]["env"]
    assert [v for v in serving["volumes"] if v["name"] == "model-cache"] == pod["volumes"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "amd.com/gpu" not in json.dumps(container["resources"])
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["affinity"] == serving["affinity"] and pod["tolerations"] == serving["tolerations"]
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner["uid"] == UID and owner["controller"] is True


def test_the_hub_token_reaches_the_job_as_it_reaches_the_serving_pods() -> None:
    (container,) = job(storage={"hfTokenSecret": {"name": "hf"}})["spec"]["template"]["spec"]["containers"]
    tokens = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    assert tokens == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def test_its_arguments_are_both_models_and_validations_budget() -> None:
    (container,) = job()["spec"]["template"]["spec"]["containers"]
    args = parser().parse_args(container["args"])
    assert (args.target, args.target_revision) == ("meta-llama/Llama-3.1-8B-Instruct", None)
    assert (args.drafter, args.drafter_revision) == ("org/new-drafter", "v2")
    assert (args.gpu, args.gpu_budget_gib) == ("MI300X", 172.8)  # 192 GiB x 0.9
    assert (args.target_size_gib, args.drafter_size_gib) == (16, 2.5)
    assert str(args.termination_log) == container["terminationMessagePath"]
    unknown = job(accelerator={"productNames": []})["spec"]["template"]["spec"]["containers"][0]["args"]
    assert parser().parse_args(unknown).gpu_budget_gib is None


def test_the_fleets_service_never_selects_its_pods() -> None:
    manifest, sdep = job(), fleet()
    pod_labels = manifest["spec"]["template"]["metadata"]["labels"]
    selector = service(sdep)["spec"]["selector"]
    assert not selector.items() <= pod_labels.items()
    assert pod_labels[LABEL_PREFLIGHT] == "llama-eagle3" and pod_labels[LABEL_REVISION] == "abc123"
    labels = manifest["metadata"]["labels"]
    assert labels[LABEL_NAME] == "llama-eagle3" and labels[LABEL_PREFLIGHT] == "llama-eagle3"


def test_a_long_fleet_name_is_cut_so_the_job_name_fits_a_label() -> None:
    sdep = SpeculativeDeployment.from_mapping(merged(BASE, {"metadata": {"name": "a" * 41 + "-" + "b" * 8}}))
    name = job_name(sdep, "0123456789")
    assert name == "a" * 41 + "-preflight-0123456789" and len(name) <= MAX_NAME


def test_a_method_without_a_drafter_model_has_no_preflight() -> None:
    sdep = fleet(speculative={"method": "ngram", "model": None, "revision": None, "sizeGiB": None})
    with pytest.raises(ValueError, match="no drafter model"):
        preflight_job(sdep, "r", sdep.spec.serving())


def observed_job(rev: str, condition: str | None = None, uid: str = "job-1", owner: str = UID) -> dict[str, Any]:
    conditions = [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded", "message": "gave up"}]
    return {
        "metadata": {
            "name": f"llama-preflight-{rev}",
            "uid": uid,
            "labels": {LABEL_PREFLIGHT: "llama", LABEL_REVISION: rev, LABEL_NAME: "llama"},
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "status": {"conditions": conditions if condition else []},
    }


def job_pod(job_uid: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"ownerReferences": [{"kind": "Job", "uid": job_uid, "controller": True}]},
        "status": {"containerStatuses": [{"name": "preflight", "state": state}]},
    }


VERDICT = json.dumps({"passed": False, "summary": "EOS id differs: target 2, drafter 3", "problems": ["..."]})


@pytest.mark.parametrize(
    ("condition", "pods", "expected"),
    [
        (None, [], PreflightObservation("r1", PreflightState.RUNNING, "")),
        (
            None,
            [job_pod("job-1", {"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}})],
            PreflightObservation("r1", PreflightState.RUNNING, "waiting: ImagePullBackOff: pull failed"),
        ),
        (
            "Failed",
            [job_pod("job-1", {"terminated": {"exitCode": 1, "message": VERDICT}})],
            PreflightObservation("r1", PreflightState.FAILED, "EOS id differs: target 2, drafter 3"),
        ),
        (
            "Failed",
            [
                job_pod(
                    "job-1", {"terminated": {"exitCode": 1, "message": "Traceback...\nImportError: no transformers"}}
                )
            ],
            PreflightObservation("r1", PreflightState.FAILED, "ImportError: no transformers"),
        ),
        ("Failed", [], PreflightObservation("r1", PreflightState.FAILED, "BackoffLimitExceeded: gave up")),
        (
            "Complete",
            [job_pod("job-1", {"terminated": {"exitCode": 0, "message": '{"summary": "same vocabulary"}'}})],
            PreflightObservation("r1", PreflightState.PASSED, "same vocabulary"),
        ),
        (
            "Complete",
            [job_pod("job-other", {"terminated": {"exitCode": 1, "message": VERDICT}})],
            PreflightObservation("r1", PreflightState.PASSED, ""),
        ),
    ],
)
def test_a_job_reads_as_running_passed_or_failed_with_the_checks_own_words(
    condition: str | None, pods: list[dict[str, Any]], expected: PreflightObservation
) -> None:
    assert preflight_observations([observed_job("r1", condition)], pods, UID) == {"r1": expected}


def test_jobs_the_fleet_does_not_control_are_not_observed() -> None:
    jobs = [observed_job("r1", "Complete", owner="someone-else"), observed_job("r2", "Failed", uid="job-2")]
    assert set(preflight_observations(jobs, [], UID)) == {"r2"}


class RecordingKube:
    """The writes the shell makes, in order; nothing exists to read back."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, str]] = []

    def create(self, manifest: dict[str, Any]) -> None:
        self.writes.append(("create", manifest["kind"], manifest["metadata"]["name"]))

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        self.writes.append(("delete", kind, name))


def reconciler() -> tuple[Reconciler, RecordingKube]:
    kube = RecordingKube()
    return Reconciler(kube, Store(), WorkQueue()), kube  # type: ignore[arg-type]


def test_the_shell_creates_the_wanted_job_once_and_deletes_the_fleets_others() -> None:
    sdep = fleet()
    rev = "abc123"
    wanted = preflight_job(sdep, rev, sdep.spec.serving())
    wanted["metadata"]["uid"] = "job-wanted"
    old = {**observed_job("old"), "metadata": {**observed_job("old")["metadata"], "name": "llama-eagle3-preflight-old"}}
    foreign = observed_job("x", owner="someone-else")
    shell, kube = reconciler()
    jobs = {j["metadata"]["name"]: j for j in (old, foreign)}
    shell._reconcile_preflight(KEY, sdep, TrackTarget(rev, sdep.spec.serving(), 0), jobs)
    assert kube.writes == [
        ("delete", "Job", "llama-eagle3-preflight-old"),
        ("create", "Job", wanted["metadata"]["name"]),
    ]
    kube.writes.clear()
    shell._reconcile_preflight(
        KEY, sdep, TrackTarget(rev, sdep.spec.serving(), 0), {wanted["metadata"]["name"]: wanted}
    )
    assert kube.writes == [], "a Job that exists is left alone (its template cannot change)"
    shell._reconcile_preflight(KEY, sdep, None, {wanted["metadata"]["name"]: wanted, **jobs})
    assert kube.writes == [("delete", "Job", wanted["metadata"]["name"]), ("delete", "Job", old["metadata"]["name"])]


def test_a_job_of_that_name_the_fleet_does_not_control_is_a_conflict_not_taken_over() -> None:
    sdep = fleet()
    wanted = preflight_job(sdep, "abc123", sdep.spec.serving())
    theirs = {**wanted, "metadata": {**wanted["metadata"], "ownerReferences": []}}
    shell, kube = reconciler()
    shell._reconcile_preflight(
        KEY, sdep, TrackTarget("abc123", sdep.spec.serving(), 0), {wanted["metadata"]["name"]: theirs}
    )
    assert kube.writes == [] and shell._conflicts[KEY] == {f"Job/{wanted['metadata']['name']}"}


def test_preflight_pods_are_stored_under_the_fleet_their_label_names() -> None:
    store = Store()
    pod = {"metadata": {"name": "p", "namespace": KEY[0], "labels": {LABEL_PREFLIGHT: KEY[1]}}}
    assert store.put_child(PREFLIGHT_POD, pod, deleted=False, label=LABEL_PREFLIGHT) == KEY
    assert store.children(PREFLIGHT_POD, KEY) == {"p": pod} and store.children("Pod", KEY) == {}
