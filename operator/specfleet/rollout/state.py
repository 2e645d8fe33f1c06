"""`Pass`: one decision in the making, as a frozen value. Every transition takes one and returns the next."""

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Unpack

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import (
    ConditionStatus,
    HistoryEntry,
    Outcome,
    Phase,
    SpeculativeDeploymentStatus,
    StatusChanges,
)
from specfleet.api.vocabulary import Command, ConditionType, command_target
from specfleet.autotune.candidates import spec_for_revision
from specfleet.rollout.types import Event, GpuRequest, Observation, live_canary, set_condition


def served_spec(
    spec: SpeculativeDeploymentSpec, status: SpeculativeDeploymentStatus, revision: str | None
) -> SpeculativeDeploymentSpec:
    """The spec whose serving part renders `revision`: the config a drift rolled back to, the applied
    schedule, an experiment's candidate, or the spec itself."""
    revert = status.drift.revert if status.drift else None
    tuned = status.auto_tune.tuned if status.auto_tune else None
    for override in (revert, tuned):
        if override is not None and revision == override.revision:
            return spec.with_serving(override.serving)
    return spec_for_revision(spec, status.experiment, revision)


UNDOABLE = (Outcome.PROMOTED, Outcome.CREATED)
"""Outcomes of revisions that served as stable: `undo` returns to them, so their entries keep the serving part of
their spec. A canary rolled back or aborted never served; its config is not kept."""
HISTORY_SERVING_BYTES = 256 * 1024
"""JSON bytes of serving snapshots the history keeps. A spec's serving part can be hundreds of KB (64
environment variables of 4 KiB); 50 entries of it made a 12.9 MiB status, which etcd refuses (1.5 MiB)."""


def kept_serving(history: list[HistoryEntry]) -> list[HistoryEntry]:
    """The history with the serving snapshots of its newest entries within HISTORY_SERVING_BYTES: older ones
    lose theirs (undo can no longer go that far back). The newest snapshot is always kept."""
    kept, spent = [], 0
    for entry in reversed(history):
        if entry.serving is not None:
            newest = spent == 0
            spent += len(json.dumps(entry.serving, separators=(",", ":")))
            if not newest and spent > HISTORY_SERVING_BYTES:
                entry = entry.model_copy(update={"serving": None})
        kept.append(entry)
    return kept[::-1]


