"""The rollout state machine: (spec, status, what was observed, now) -> next status and desired tracks.

Pure and total: every transition of a SpeculativeDeployment is decided here, top to bottom, and all
the state it needs is in the status it is given (so a restarted operator continues where it was).
The shell (`specfleet.operator`) observes, calls `decide`, and applies the result.

Transitions:

    no stable yet ---------------------------------------------> stable := desired       (Pending -> Healthy)
    desired == stable, no canary ------------------------------> scale / fix in place   (Healthy | Progressing)
    desired == stable, canary of another revision -------------> drop the canary        (Superseded)
    desired == rejected revision ------------------------------> hold on stable         (Aborted | RolledBack)
    desired != stable, canary of another revision or none -----> start a canary         (Progressing)
    canary live: abort, or not Ready by the progress deadline -> traffic to stable, then remove the canary (Aborted)
    canary live: a failed analysis over the failure limit -----> roll back, or pause if autoRollback is off
    canary live: too long without a verdict -------------------> the onNoData / onProviderError action
    canary Ready: manual gate without promote -----------------> wait                   (Paused)
    canary Ready: pause elapsed and analyses passed, or promote -> next step, or promote after the last
    promoting: stable rolled to the new revision --------------> remove the canary      (Healthy)
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specfleet.api.durations import parse_duration
from specfleet.api.spec import FallbackAction, SpeculativeDeploymentSpec
from specfleet.api.status import (
    Analysis,
    Condition,
    ConditionStatus,
    HistoryEntry,
    Outcome,
    Phase,
    SpeculativeDeploymentStatus,
    Verdict,
)
from specfleet.render.manifests import canary_replicas

COMMAND_PREFIX = "specfleet.io/"


class Command(StrEnum):
    """What a user can ask of a rollout, as annotations `specfleet.io/<command>` (the CLI writes them)."""

    PROMOTE = "promote"
    ABORT = "abort"
    RETRY = "retry"

    @property
    def annotation(self) -> str:
        return COMMAND_PREFIX + self.value


PROMOTE_FULL = "full"
"""`specfleet.io/promote: full` skips the remaining steps."""


class ConditionType(StrEnum):
    AVAILABLE = "Available"
    PROGRESSING = "Progressing"
    SPEC_VALID = "SpecValid"
    GUARDED = "Guarded"


@dataclass(frozen=True)
class TrackObservation:
    """One track's Deployment as the API server reports it (all zero when there is none)."""

    revision: str | None = None
    ready: int = 0
    settled: bool = False
    """The Deployment controller has rolled every replica to the current template."""
    unschedulable: str = ""
    """The scheduler's message for a Pending pod of this track, e.g. `Insufficient amd.com/gpu`."""


@dataclass(frozen=True)
class Observation:
    """Everything the decision needs from outside, gathered by the shell."""

    now: datetime
    generation: int
    desired_revision: str | None
    """The revision the spec renders to; None when it cannot be rendered (see `problems`)."""
    problems: tuple[str, ...] = ()
    stable: TrackObservation = TrackObservation()
    canary: TrackObservation = TrackObservation()
    commands: Mapping[str, str] = field(default_factory=dict)
    """Command annotations present on the object (`specfleet.io/promote` -> value)."""
    analysis: Analysis | None = None
    """A fresh analysis of the live canary (set by the shell when one was due and ran)."""
    guarded: bool = True
    """Whether a Prometheus is configured to judge canaries at all."""


@dataclass(frozen=True)
class TrackTarget:
    """What one track's Deployment should be."""

    revision: str
    serving: dict[str, Any]
    replicas: int


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    status: SpeculativeDeploymentStatus
    stable: TrackTarget | None
    """None leaves the stable Deployment as it is (the spec could not be rendered)."""
    canary: TrackTarget | None
    """None means no canary Deployment: remove it if there is one."""
    canary_traffic: bool
    """Whether the Service (or route) sends traffic to the canary; False comes before removing it."""
    events: tuple[Event, ...] = ()
    requeue_after: timedelta | None = None
    """When to look again even if nothing changes (a pause ends, a deadline or an analysis is due)."""
    done_commands: tuple[str, ...] = ()
    """Command annotations that were acted on and can be removed."""
    analysis_due: bool = False
    """Whether the canary should be measured before the next decision."""
    hold_children: bool = False
    """Leave every child as it is (the spec cannot be rendered, so nothing new is known)."""
    route_weight: int = 0
    """Canary weight for an HTTPRoute (percent): the current step's weight while the canary takes traffic."""


