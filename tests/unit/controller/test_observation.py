"""Reading the cluster into the state machine's inputs: pods at the current revision, commands, odd data."""

from datetime import UTC, datetime
from typing import Any

import pytest

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import Track
from specfleet.observation import controlled_by, observe, parse, track_observation

from bad_specs import BASE, merged


def pod(revision: str, ready: bool = True, track: str = "stable", unschedulable: str = "") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        )
    labels = {"specfleet.io/name": "llama-eagle3", "specfleet.io/track": track, "specfleet.io/revision": revision}
    return {"metadata": {"labels": labels}, "status": {"conditions": conditions}}


def deployment(revision: str, replicas: int = 2, updated: int = 2, total: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"generation": 3},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"specfleet.io/revision": revision}}}},
        "status": {"observedGeneration": 3, "updatedReplicas": updated, "replicas": total},
    }


def test_only_ready_pods_at_the_current_revision_count() -> None:
    observed = track_observation(deployment("new"), [pod("old"), pod("new"), pod("new", ready=False)])
    assert observed.revision == "new" and observed.ready == 1 and not observed.settled


def test_settled_when_every_replica_is_at_the_template() -> None:
    observed = track_observation(deployment("new"), [pod("new"), pod("new")])
    assert observed.settled and observed.ready == 2
    rolling = track_observation(deployment("new", total=3), [pod("new"), pod("new"), pod("old")])
    assert not rolling.settled


def test_the_scheduler_message_of_a_pending_pod_is_kept() -> None:
    message = "0/7 nodes are available: 7 Insufficient amd.com/gpu."
    observed = track_observation(deployment("new"), [pod("new", ready=False, unschedulable=message)])
    assert observed.unschedulable == message


def test_a_command_given_again_after_it_was_consumed_is_new() -> None:
    def at(time: str) -> SpeculativeDeployment:
        meta = {
            "annotations": {"specfleet.io/promote": "step"},
            "managedFields": [
                {
                    "manager": "kubectl-annotate",
                    "time": time,
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:specfleet.io/promote": {}}}},
                },
            ],
        }
        return SpeculativeDeployment.from_mapping(merged(BASE, {"metadata": meta}))

    now = datetime(2026, 11, 29, tzinfo=UTC)
    first = observe(at("2026-11-29T10:00:00Z"), {}, [], now, prometheus=False).commands
    second = observe(at("2026-11-29T10:05:00Z"), {}, [], now, prometheus=False).commands
    assert first["specfleet.io/promote"].startswith("step@") and first != second


def test_missing_deployment_reads_as_an_empty_track() -> None:
    observation = observe(
        SpeculativeDeployment.from_mapping(BASE), {Track.STABLE: None}, [], datetime.now(UTC), prometheus=False
    )
    assert observation.track(Track.STABLE).revision is None and observation.track(Track.CANARY).ready == 0
    assert observation.desired_revision is not None


def test_an_unreadable_status_is_dropped_not_fatal() -> None:
    parsed = parse(merged(BASE, {"status": {"phase": "Exploded", "currentStep": "two"}}))
    assert parsed.sdep is not None and parsed.sdep.status.phase == "Pending"
    assert parsed.problems[0] == "status unreadable, ignored"


def test_ownership_is_by_controller_uid() -> None:
    child = {"metadata": {"ownerReferences": [{"uid": "u1", "controller": True}]}}
    assert controlled_by(child, "u1")
    assert not controlled_by(child, "u2")
    assert not controlled_by({"metadata": {}}, "u1")


def crashed(revision: str, restarts: Any, reason: str | None = None, name: str = "p1", **extra: Any) -> dict[str, Any]:
    """A pod of `revision` whose container `vllm` restarted, its last termination for `reason`."""
    container: dict[str, Any] = {"name": "vllm", "restartCount": restarts, **extra}
    if reason is not None:
        container["lastState"] = {"terminated": {"reason": reason, "exitCode": 137}}
    body = pod(revision, track="canary")
    body["metadata"]["name"] = name
    body["status"]["containerStatuses"] = [container]
    return body


def test_restarts_and_oom_kills_of_pods_at_the_current_revision_are_read() -> None:
    observed = track_observation(
        deployment("new"),
        [crashed("new", 1, "OOMKilled"), crashed("new", 2, "Error", name="p2"), crashed("old", 5, "OOMKilled")],
    )
    assert observed.restarts == 3
    assert [(c.pod, c.container, c.restarts) for c in observed.oom_kills] == [("p1", "vllm", 1)]