@dataclass(frozen=True)
class Pass:
    """What one pass of `decide` has decided so far: the next status, events, wake-ups, canary traffic."""

    spec: SpeculativeDeploymentSpec
    obs: Observation
    status: SpeculativeDeploymentStatus
    events: tuple[Event, ...] = ()
    wake: tuple[datetime, ...] = ()
    canary_traffic: bool = False
    analysis_due: bool = False
    watch_due: bool = False
    fleet_look_due: bool = False
    live_before: str | None = None
    """The canary that was live when this pass began: commands can only be for it."""
    measuring: bool = False
    """The live canary is an experiment's candidate: its first step measures it, it never advances."""
    measured: bool = False
    """The measuring candidate's step is over (pause and a passing analysis, or a promote)."""
    preflight_wanted: bool = False
    """The live canary waits for its preflight Job: no canary Deployment until it passes."""
    candidate_analyses_due: tuple[int, ...] = ()
    """Side-by-side candidates whose analysis is due."""
    slices: tuple[int, ...] = ()
    """Side-by-side candidates whose Deployments stay this pass (measuring, or measured and still serving)."""
    capacity_due: GpuRequest | None = None
    """Pods the canary is about to ask for, whose room the shell should check (see `Decision.capacity_due`)."""

    def but(self, **changes: Any) -> "Pass":
        return replace(self, **changes)

    def served_spec(self, revision: str | None) -> SpeculativeDeploymentSpec:
        """The spec whose serving part renders `revision` (see `served_spec`)."""
        return served_spec(self.spec, self.status, revision)

    @property
    def judged(self) -> bool:
        """Whether the live canary must pass analyses to advance: unless both the spec and the canary's start
        said unguarded. Never from whether a Prometheus is configured: a missing one holds the canary."""
        return not (self.spec.rollout.unguarded and self.status.canary_unguarded)

    def with_status(self, *groups: StatusChanges, **changes: Unpack[StatusChanges]) -> "Pass":
        """The same pass with those status fields changed (typed: see `StatusChanges`): the fields of each group
        (`FRESH_EVIDENCE`, `step_anew(now)`) in order, then the keyword arguments."""
        update: dict[str, object] = {}
        for group in (*groups, changes):
            update.update(group)
        return replace(self, status=self.status.model_copy(update=update))

    def with_event(self, reason: str, message: str, warning: bool = False) -> "Pass":
        return replace(self, events=(*self.events, Event("Warning" if warning else "Normal", reason, message)))

    def waking_at(self, when: datetime) -> "Pass":
        return replace(self, wake=(*self.wake, when))

    def with_condition(self, kind: ConditionType, ok: bool | None, reason: str, message: str = "") -> "Pass":
        value = ConditionStatus.UNKNOWN if ok is None else ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        conditions = set_condition(
            self.status.conditions, kind, value, reason, message, self.obs.now, self.obs.generation
        )
        return self.with_status(conditions=conditions)

    def in_phase(self, phase: Phase, progressing: bool, reason: str, message: str) -> "Pass":
        """The phase and the Progressing condition that explains it, always set together."""
        return self.with_status(phase=phase).with_condition(ConditionType.PROGRESSING, progressing, reason, message)

    def pending(self, command: Command) -> str | None:
        """The value of a command annotation not acted on yet."""
        value = self.obs.commands.get(command.annotation)
        if value is None or self.status.acknowledged_commands.get(command.annotation) == value:
            return None
        return value

    def applies(self, command: Command) -> bool:
        """Whether a pending command is for what is live now: the live canary, or the rejected revision."""
        value = self.pending(command)
        if value is None:
            return False
        if command is Command.RETRY:
            current = self.status.rejected_revision
        else:  # a canary started by this very pass did not exist when the command was given
            current = live_canary(self.status)
            current = current if current == self.live_before else None
        return current is not None and command_target(value) in (None, current)

    def acknowledging(self, command: Command) -> "Pass":
        acked = {**self.status.acknowledged_commands, command.annotation: self.obs.commands[command.annotation]}
        return self.with_status(acknowledged_commands=acked)

    def recording(
        self,
        outcome: Outcome,
        revision: str,
        reason: str,
        *,
        of_current_spec: bool = True,
        served: SpeculativeDeploymentSpec | None = None,
    ) -> "Pass":
        """A history entry; an older canary's config is no longer in the spec, so it gets no summary. `served`:
        the spec that renders `revision` when it is not the one `served_spec` finds (a fleet's first)."""
        last = self.status.last_analysis
        measured = last.canary if last and last.revision == revision else None
        spec = served or self.served_spec(revision)
        entry = HistoryEntry(
            revision=revision,
            outcome=outcome,
            time=self.obs.now,
            reason=reason[:1024],
            summary=spec.summary()[:1024] if of_current_spec else "",
            acceptance_alpha=measured.acceptance_alpha if measured else None,
            acceptance_rate=measured.acceptance_rate if measured else None,
            token_latency_p95_seconds=measured.token_latency_p95_seconds if measured else None,
            serving=spec.serving() if of_current_spec and outcome in UNDOABLE else None,
        )
        history = [*self.status.history, entry][-self.spec.rollout.history_limit :]
        return self.with_status(history=kept_serving(history))


@dataclass(frozen=True)
class Decided:
    """What a transition returns when it made the live canary's move for this pass (ended it, paused it, or
    waits): the transitions after it are skipped. A plain `Pass` means the canary goes on to the next one."""

    p: Pass
