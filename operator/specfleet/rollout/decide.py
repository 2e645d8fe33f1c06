"""`decide`: one pass from (spec, status, observation) to the next status and the desired tracks.

Each step below is a pure function from one `Pass` (a frozen value) to the next; `decide` threads it
through them in order and `_finish` turns the last one into a `Decision`.
"""

from datetime import timedelta

from specfleet.api.durations import parse_duration
from specfleet.api.spec import SpeculativeDeploymentSpec, Step
from specfleet.api.status import Outcome, Phase, SpeculativeDeploymentStatus, StatusChanges
from specfleet.api.vocabulary import Command, ConditionType, Track, command_target
from specfleet.autotune.candidates import base_spec
from specfleet.render.manifests import canary_replicas, revision
from specfleet.rollout.canary import PAUSED, progress_canary, start_canary, step_replicas
from specfleet.rollout.columns import with_columns
from specfleet.rollout.experiment import run_experiment, slice_replicas
from specfleet.rollout.health import with_rollout_conditions
from specfleet.rollout.holdback import holdback_target, holdback_weight, keep_holdback
from specfleet.rollout.lifecycle import drain, retire_canary, step_anew
from specfleet.rollout.moves import Budget, TrackPods, budget, move
from specfleet.rollout.state import Decided, Pass
from specfleet.rollout.tuning import look_at_fleet, tuned_revision
from specfleet.rollout.types import NO_PROMETHEUS, NO_PROMETHEUS_REASON, Decision, Observation, TrackTarget, live_canary


def decide(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus, obs: Observation) -> Decision:
    """The next status and the desired tracks. See the package docstring for the transitions."""
    start = status.model_copy(update=StatusChanges(observed_generation=obs.generation))
    p = _guarded_condition(_forget_withdrawn_commands(Pass(spec, obs, start, live_before=live_canary(start))))
    p = p.with_condition(ConditionType.SYNCED, True, "ReconcileSuccess", "the operator decided this status")
    if obs.desired_revision is None:
        return _invalid_spec(_drop_stale_commands(p))
    p = _first_stable(p.with_condition(ConditionType.SPEC_VALID, True, "Rendered", f"revision {obs.desired_revision}"))
    desired = tuned_revision(p)
    p = _pause_or_resume(_retry_if_asked(p, desired))
    if desired == p.status.stable_revision:
        p = _serve_in_place(p)
    elif desired == p.status.rejected_revision:
        p = _hold_rejected(p)
    elif p.spec.paused and p.status.canary_revision != desired:
        p = _hold_change(p, desired)
    elif p.spec.candidates and desired == obs.desired_revision:
        p = run_experiment(p, desired)
    else:
        p = progress_canary(start_canary(p, desired) if p.status.canary_revision != desired else p)
    return _finish(with_rollout_conditions(_drop_stale_commands(keep_holdback(drain(p)))))


def _guarded_condition(p: Pass) -> Pass:
    """Whether canaries are judged, and what a judged one does without a Prometheus (it waits)."""
    if p.spec.rollout.unguarded:
        message = "spec.rollout.unguarded: canary steps advance on their pauses and gates alone, with no analysis"
        if live_canary(p.status) is not None and not p.status.canary_unguarded:
            message += f"; canary {p.status.canary_revision} started judged and stays judged"
        return p.with_condition(ConditionType.GUARDED, False, "Unguarded", message)
    if p.obs.prometheus:
        return p.with_condition(
            ConditionType.GUARDED, True, "PrometheusConfigured", "canaries are judged from Prometheus"
        )
    return p.with_condition(ConditionType.GUARDED, False, NO_PROMETHEUS_REASON, NO_PROMETHEUS)


def _first_stable(p: Pass) -> Pass:
    """The first revision a fleet renders to is its stable one, with no canary."""
    desired = p.obs.desired_revision
    if p.status.stable_revision is not None or desired is None:
        return p
    first = base_spec(p.spec)  # with candidates: the config they are measured against
    if p.spec.candidates:
        desired = revision(first)
    p = p.with_status(stable_revision=desired, stable_serving=first.serving())
    p = p.recording(Outcome.CREATED, desired, "the fleet was created on it", served=first)
    return p.with_event("Created", f"serving revision {desired} ({first.summary()})")


