"""The decision under construction, and the history and condition bookkeeping it does."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import (
    ConditionStatus,
    HistoryEntry,
    Outcome,
    SpeculativeDeploymentStatus,
)
from specfleet.rollout.vocabulary import (
    Command,
    ConditionType,
    Event,
    Observation,
    command_target,
    live_canary,
    set_condition,
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
    live_before: str | None = None
    """The canary that was live when this decision began: commands can only be for it."""

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
        else:  # a canary started by this very decision did not exist when the command was given
            current = live_canary(self.status)
            current = current if current == self.live_before else None
        return current is not None and command_target(value) in (None, current)

    def acknowledge(self, command: Command) -> str:
        value = self.obs.commands[command.annotation]
        self.update(acknowledged_commands={**self.status.acknowledged_commands, command.annotation: value})
        return value

    def command(self, command: Command) -> str | None:
        """The value of a pending command for what is live, once: acknowledging it is part of the new status."""
        return self.acknowledge(command) if self.applies(command) else None

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