def test_a_container_oom_killed_now_counts_before_its_restart() -> None:
    now = crashed("new", 0, state={"terminated": {"reason": "OOMKilled"}})
    observed = track_observation(deployment("new"), [now])
    assert observed.restarts == 0 and len(observed.oom_kills) == 1


@pytest.mark.parametrize(
    "status",
    [
        None,
        "Running",
        {"containerStatuses": None},
        {"containerStatuses": "vllm"},
        {"containerStatuses": [None, 3, {}]},
        {"containerStatuses": [{"name": "vllm", "restartCount": None}]},
        {"containerStatuses": [{"name": "vllm", "restartCount": -3}]},
        {"containerStatuses": [{"name": "vllm", "restartCount": "2"}]},
        {"containerStatuses": [{"name": "vllm", "restartCount": True}]},
        {"containerStatuses": [{"name": None, "lastState": None, "state": "weird"}]},
        {"containerStatuses": [{"lastState": {"terminated": None}, "state": {"terminated": "OOMKilled"}}]},
    ],
)
def test_odd_container_statuses_read_as_no_crash(status: Any) -> None:
    body = pod("new")
    body["status"] = status
    observed = track_observation(deployment("new"), [body])
    assert observed.crashes == () and observed.restarts == 0


def test_a_crash_of_an_unnamed_container_still_counts() -> None:
    body = pod("new")
    body["status"]["containerStatuses"] = [{"restartCount": 2, "lastState": {"terminated": {"reason": "OOMKilled"}}}]
    (crash,) = track_observation(deployment("new"), [body]).crashes
    assert crash.pod == "?" and crash.container == "?" and crash.restarts == 2 and crash.oom_killed


def test_each_side_by_side_slice_counts_only_its_own_pods() -> None:
    def slice_pod(index: int, revision: str, ready: bool = True) -> dict[str, Any]:
        made = pod(revision, ready=ready, track="candidate")
        made["metadata"]["labels"]["specfleet.io/candidate"] = str(index)
        return made

    pods = [
        slice_pod(0, "k2"),
        slice_pod(1, "k3"),
        slice_pod(1, "k3", ready=False),
        pod("k4"),
        pod("k2", track="canary"),
    ]
    sdep = SpeculativeDeployment.from_mapping(BASE)
    slices = {0: deployment("k2", replicas=1, updated=1, total=1), 1: deployment("k3"), 2: None}
    observation = observe(sdep, {}, pods, datetime.now(UTC), prometheus=True, candidate_deployments=slices)
    assert set(observation.candidates) == {0, 1}  # no Deployment, no slice
    assert (observation.candidates[0].revision, observation.candidates[0].ready) == ("k2", 1)
    assert observation.candidates[0].settled
    assert (observation.candidates[1].ready, observation.candidates[1].settled) == (1, False)
    assert (
        observation.track(Track.STABLE).ready == 0 and observation.track(Track.CANARY).ready == 0
    )  # slice pods are no track's


def test_pods_holding_gpus_are_counted_for_moves_between_tracks() -> None:
    """Placed pods hold their GPUs, and so do deleted ones until they are gone; unplaced and finished ones do not."""

    def on_node(p: dict[str, Any], phase: str = "Running", deleted: bool = False) -> dict[str, Any]:
        meta = {**p["metadata"], **({"deletionTimestamp": "2026-12-01T00:00:00Z"} if deleted else {})}
        return {**p, "metadata": meta, "spec": {"nodeName": "mi300x-0"}, "status": {**p["status"], "phase": phase}}

    pods = [
        on_node(pod("old")),  # an old-revision pod still serving while the Deployment rolls
        on_node(pod("new")),
        on_node(pod("new"), deleted=True),
        on_node(pod("new", ready=False), phase="Succeeded"),
        pod("new", ready=False, unschedulable="0/2 nodes are available: 2 Insufficient amd.com/gpu."),
    ]
    observed = track_observation(deployment("new", replicas=3), pods)
    assert (observed.replicas, observed.ready, observed.serving) == (3, 1, 2)
    assert (observed.placed, observed.terminating) == (2, 1)
    assert track_observation(None, pods[2:3]).terminating == 1  # the Deployment is gone, its pods not yet
