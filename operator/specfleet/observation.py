"""Read what the cluster says (raw API dicts from the watch caches) into the state machine's inputs.

Pure: no API calls here. Counting comes from pods, not from Deployment status, so a Deployment that is
rolling from one revision to another never counts old pods as Ready at the new revision.
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from specfleet.api.problems import InvalidSpecError
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import (
    ALWAYS_SERVED,
    LABEL_CANDIDATE,
    LABEL_NAME,
    LABEL_PREFLIGHT,
    LABEL_REVISION,
    LABEL_TRACK,
    LABEL_TRAFFIC,
    SINGLE_TRACKS,
    Command,
    Track,
)
from specfleet.render.manifests import revision
from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy
from specfleet.rollout import ContainerCrash, Observation, PreflightObservation, PreflightState, TrackObservation
from specfleet.validation import errors, spec_problems

Raw = Mapping[str, Any]
MESSAGE_LIMIT = 500
"""A preflight's message goes into status and an Event: its summary, not the whole verdict."""


@dataclass(frozen=True)
class Parsed:
    """A SpeculativeDeployment body parsed for deciding, or why it could not be."""

    sdep: SpeculativeDeployment | None
    problems: tuple[str, ...] = ()


def _describe(error: ValidationError) -> tuple[str, ...]:
    return tuple(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5])


def parse(body: Raw) -> Parsed:
    """Parse a stored object; odd data (an old schema, a hand-edited status) becomes problems, not a crash.

    A status that cannot be read is dropped (the rollout starts over from the spec) rather than
    blocking the object forever; a spec that cannot be read leaves the object alone.
    """
    try:
        return Parsed(SpeculativeDeployment.from_mapping(body))
    except ValidationError as error:
        problems = _describe(error)
    try:
        without_status = {k: v for k, v in body.items() if k != "status"}
        return Parsed(SpeculativeDeployment.from_mapping(without_status), ("status unreadable, ignored", *problems))
    except ValidationError as error:
        return Parsed(None, ("spec unreadable", *_describe(error)))


def desired_revision(
    sdep: SpeculativeDeployment, policy: TemplatePolicy = DEFAULT_POLICY
) -> tuple[str | None, tuple[str, ...]]:
    """The revision the spec renders to, or None with the reasons it cannot be rendered (a template the
    operator's template policy refuses among them)."""
    problems = errors(spec_problems(sdep.spec, policy))
    if problems:
        return None, tuple(str(p) for p in problems)
    try:
        return revision(sdep.spec), ()
    except InvalidSpecError as error:
        return None, tuple(str(p) for p in error.problems)


def controlled_by(obj: Raw, uid: str | None) -> bool:
    """Whether `obj` is a child of the SpeculativeDeployment with this uid (never touch anything else)."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return uid is not None and any(ref.get("uid") == uid and ref.get("controller") for ref in refs)


DONE = ("Succeeded", "Failed")
"""Pod phases whose containers have ended: such a pod holds no GPU even while it is still on its node."""


def _pod_status(pod: Raw) -> Raw:
    status = pod.get("status")
    return status if isinstance(status, Mapping) else {}


def _is_ready(pod: Raw) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    conditions = _pod_status(pod).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _unschedulable(pod: Raw) -> str:
    for condition in _pod_status(pod).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", "Unschedulable"))
    return ""


def _count(value: Any) -> int:
    """A restartCount as the API server would hold it; anything else (None, a string, < 0) counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _oom_killed(status: Raw) -> bool:
    """Whether the container's current or last termination was an OOM kill."""
    for key in ("state", "lastState"):
        state = status.get(key)
        terminated = state.get("terminated") if isinstance(state, Mapping) else None
        if isinstance(terminated, Mapping) and terminated.get("reason") == "OOMKilled":
            return True
    return False


def container_crashes(pod: Raw) -> tuple[ContainerCrash, ...]:
    """The pod's containers that restarted or were OOM-killed, from `status.containerStatuses`.

    Odd data (a missing or None status, a restartCount that is not a non-negative integer) reads as no
    crash, never as an error.
    """
    meta = pod.get("metadata")
    name = str(meta.get("name") or "?") if isinstance(meta, Mapping) else "?"
    statuses = _pod_status(pod).get("containerStatuses")
    crashes = []
    for container in statuses if isinstance(statuses, list) else ():
        if not isinstance(container, Mapping):
            continue
        restarts, oom = _count(container.get("restartCount")), _oom_killed(container)
        if restarts or oom:
            crashes.append(ContainerCrash(name, str(container.get("name") or "?"), restarts, oom))
    return tuple(crashes)


