"""`decide`: one pass from (spec, status, observation) to the next status and the desired tracks."""

from datetime import timedelta

from specfleet.api.durations import parse_duration
from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import (
    Outcome,
    Phase,
    SpeculativeDeploymentStatus,
)
from specfleet.render.manifests import canary_replicas
from specfleet.rollout.canary import _progress_canary, _start_canary
from specfleet.rollout.draft import _Draft
from specfleet.rollout.lifecycle import _drain, _retire_canary
from specfleet.rollout.vocabulary import (
    Command,
    ConditionType,
    Decision,
    Observation,
    TrackTarget,
    command_target,
    live_canary,
)


def decide(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus, obs: Observation) -> Decision:
    """The next status and the desired tracks. See the module docstring for the transitions."""
    draft = _Draft(spec, obs, status.model_copy(update={"observed_generation": obs.generation}))
    live_before = draft.live_before = live_canary(draft.status)
    _acknowledge_withdrawn_commands(draft)
    draft.condition(
        ConditionType.GUARDED,
        obs.guarded,
        "PrometheusConfigured" if obs.guarded else "NoPrometheus",
        "canaries are judged from Prometheus"
        if obs.guarded
        else "no Prometheus is configured: canary steps advance on their pauses alone, unguarded",
    )
    desired = obs.desired_revision
    if desired is None:
        _drop_stale_commands(draft, live_before)
        return _invalid_spec(draft)
    draft.condition(ConditionType.SPEC_VALID, True, "Rendered", f"revision {desired}")

    if draft.status.stable_revision is None:
        draft.update(stable_revision=desired, stable_serving=spec.serving())
        draft.event("Created", f"serving revision {desired} ({spec.summary()})")
    if draft.command(Command.RETRY) is not None:
        draft.event("Retry", f"revision {draft.status.rejected_revision} may be canaried again")
        draft.update(rejected_revision=None)
    if draft.status.rejected_revision not in (None, desired):
        draft.update(rejected_revision=None)

    if desired == draft.status.stable_revision:
        _serve_in_place(draft)
    elif desired == draft.status.rejected_revision:
        _hold_rejected(draft)
    else:
        if draft.status.canary_revision != desired:
            _start_canary(draft, desired)
        _progress_canary(draft)
    _drain(draft)
    _drop_stale_commands(draft, live_before)
    return _finish(draft)


def _acknowledge_withdrawn_commands(draft: _Draft) -> None:
    """Forget acknowledgements of annotations that are gone, so the same command can be given again."""
    acked = draft.status.acknowledged_commands
    present = {k: v for k, v in acked.items() if draft.obs.commands.get(k) == v}
    if present != acked:
        draft.update(acknowledged_commands=present)


def _drop_stale_commands(draft: _Draft, live_before: str | None) -> None:
    """Acknowledge, with an event, every command that can no longer apply, so it never acts on a later canary.

    A promote or abort waits (while its canary starts, say) only if the canary it is for was live before
    this decision and still is; a retry applies at once or never.
    """
    live = live_canary(draft.status)
    for command in Command:
        value = draft.pending(command)
        if value is None:
            continue
        target = command_target(value)
        if command is not Command.RETRY and live is not None and live == live_before and target in (None, live):
            continue
        if command is Command.RETRY:
            why = "no aborted or rolled-back revision to retry"
            if draft.status.rejected_revision is not None:
                why = f"given for revision {target}, the rejected one is {draft.status.rejected_revision}"
        elif live is None:
            why = "no canary is live"
        elif target not in (None, live):
            why = f"given for canary {target}, but the live canary is {live}"
        else:
            why = f"given before canary {live} started"
        draft.acknowledge(command)
        draft.event("CommandIgnored", f"{command.value} ({value.split('@')[0]}) ignored: {why}", warning=True)