def set_condition(
    conditions: list[Condition],
    kind: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> list[Condition]:
    """Conditions with `kind` set; lastTransitionTime moves only when the status flips."""
    previous = next((c for c in conditions if c.type == kind), None)
    since = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(
        type=kind.value,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return (
        [c for c in conditions if c.type != kind] + [updated]
        if previous is None
        else [updated if c.type == kind else c for c in conditions]
    )


@dataclass
class _Draft:
    """The decision under construction; only `decide` and its helpers touch it."""

    spec: SpeculativeDeploymentSpec
    obs: Observation
    status: SpeculativeDeploymentStatus
    events: list[Event] = field(default_factory=list)
    wake: list[datetime] = field(default_factory=list)
    canary_traffic: bool = False
    analysis_due: bool = False

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(Event("Warning" if warning else "Normal", reason, message))

    def condition(self, kind: ConditionType, ok: bool | None, reason: str, message: str = "") -> None:
        value = ConditionStatus.UNKNOWN if ok is None else ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        self.update(
            conditions=set_condition(
                self.status.conditions, kind, value, reason, message, self.obs.now, self.obs.generation
            )
        )

    def command(self, command: Command) -> str | None:
        """The value of a pending command, once: acknowledging it is part of the new status."""
        value = self.obs.commands.get(command.annotation)
        if value is None or self.status.acknowledged_commands.get(command.annotation) == value:
            return None
        self.update(acknowledged_commands={**self.status.acknowledged_commands, command.annotation: value})
        return value

    def record(self, outcome: Outcome, revision: str, reason: str, *, of_current_spec: bool = True) -> None:
        """A history entry; an older canary's config is no longer in the spec, so it gets no summary."""
        last = self.status.last_analysis
        measured = last.canary if last and last.revision == revision else None
        entry = HistoryEntry(
            revision=revision,
            outcome=outcome,
            time=self.obs.now,
            reason=reason[:1024],
            summary=self.spec.summary()[:1024] if of_current_spec else "",
            acceptance_alpha=measured.acceptance_alpha if measured else None,
            acceptance_rate=measured.acceptance_rate if measured else None,
            token_latency_p95_seconds=measured.token_latency_p95_seconds if measured else None,
            serving=self.spec.serving() if of_current_spec else None,
        )
        limit = self.spec.rollout.history_limit
        self.update(history=[*self.status.history, entry][-limit:])


def decide(spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus, obs: Observation) -> Decision:
    """The next status and the desired tracks. See the module docstring for the transitions."""
    draft = _Draft(spec, obs, status.model_copy(update={"observed_generation": obs.generation}))
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
        return _invalid_spec(draft)
    draft.condition(ConditionType.SPEC_VALID, True, "Rendered", f"revision {desired}")

    if draft.status.stable_revision is None:
        draft.update(stable_revision=desired, stable_serving=spec.serving())
        draft.event("Created", f"serving revision {desired} ({spec.summary()})")
    if draft.command(Command.RETRY) is not None and draft.status.rejected_revision:
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
    return _finish(draft)


def _acknowledge_withdrawn_commands(draft: _Draft) -> None:
    """Forget acknowledgements of annotations that are gone, so the same command can be given again."""
    acked = draft.status.acknowledged_commands
    present = {k: v for k, v in acked.items() if draft.obs.commands.get(k) == v}
    if present != acked:
        draft.update(acknowledged_commands=present)


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
        hold_children=True,
    )


def _serve_in_place(draft: _Draft) -> None:
    """desired == stable: apply replica and other in-place changes; finish or drop any canary."""
    stable_revision = draft.status.stable_revision
    draft.update(stable_serving=draft.spec.serving())
    canary = draft.status.canary_revision
    if canary is not None and canary != stable_revision:
        draft.record(Outcome.SUPERSEDED, canary, "the spec went back to the stable revision", of_current_spec=False)
        draft.event("CanaryCancelled", f"spec returned to {stable_revision}: canary {canary} removed")
        _clear_canary(draft)
    elif canary == stable_revision:
        stable = draft.obs.stable
        if stable.revision == stable_revision and stable.settled and stable.ready >= draft.spec.replicas:
            draft.event("PromotionComplete", f"every stable replica serves {stable_revision}")
            _clear_canary(draft)
        else:
            draft.canary_traffic = True
    available = draft.obs.stable.ready >= draft.spec.replicas
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


def _start_canary(draft: _Draft, desired: str) -> None:
    previous = draft.status.canary_revision
    if previous is not None and previous != draft.status.stable_revision:
        draft.record(Outcome.SUPERSEDED, previous, f"replaced by revision {desired}", of_current_spec=False)
        draft.event("CanarySuperseded", f"canary {previous} replaced by {desired}")
    draft.update(
        canary_revision=desired,
        current_step=0,
        step_started_at=draft.obs.now,
        step_ready_at=None,
        canary_started_at=draft.obs.now,
        failed_analyses=0,
        analyses=0,
        evidence_since=None,
        unjudged_since=None,
        last_analysis=None,
    )
    draft.event(
        "CanaryStarted", f"canary {desired} ({draft.spec.summary()}) next to stable {draft.status.stable_revision}"
    )


def _progress_canary(draft: _Draft) -> None:
    """One look at a live canary: abort, judge, wait, step or promote."""
    spec, obs, status = draft.spec, draft.obs, draft.status
    revision = status.canary_revision
    assert revision is not None and status.current_step is not None
    step = spec.rollout.steps[min(status.current_step, len(spec.rollout.steps) - 1)]
    wanted = canary_replicas(spec.replicas, step.weight)
    ready = obs.canary.revision == revision and obs.canary.ready >= wanted

    if draft.command(Command.ABORT) is not None:
        _abort(draft, Outcome.ABORTED, "aborted by the user")
        return
    if not ready:
        _wait_for_canary(draft, wanted)
        return

    draft.canary_traffic = True
    if status.step_ready_at is None:
        draft.update(step_ready_at=obs.now, evidence_since=obs.now)
    if _judge(draft):
        return
    promote = draft.command(Command.PROMOTE)
    if promote is not None and PROMOTE_FULL in promote:
        _promote(draft, "promoted by the user (full)")
        return
    if promote is None and not _step_complete(draft):
        return
    step_index = draft.status.current_step
    assert step_index is not None
    if step_index >= len(spec.rollout.steps) - 1:
        _promote(draft, "promoted by the user" if promote is not None else "all steps passed")
        return
    next_step = step_index + 1
    draft.update(
        current_step=next_step,
        step_started_at=obs.now,
        step_ready_at=None,
        evidence_since=None,
        phase=Phase.PROGRESSING,
    )
    label = f"step {next_step + 1}/{len(spec.rollout.steps)} ({spec.rollout.steps[next_step].weight}%)"
    draft.event("StepAdvanced", f"canary {revision} to {label}")
    draft.condition(ConditionType.PROGRESSING, True, "CanaryStep", label)


def _wait_for_canary(draft: _Draft, wanted: int) -> None:
    """The step's canary replicas are not all Ready: wait, within the progress deadline.

    A canary that was Ready and lost pods (a crash loop) waits again with a fresh deadline, so it can
    neither hang the rollout forever nor be promoted on stale readiness.
    """
    spec, obs, status = draft.spec, draft.obs, draft.status
    if status.step_ready_at is not None:
        draft.update(step_ready_at=None, evidence_since=None, step_started_at=obs.now)
    started = draft.status.step_started_at or obs.now
    deadline = started + parse_duration(spec.rollout.progress_deadline)
    if obs.now >= deadline:
        detail = f": {obs.canary.unschedulable}" if obs.canary.unschedulable else ""
        _abort(
            draft,
            Outcome.ABORTED,
            f"ProgressDeadlineExceeded: canary not Ready within {spec.rollout.progress_deadline}{detail}",
        )
        return
    draft.update(phase=Phase.PROGRESSING)
    waiting = obs.canary.unschedulable or f"{obs.canary.ready}/{wanted} canary replicas ready"
    draft.condition(ConditionType.PROGRESSING, True, "CanaryStarting", waiting)
    draft.wake.append(deadline)


def _step_complete(draft: _Draft) -> bool:
    """Whether the current step's pause is over and its analyses passed; sets phase and wake-ups if not."""
    spec, status, now = draft.spec, draft.status, draft.obs.now
    step = spec.rollout.steps[status.current_step]
    label = f"step {status.current_step + 1}/{len(spec.rollout.steps)} ({step.weight}%)"
    if step.pause is not None and step.pause.duration is None:
        draft.update(phase=Phase.PAUSED)
        draft.condition(ConditionType.PROGRESSING, True, "ManualGate", f"{label}: waiting for promote")
        return False
    pause = parse_duration(step.pause.duration) if step.pause and step.pause.duration else timedelta(0)
    assert status.step_ready_at is not None
    ends = status.step_ready_at + pause
    passed = _analysis_passed_this_step(draft)
    if now < ends or not passed:
        draft.update(phase=Phase.PROGRESSING)
        waiting = "pause" if now < ends else "a passing analysis"
        draft.condition(ConditionType.PROGRESSING, True, "CanaryStep", f"{label}: waiting for {waiting}")
        if now < ends:
            draft.wake.append(ends)
        return False
    return True


def _analysis_passed_this_step(draft: _Draft) -> bool:
    """Unguarded canaries advance on pauses alone; guarded ones need a Pass since the step's weight took effect."""
    if not draft.obs.guarded:
        return True
    last = draft.status.last_analysis
    started = draft.status.step_ready_at
    return (
        last is not None
        and last.revision == draft.status.canary_revision
        and last.verdict is Verdict.PASS
        and started is not None
        and last.time >= started
    )


def _judge(draft: _Draft) -> bool:
    """Take in a fresh analysis, act on a failure; True when the rollout was ended or paused by it."""
    spec, obs = draft.spec, draft.obs
    if not obs.guarded:
        return False
    if _paused_after_failure(draft):
        return True
    interval = parse_duration(spec.rollout.analysis.interval)
    analysis = obs.analysis
    if analysis is None or analysis.revision != draft.status.canary_revision:
        last = draft.status.last_analysis
        if last is not None and last.revision == draft.status.canary_revision:
            due = last.time + interval
        else:  # the first look waits for one interval of evidence
            due = (draft.status.evidence_since or obs.now) + interval
        draft.analysis_due = obs.now >= due
        draft.wake.append(max(due, obs.now))
        return False
    draft.update(last_analysis=analysis)
    if analysis.verdict is not Verdict.ERROR:
        draft.update(analyses=draft.status.analyses + 1)
    draft.wake.append(obs.now + interval)
    if analysis.verdict is Verdict.PASS:
        draft.update(unjudged_since=None)
        return False
    if analysis.verdict is Verdict.FAIL:
        failures = draft.status.failed_analyses + 1
        # the next failure must stand on evidence gathered after this one, so failures are independent
        draft.update(failed_analyses=failures, unjudged_since=None, evidence_since=obs.now)
        reasons = "; ".join(analysis.reasons)
        draft.event("AnalysisFailed", f"canary {analysis.revision}: {reasons}", warning=True)
        if failures > spec.rollout.analysis.failure_limit:
            return _fail_canary(draft, FallbackAction.ROLLBACK, f"guardrail failed: {reasons}")
        return False
    since = draft.status.unjudged_since or obs.now
    draft.update(unjudged_since=since)
    fallback = (
        spec.rollout.analysis.on_no_data
        if analysis.verdict is Verdict.INCONCLUSIVE
        else spec.rollout.analysis.on_provider_error
    )
    limit = since + parse_duration(fallback.after)
    if obs.now >= limit:
        what = "no conclusive data" if analysis.verdict is Verdict.INCONCLUSIVE else "Prometheus errors"
        return _fail_canary(draft, fallback.action, f"{what} for {fallback.after}: {'; '.join(analysis.reasons)}")
    draft.wake.append(limit)
    return False


def _paused_after_failure(draft: _Draft) -> bool:
    """A canary paused by a failure (autoRollback off) waits for a human: a promote lifts the pause."""
    paused = any(
        c.type == ConditionType.PROGRESSING and c.reason == "AnalysisFailedPaused" for c in draft.status.conditions
    )
    if not paused:
        return False
    promote = draft.obs.commands.get(Command.PROMOTE.annotation)
    return promote is None or draft.status.acknowledged_commands.get(Command.PROMOTE.annotation) == promote


def _fail_canary(draft: _Draft, action: FallbackAction, reason: str) -> bool:
    if action is FallbackAction.ROLLBACK and draft.spec.rollout.auto_rollback:
        _abort(draft, Outcome.ROLLED_BACK, reason)
        return True
    draft.update(phase=Phase.PAUSED)
    draft.condition(
        ConditionType.PROGRESSING, True, "AnalysisFailedPaused", f"{reason}; promote or abort with kubectl specfleet"
    )
    draft.event("Paused", reason, warning=True)
    return True


def _abort(draft: _Draft, outcome: Outcome, reason: str) -> None:
    """Traffic back to stable first (the shell applies the Service before deleting), then no canary."""
    revision = draft.status.canary_revision
    assert revision is not None
    draft.record(outcome, revision, reason)
    draft.event(
        "RolledBack" if outcome is Outcome.ROLLED_BACK else "Aborted", f"canary {revision}: {reason}", warning=True
    )
    _clear_canary(draft)
    draft.canary_traffic = False
    draft.update(
        rejected_revision=revision, phase=Phase.ROLLED_BACK if outcome is Outcome.ROLLED_BACK else Phase.ABORTED
    )
    draft.condition(ConditionType.PROGRESSING, False, outcome.value, reason)


def _promote(draft: _Draft, reason: str) -> None:
    """The stable Deployment takes the canary's revision; the canary stays until stable has rolled."""
    revision = draft.status.canary_revision
    assert revision is not None
    draft.record(Outcome.PROMOTED, revision, reason)
    draft.event("Promoted", f"canary {revision} promoted: {reason}")
    draft.update(
        stable_revision=revision,
        stable_serving=draft.spec.serving(),
        current_step=None,
        step_started_at=None,
        step_ready_at=None,
        evidence_since=None,
        phase=Phase.PROGRESSING,
    )
    draft.canary_traffic = True
    draft.condition(ConditionType.PROGRESSING, True, "Promoting", f"stable rolling to {revision}")


def _clear_canary(draft: _Draft) -> None:
    draft.update(
        canary_revision=None,
        current_step=None,
        step_started_at=None,
        step_ready_at=None,
        canary_started_at=None,
        failed_analyses=0,
        analyses=0,
        evidence_since=None,
        unjudged_since=None,
    )


def _with_replica_counts(draft: _Draft) -> SpeculativeDeploymentStatus:
    obs = draft.obs
    stable_ready, canary_ready = obs.stable.ready, obs.canary.ready if draft.status.canary_revision else 0
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


def _finish(draft: _Draft) -> Decision:
    """Turn the draft into targets: replica split, promotion overlap, wake-up time."""
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
            wanted = canary_replicas(total, spec.rollout.steps[status.current_step].weight)
            if obs.canary.ready >= wanted and total > 1:
                stable_replicas = max(1, total - wanted)  # canary Ready first, then stable gives way
        canary_target = TrackTarget(status.canary_revision, spec.serving(), wanted)
    stable_target = TrackTarget(status.stable_revision, status.stable_serving, stable_replicas)
    final = _with_replica_counts(draft)
    wake = min(draft.wake) - obs.now if draft.wake else None
    live_step = status.current_step is not None and status.canary_revision != status.stable_revision
    route_weight = spec.rollout.steps[status.current_step].weight if live_step and draft.canary_traffic else 0
    return Decision(
        status=final,
        stable=stable_target,
        canary=canary_target,
        canary_traffic=draft.canary_traffic and canary_target is not None,
        events=tuple(draft.events),
        requeue_after=max(wake, timedelta(0)) if wake is not None else None,
        done_commands=tuple(k for k in obs.commands if k in final.acknowledged_commands),
        analysis_due=draft.analysis_due,
        route_weight=route_weight,
    )