def _pause_or_resume(p: Pass) -> Pass:
    """Note when `spec.paused` froze the rollout; on resume, the step in progress starts over (its pause,
    evidence and progress deadline anew: what it measured before the freeze may no longer hold)."""
    paused_at = p.status.paused_at
    if p.spec.paused:
        return p if paused_at is not None else p.with_status(paused_at=p.obs.now).with_event("Paused", "rollout paused")
    if paused_at is None:
        return p
    p = p.with_status(paused_at=None).with_event("Resumed", f"rollout resumed after {_duration(p.obs.now - paused_at)}")
    if live_canary(p.status) is None or p.status.current_step is None:
        return p
    return p.with_status(step_anew(p.obs.now), unjudged_since=None)


def _duration(elapsed: timedelta) -> str:
    minutes, seconds = divmod(int(elapsed.total_seconds()), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _hold_change(p: Pass, desired: str) -> Pass:
    """A new revision while paused waits: no canary starts (one of another revision holds as it is)."""
    if live_canary(p.status) is not None:
        return progress_canary(p)
    message = f"revision {desired} waits: the rollout is paused (spec.paused); stable {p.status.stable_revision} serves"
    return p.in_phase(Phase.PAUSED, True, PAUSED, message)


def _retry_if_asked(p: Pass, desired: str) -> Pass:
    """A retry for the rejected revision clears it; so does a spec that moved on to another revision."""
    if p.applies(Command.RETRY):
        p = p.acknowledging(Command.RETRY)
        p = p.with_event("Retry", f"revision {p.status.rejected_revision} may be canaried again")
        p = p.with_status(rejected_revision=None)
    if p.status.rejected_revision not in (None, desired):
        p = p.with_status(rejected_revision=None)
    return p


def _forget_withdrawn_commands(p: Pass) -> Pass:
    """Forget acknowledgements of annotations that are gone, so the same command can be given again."""
    acked = p.status.acknowledged_commands
    present = {k: v for k, v in acked.items() if p.obs.commands.get(k) == v}
    return p.with_status(acknowledged_commands=present) if present != acked else p


def _drop_stale_commands(p: Pass) -> Pass:
    """Acknowledge, with an event, every command that can no longer apply, so it never acts on a later canary.

    A promote or abort waits (while its canary starts, say) only if the canary it is for was live before
    this pass and still is; a retry applies at once or never.
    """
    live = live_canary(p.status)
    for command in Command:
        value = p.pending(command)
        if value is None:
            continue
        target = command_target(value)
        if command is not Command.RETRY and live is not None and live == p.live_before and target in (None, live):
            continue
        if command is Command.RETRY:
            why = "no aborted or rolled-back revision to retry"
            if p.status.rejected_revision is not None:
                why = f"given for revision {target}, the rejected one is {p.status.rejected_revision}"
        elif live is None:
            why = "no canary is live"
        elif target not in (None, live):
            why = f"given for canary {target}, but the live canary is {live}"
        else:
            why = f"given before canary {live} started"
        p = p.acknowledging(command)
        p = p.with_event("CommandIgnored", f"{command.value} ({value.split('@')[0]}) ignored: {why}", warning=True)
    return p


def _invalid_spec(p: Pass) -> Decision:
    """The spec cannot be rendered: say why (once), and leave every child as it is."""
    message = "; ".join(p.obs.problems) or "the spec cannot be rendered"
    already_said = any(
        c.type == ConditionType.SPEC_VALID and c.status == "False" and c.message == message for c in p.status.conditions
    )
    p = p.with_condition(ConditionType.SPEC_VALID, False, "InvalidSpec", message).with_status(phase=Phase.DEGRADED)
    p = with_rollout_conditions(p)
    if not already_said:
        p = p.with_event("InvalidSpec", message, warning=True)
    p = _with_replica_counts(p.but(canary_traffic=p.status.canary_weight > 0))
    return Decision(
        status=p.status,
        targets={},
        canary_traffic=p.canary_traffic,
        events=p.events,
        done_commands=tuple(k for k in p.obs.commands if k in p.status.acknowledged_commands),
        hold_children=True,
    )


def _serve_in_place(p: Pass) -> Pass:
    """desired == stable: apply replica and other in-place changes; finish or drop any canary."""
    stable_revision = p.status.stable_revision
    p = p.with_status(stable_serving=p.served_spec(stable_revision).serving())
    canary = p.status.canary_revision
    if canary is not None and canary != stable_revision:
        p = p.recording(Outcome.SUPERSEDED, canary, "the spec went back to the stable revision", of_current_spec=False)
        p = retire_canary(
            p.with_event("CanaryCancelled", f"spec returned to {stable_revision}: canary {canary} removed")
        )
    elif canary == stable_revision:
        stable = p.obs.track(Track.STABLE)
        if stable.revision == stable_revision and stable.settled and stable.ready >= p.spec.main_replicas:
            p = retire_canary(p.with_event("PromotionComplete", f"every stable replica serves {stable_revision}"))
        else:
            deadline = _promotion_deadline(p.but(canary_traffic=True))
            if isinstance(deadline, Decided):
                return deadline.p
            p = deadline
    if p.status.canary_revision is not None:
        return p.in_phase(Phase.PROGRESSING, True, "Promoting", f"stable rolling to {stable_revision}")
    if p.obs.track(Track.STABLE).ready >= p.spec.main_replicas:
        return look_at_fleet(p.in_phase(Phase.HEALTHY, True, "RolloutComplete", f"serving {stable_revision}"))
    reason = p.obs.track(Track.STABLE).unschedulable
    return p.in_phase(
        Phase.PENDING if _never_available(p) else Phase.PROGRESSING,
        True,
        "Unschedulable" if reason else "ReplicasStarting",
        reason or f"{p.obs.track(Track.STABLE).ready}/{p.spec.main_replicas} replicas ready",
    )


def _promotion_deadline(p: Pass) -> Pass | Decided:
    """Promoting longer than the progress deadline: say so (Degraded, `Decided`); the canary keeps serving."""
    started = p.status.step_started_at
    if started is None:
        return p
    deadline = started + parse_duration(p.spec.rollout.progress_deadline)
    if p.obs.now < deadline:
        return p.waking_at(deadline)
    said = any(
        c.type == ConditionType.PROGRESSING and c.reason == "ProgressDeadlineExceeded" for c in p.status.conditions
    )
    detail = (
        p.obs.track(Track.STABLE).unschedulable
        or f"{p.obs.track(Track.STABLE).ready}/{p.spec.main_replicas} stable replicas ready"
    )
    message = f"stable not rolled to {p.status.stable_revision} within {p.spec.rollout.progress_deadline}: {detail}"
    p = p.in_phase(Phase.DEGRADED, False, "ProgressDeadlineExceeded", message)
    return Decided(p if said else p.with_event("PromotionStalled", message, warning=True))


def _never_available(p: Pass) -> bool:
    return not any(c.type == ConditionType.AVAILABLE and c.status == "True" for c in p.status.conditions)


def _hold_rejected(p: Pass) -> Pass:
    rejected = p.status.rejected_revision
    entry = next((h for h in reversed(p.status.history) if h.revision == rejected), None)
    outcome = entry.outcome if entry is not None else Outcome.ABORTED
    if outcome is Outcome.KEPT_STABLE:
        return look_at_fleet(p.in_phase(Phase.HEALTHY, True, "ExperimentKeptStable", entry.reason if entry else ""))
    return p.in_phase(
        Phase.ROLLED_BACK if outcome is Outcome.ROLLED_BACK else Phase.ABORTED,
        False,
        "RevisionRejected",
        f"revision {rejected} was {outcome.value.lower()}; change the spec or run "
        "`kubectl specfleet retry` to canary it again",
    )


def _with_replica_counts(p: Pass) -> Pass:
    """Ready replicas per track, the Service's effective canary share, the Available condition, and the
    columns `kubectl get` shows (the last change of the status in a pass)."""
    obs = p.obs
    has_canary = p.status.canary_revision is not None or p.status.retiring_revision is not None
    stable_ready, canary_ready = obs.track(Track.STABLE).ready, obs.track(Track.CANARY).ready if has_canary else 0
    canary_ready += sum(ready for _, ready in _serving_slices(p))
    holdback_ready = obs.track(Track.HOLDBACK).ready if p.status.holdback is not None else 0
    total_ready = stable_ready + canary_ready + holdback_ready
    weight = round(100 * canary_ready / total_ready) if p.canary_traffic and total_ready else 0
    available = total_ready >= p.spec.replicas and stable_ready > 0
    p = p.with_condition(
        ConditionType.AVAILABLE,
        available,
        "MinimumReplicasAvailable" if available else "ReplicasUnavailable",
        f"{total_ready}/{p.spec.replicas} replicas ready",
    )
    ready = p.status.ready_replicas.model_copy(
        update={"stable": stable_ready, "canary": canary_ready, "holdback": holdback_ready}
    )
    p = p.with_status(replicas=total_ready, ready_replicas=ready, canary_weight=weight)
    return p.but(status=with_columns(p.spec, p.status))


def _route_weight(p: Pass) -> int:
    """The canary's HTTPRoute weight: its step's once the step is Ready, the previous step's meanwhile."""
    status = p.status
    if not p.canary_traffic:
        return 0
    if status.canary_revision is None:
        return 100 if status.retiring_revision is not None else 0  # stable has nothing Ready
    if status.current_step is None or status.canary_revision == status.stable_revision:
        return 0
    if p.spec.rollout.steps[status.current_step].weight is None:  # a shadow step: no user meets the canary
        return 0
    if status.step_ready_at is None and budget(p.spec) is not None:  # pods move one by one: their share
        serving = p.obs.track(Track.CANARY).serving + p.obs.track(Track.STABLE).serving
        return round(100 * p.obs.track(Track.CANARY).serving / serving) if serving else 0
    return _routed_step(p).users


def _routed_step(p: Pass) -> Step:
    """The step the route follows: the current one once it is Ready, the previous one meanwhile."""
    status, steps = p.status, p.spec.rollout.steps
    assert status.current_step is not None
    index = status.current_step if status.step_ready_at is not None else max(0, status.current_step - 1)
    return steps[index]


def _route_mirror(p: Pass) -> int:
    """The percent of stable's requests the HTTPRoute copies to the canary: a shadow step's `mirror`, as
    `_route_weight` follows steps; 0 whenever the canary takes no traffic or serves users."""
    status = p.status
    if not p.canary_traffic or status.canary_revision is None or status.current_step is None:
        return 0
    if status.canary_revision == status.stable_revision:
        return 0
    return _routed_step(p).mirror or 0


def _slice_targets(p: Pass) -> tuple[tuple[int, TrackTarget], ...]:
    """The side-by-side candidates' Deployments this pass keeps (see `rollout.experiment`)."""
    experiment = p.status.experiment
    if experiment is None:
        return ()
    replicas = slice_replicas(p.spec)
    by_index = {c.index: c for c in experiment.candidates}
    return tuple(
        (i, TrackTarget(by_index[i].revision, p.served_spec(by_index[i].revision).serving(), replicas))
        for i in p.slices
    )


def _serving_slices(p: Pass) -> list[tuple[int, int]]:
    """(index, Ready pods at its revision) of each side-by-side slice kept this pass."""
    experiment = p.status.experiment
    if experiment is None or not p.slices:
        return []
    revisions = {c.index: c.revision for c in experiment.candidates}
    seen = p.obs.candidates
    return [(i, seen[i].ready) for i in p.slices if i in seen and seen[i].revision == revisions.get(i)]


def _canary_target(p: Pass) -> tuple[TrackTarget | None, int, int | None]:
    """The canary track's target, the stable replicas beside it, and a retiring canary's replicas (None: as
    they are). With `rollout.maxSurge` set, see `_moved_targets`.

    Stable gives way only to canary pods that are Ready and receive traffic, so serving capacity stays
    at `replicas` once the asked-for pods are Ready, and the fleet asks for at most the step's new pods
    on top of `replicas`.
    """
    spec, status, obs, total = p.spec, p.status, p.obs, p.spec.main_replicas
    limits = budget(spec)
    if limits is not None and not p.slices:
        return _moved_targets(p, limits)
    if p.slices:  # stable gives way to the Ready pods of side-by-side slices, as it does to a canary's
        slice_pods = sum(min(ready, slice_replicas(spec)) for _, ready in _serving_slices(p))
        return None, max(1, total - slice_pods), None
    if status.canary_revision is None or p.preflight_wanted:
        return None, total, None
    config = p.served_spec(status.canary_revision).serving()
    if status.canary_revision == status.stable_revision:  # promoting
        return TrackTarget(status.canary_revision, config, max(obs.track(Track.CANARY).ready, 1)), total, None
    assert status.current_step is not None
    step = spec.rollout.steps[status.current_step]
    wanted = canary_replicas(total, step.share)
    ready = obs.track(Track.CANARY).ready if obs.track(Track.CANARY).revision == status.canary_revision else 0
    serving = min(ready, wanted) if p.canary_traffic and step.users else 0  # a shadow step's pods serve no user
    stable_replicas = max(1, total - serving) if serving and total > 1 else total
    if p.canary_traffic:  # serving canary pods beyond the step's share go once stable covers
        wanted = max(wanted, min(ready, total - obs.track(Track.STABLE).ready))
    return TrackTarget(status.canary_revision, config, wanted), stable_replicas, None


def _moved_targets(p: Pass, limits: Budget) -> tuple[TrackTarget | None, int, int | None]:
    """With `rollout.maxSurge` set: the canary's target, stable's replicas and a retiring canary's replicas,
    each pass one `move` on from what the tracks have now (see `rollout.moves`).

    A step moves pods from stable to the canary's share. A promotion lets stable's Deployment roll to the
    new revision in place first (its own maxSurge / maxUnavailable, with the canary's pods serving beside
    it), then moves the canary's pods back to stable. A retiring canary (rolled back, aborted, superseded
    by the spec going back) gives its pods back to stable the same way, serving until stable alone covers
    the floor of Ready pods (see `lifecycle.drain`).
    """
    status, total = p.status, p.spec.main_replicas
    seen_stable, seen_canary = p.obs.track(Track.STABLE), p.obs.track(Track.CANARY)
    stable = TrackPods(seen_stable.replicas, seen_stable.serving, seen_stable.terminating)
    canary_serving = seen_canary.serving if p.canary_traffic else 0
    canary = TrackPods(seen_canary.replicas, canary_serving, seen_canary.terminating, bool(seen_canary.unschedulable))
    revision = status.canary_revision
    if revision is None or p.preflight_wanted:  # the canary's pods go back to stable (or there are none)
        back = move(total, total, limits, giver=canary, taker=stable)
        return None, back.taker, back.giver if status.retiring_revision is not None else None
    config = p.served_spec(revision).serving()
    if revision == status.stable_revision:  # promoting
        rolled = seen_stable.revision == revision and seen_stable.settled
        if not rolled:  # stable's own rolling update first, the canary serving beside it
            # at most what the budget leaves beside the canary's pods: a Deployment scaled up by hand
            # past it would wait forever for a pod the pool cannot hold
            room = max(0, total + limits.surge - seen_canary.replicas - seen_canary.terminating)
            held = min(seen_stable.replicas, room) if seen_stable.revision is not None else total
            return TrackTarget(revision, config, seen_canary.replicas), held, None
        back = move(total, total, limits, giver=canary, taker=stable)
        return TrackTarget(revision, config, back.giver), back.taker, None
    assert status.current_step is not None
    step = move(total, step_replicas(p), limits, giver=stable, taker=canary)
    return TrackTarget(revision, config, step.taker), step.giver, None


def _finish(p: Pass) -> Decision:
    """Turn the pass into targets: replica split, promotion overlap, wake-up time."""
    status, obs = p.status, p.obs
    assert status.stable_revision is not None and status.stable_serving is not None
    canary_target, stable_replicas, retiring = _canary_target(p)
    keep = canary_target is None and status.retiring_revision is not None
    final = _with_replica_counts(p)
    wake = min(p.wake) - obs.now if p.wake else None
    holdback = holdback_target(p)
    targets = {
        Track.STABLE: TrackTarget(status.stable_revision, status.stable_serving, stable_replicas),
        Track.CANARY: canary_target,
        Track.HOLDBACK: holdback,
    }
    weights = {Track.CANARY: _route_weight(p), Track.HOLDBACK: holdback_weight(p) if holdback is not None else 0}
    return Decision(
        status=final.status,
        targets={track: target for track, target in targets.items() if target is not None},
        canary_traffic=p.canary_traffic and (canary_target is not None or keep or bool(p.slices)),
        events=p.events,
        requeue_after=max(wake, timedelta(0)) if wake is not None else None,
        done_commands=tuple(k for k in obs.commands if k in final.status.acknowledged_commands),
        analysis_due=p.analysis_due,
        watch_due=p.watch_due,
        fleet_look_due=p.fleet_look_due,
        route_weights={track: weight for track, weight in weights.items() if weight},
        canary_mirror=_route_mirror(p),
        keep_canary=keep,
        retiring_replicas=retiring if keep else None,
        capacity_due=p.capacity_due,
        preflight=_preflight_target(p),
        candidates=_slice_targets(p),
        candidate_analyses_due=p.candidate_analyses_due,
        holdback_traffic=holdback is not None and obs.track(Track.STABLE).always_served,
    )


def _preflight_target(p: Pass) -> TrackTarget | None:
    """The preflight Job the live canary waits for (none once it has a verdict: status keeps it)."""
    revision = p.status.canary_revision
    if not p.preflight_wanted or revision is None:
        return None
    return TrackTarget(revision, p.served_spec(revision).serving(), 0)