def _invalid_spec(draft: _Draft) -> Decision:
    message = "; ".join(draft.obs.problems) or "the spec cannot be rendered"
    already_said = any(
        c.type == ConditionType.SPEC_VALID and c.status == "False" and c.message == message
        for c in draft.status.conditions
    )
    draft.condition(ConditionType.SPEC_VALID, False, "InvalidSpec", message)
    draft.update(phase=Phase.DEGRADED)
    if not already_said:
        draft.event("InvalidSpec", message, warning=True)
    draft.canary_traffic = draft.status.canary_weight > 0
    return Decision(
        status=_with_replica_counts(draft),
        stable=None,
        canary=None,
        canary_traffic=draft.canary_traffic,
        events=tuple(draft.events),
        done_commands=tuple(k for k in draft.obs.commands if k in draft.status.acknowledged_commands),
        hold_children=True,
    )


def _serve_in_place(draft: _Draft) -> None:
    """desired == stable: apply replica and other in-place changes; finish or drop any canary."""
    stable_revision = draft.status.stable_revision
    draft.update(stable_serving=draft.spec.serving())
    canary = draft.status.canary_revision
    stalled = False
    if canary is not None and canary != stable_revision:
        draft.record(Outcome.SUPERSEDED, canary, "the spec went back to the stable revision", of_current_spec=False)
        draft.event("CanaryCancelled", f"spec returned to {stable_revision}: canary {canary} removed")
        _retire_canary(draft)
    elif canary == stable_revision:
        stable = draft.obs.stable
        if stable.revision == stable_revision and stable.settled and stable.ready >= draft.spec.replicas:
            draft.event("PromotionComplete", f"every stable replica serves {stable_revision}")
            _retire_canary(draft)
        else:
            draft.canary_traffic = True
            stalled = _promotion_stalled(draft)
    available = draft.obs.stable.ready >= draft.spec.replicas
    if stalled:
        return
    if draft.status.canary_revision is not None:
        draft.update(phase=Phase.PROGRESSING)
        draft.condition(ConditionType.PROGRESSING, True, "Promoting", f"stable rolling to {stable_revision}")
    elif available:
        draft.update(phase=Phase.HEALTHY)
        draft.condition(ConditionType.PROGRESSING, True, "RolloutComplete", f"serving {stable_revision}")
    else:
        draft.update(phase=Phase.PENDING if _never_available(draft) else Phase.PROGRESSING)
        reason = draft.obs.stable.unschedulable
        draft.condition(
            ConditionType.PROGRESSING,
            True,
            "Unschedulable" if reason else "ReplicasStarting",
            reason or f"{draft.obs.stable.ready}/{draft.spec.replicas} replicas ready",
        )


def _promotion_stalled(draft: _Draft) -> bool:
    """Promoting longer than the progress deadline: say so (Degraded); the canary keeps serving meanwhile."""
    started = draft.status.step_started_at
    if started is None:
        return False
    deadline = started + parse_duration(draft.spec.rollout.progress_deadline)
    if draft.obs.now < deadline:
        draft.wake.append(deadline)
        return False
    said = any(
        c.type == ConditionType.PROGRESSING and c.reason == "ProgressDeadlineExceeded" for c in draft.status.conditions
    )
    detail = draft.obs.stable.unschedulable or f"{draft.obs.stable.ready}/{draft.spec.replicas} stable replicas ready"
    message = (
        f"stable not rolled to {draft.status.stable_revision} within {draft.spec.rollout.progress_deadline}: {detail}"
    )
    draft.update(phase=Phase.DEGRADED)
    draft.condition(ConditionType.PROGRESSING, False, "ProgressDeadlineExceeded", message)
    if not said:
        draft.event("PromotionStalled", message, warning=True)
    return True


def _never_available(draft: _Draft) -> bool:
    return not any(c.type == ConditionType.AVAILABLE and c.status == "True" for c in draft.status.conditions)