def track_observation(deployment: Raw | None, pods: Iterable[Raw]) -> TrackObservation:
    """One track: the Deployment's current revision, how many of its pods at that revision are Ready,
    and which of their containers crashed (restarted or were OOM-killed)."""
    pods = list(pods)
    pending = next((m for m in (_unschedulable(p) for p in pods) if m), "")
    on_nodes = [p for p in pods if (p.get("spec") or {}).get("nodeName") and _pod_status(p).get("phase") not in DONE]
    terminating = sum(1 for p in on_nodes if p.get("metadata", {}).get("deletionTimestamp"))
    placed = len(on_nodes) - terminating
    if deployment is None:
        return TrackObservation(unschedulable=pending, placed=placed, terminating=terminating)
    template_labels = deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {}
    current = template_labels.get(LABEL_REVISION)
    current_pods = [p for p in pods if p["metadata"].get("labels", {}).get(LABEL_REVISION) == current]
    ready = sum(1 for p in current_pods if _is_ready(p))
    wanted = deployment.get("spec", {}).get("replicas", 1)
    status = deployment.get("status") or {}
    settled = (
        status.get("observedGeneration", 0) >= deployment.get("metadata", {}).get("generation", 0)
        and status.get("updatedReplicas", 0) == wanted
        and status.get("replicas", 0) == wanted
        and ready >= wanted
    )
    crashes = tuple(crash for p in current_pods for crash in container_crashes(p))
    serving = [p for p in pods if _is_ready(p)]
    always_served = bool(serving) and all(
        p["metadata"].get("labels", {}).get(LABEL_TRAFFIC) == ALWAYS_SERVED for p in serving
    )
    return TrackObservation(
        revision=current,
        ready=ready,
        settled=settled,
        replicas=_count(wanted),
        serving=len(serving),
        placed=placed,
        terminating=terminating,
        unschedulable=pending,
        crashes=crashes,
        always_served=always_served,
    )


def pods_of(pods: Iterable[Raw], name: str, track: Track, candidate: int | None = None) -> list[Raw]:
    """The fleet's pods of one track (of one side-by-side candidate's slice, for track candidate)."""
    return [
        p
        for p in pods
        if p.get("metadata", {}).get("labels", {}).get(LABEL_NAME) == name
        and p["metadata"]["labels"].get(LABEL_TRACK) == track.value
        and (candidate is None or p["metadata"]["labels"].get(LABEL_CANDIDATE) == str(candidate))
    ]


def _job_state(job: Raw) -> tuple[PreflightState, str]:
    """Complete=True passed, Failed=True failed (with the Job controller's reason), anything else runs."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return PreflightState.PASSED, ""
        if condition.get("type") == "Failed":
            return PreflightState.FAILED, f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}"
    return PreflightState.RUNNING, ""


def _termination_message(pod: Raw) -> str:
    """The verdict's summary from the container's termination message (JSON), or the message's last line
    (the log tail the kubelet falls back to), or why the container waits (an image pull, say)."""
    for container in _pod_status(pod).get("containerStatuses") or []:
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated") or {}, state.get("waiting") or {}
        text = str(terminated.get("message") or "").strip()
        if text:
            try:
                return str(json.loads(text)["summary"])
            except (ValueError, KeyError, TypeError):
                return text.splitlines()[-1]
        if waiting.get("reason"):
            return f"waiting: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return _unschedulable(pod)


def preflight_observations(
    jobs: Iterable[Raw], pods: Iterable[Raw], uid: str | None
) -> dict[str, PreflightObservation]:
    """The fleet's preflight Jobs by the revision they check, with the check's own words when its pod has them.

    Jobs not controlled by the fleet are left out, whatever their labels say.
    """
    by_job: dict[str, Raw] = {}
    for pod in pods:
        for ref in pod.get("metadata", {}).get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller"):
                by_job[ref.get("uid")] = pod
    observed = {}
    for job in jobs:
        meta = job.get("metadata", {})
        rev = (meta.get("labels") or {}).get(LABEL_REVISION)
        if rev is None or LABEL_PREFLIGHT not in (meta.get("labels") or {}) or not controlled_by(job, uid):
            continue
        state, reason = _job_state(job)
        job_pod = by_job.get(meta.get("uid"))
        message = (_termination_message(job_pod) if job_pod is not None else "") or reason
        observed[rev] = PreflightObservation(rev, state, message[:MESSAGE_LIMIT])
    return observed


def observe(
    sdep: SpeculativeDeployment,
    deployments: Mapping[Track, Raw | None],
    pods: Iterable[Raw],
    now: datetime,
    *,
    prometheus: bool,
    routed: bool = False,
    preflight_jobs: Iterable[Raw] = (),
    preflight_pods: Iterable[Raw] = (),
    candidate_deployments: Mapping[int, Raw | None] | None = None,
    template_policy: TemplatePolicy = DEFAULT_POLICY,
) -> Observation:
    """The state machine's view of one SpeculativeDeployment and its children."""
    pods = list(pods)
    desired, problems = desired_revision(sdep, template_policy)
    meta = sdep.metadata
    commands = {  # value@time: the same value given again after it was consumed is a new command
        c.annotation: f"{value}@{meta.annotation_set_at(c.annotation)}"
        for c in Command
        if (value := meta.annotations.get(c.annotation)) is not None
    }
    tracks = {
        track: track_observation(deployments.get(track), pods_of(pods, sdep.metadata.name, track))
        for track in SINGLE_TRACKS
    }
    candidates = {
        index: track_observation(deployment, pods_of(pods, meta.name, Track.CANDIDATE, index))
        for index, deployment in (candidate_deployments or {}).items()
        if deployment is not None
    }
    return Observation(
        now=now,
        generation=sdep.metadata.generation or 0,
        desired_revision=desired,
        problems=problems,
        tracks=tracks,
        commands=commands,
        prometheus=prometheus,
        routed=routed,
        preflights=preflight_observations(preflight_jobs, preflight_pods, meta.uid),
        candidates=candidates,
    )