def _hold_rejected(draft: _Draft) -> None:
    rejected = draft.status.rejected_revision
    outcome = next((h.outcome for h in reversed(draft.status.history) if h.revision == rejected), Outcome.ABORTED)
    draft.update(phase=Phase.ROLLED_BACK if outcome is Outcome.ROLLED_BACK else Phase.ABORTED)
    draft.condition(
        ConditionType.PROGRESSING,
        False,
        "RevisionRejected",
        f"revision {rejected} was {outcome.value.lower()}; change the spec or run "
        "`kubectl specfleet retry` to canary it again",
    )


def _with_replica_counts(draft: _Draft) -> SpeculativeDeploymentStatus:
    obs = draft.obs
    has_canary = draft.status.canary_revision is not None or draft.status.retiring_revision is not None
    stable_ready, canary_ready = obs.stable.ready, obs.canary.ready if has_canary else 0
    total_ready = stable_ready + canary_ready
    weight = round(100 * canary_ready / total_ready) if draft.canary_traffic and total_ready else 0
    available = stable_ready + canary_ready >= draft.spec.replicas and stable_ready > 0
    draft.condition(
        ConditionType.AVAILABLE,
        available,
        "MinimumReplicasAvailable" if available else "ReplicasUnavailable",
        f"{total_ready}/{draft.spec.replicas} replicas ready",
    )
    return draft.status.model_copy(
        update={
            "replicas": total_ready,
            "ready_replicas": draft.status.ready_replicas.model_copy(
                update={"stable": stable_ready, "canary": canary_ready}
            ),
            "canary_weight": weight,
        }
    )


def _route_weight(draft: _Draft) -> int:
    """The canary's HTTPRoute weight: its step's once the step is Ready, the previous step's meanwhile."""
    status, steps = draft.status, draft.spec.rollout.steps
    if not draft.canary_traffic:
        return 0
    if status.canary_revision is None:
        return 100 if status.retiring_revision is not None else 0  # stable has nothing Ready
    if status.current_step is None or status.canary_revision == status.stable_revision:
        return 0
    index = status.current_step if status.step_ready_at is not None else max(0, status.current_step - 1)
    return steps[index].weight


def _finish(draft: _Draft) -> Decision:
    """Turn the draft into targets: replica split, promotion overlap, wake-up time.

    Stable gives way only to canary pods that are Ready and receive traffic, so serving capacity stays
    at `replicas` once the asked-for pods are Ready, and the fleet asks for at most the step's new pods
    on top of `replicas`.
    """
    spec, status, obs = draft.spec, draft.status, draft.obs
    assert status.stable_revision is not None and status.stable_serving is not None
    total = spec.replicas
    canary_target = None
    stable_replicas = total
    if status.canary_revision is not None:
        promoting = status.canary_revision == status.stable_revision
        if promoting:
            wanted = max(obs.canary.ready, 1)
        else:
            assert status.current_step is not None
            wanted = canary_replicas(total, spec.rollout.steps[status.current_step].weight)
            ready = obs.canary.ready if obs.canary.revision == status.canary_revision else 0
            serving = min(ready, wanted) if draft.canary_traffic else 0
            if serving and total > 1:
                stable_replicas = max(1, total - serving)  # canary Ready and serving first, then stable gives way
            if draft.canary_traffic:  # and serving canary pods beyond the step's share go once stable covers
                wanted = max(wanted, min(ready, total - obs.stable.ready))
        canary_target = TrackTarget(status.canary_revision, spec.serving(), wanted)
    stable_target = TrackTarget(status.stable_revision, status.stable_serving, stable_replicas)
    keep = canary_target is None and status.retiring_revision is not None
    final = _with_replica_counts(draft)
    wake = min(draft.wake) - obs.now if draft.wake else None
    return Decision(
        status=final,
        stable=stable_target,
        canary=canary_target,
        canary_traffic=draft.canary_traffic and (canary_target is not None or keep),
        events=tuple(draft.events),
        requeue_after=max(wake, timedelta(0)) if wake is not None else None,
        done_commands=tuple(k for k in obs.commands if k in final.acknowledged_commands),
        analysis_due=draft.analysis_due,
        route_weight=_route_weight(draft),
        keep_canary=keep,
    )
