"""`decide` plus a model of the cluster, driven through random sequences by hypothesis.

The machine edits the spec (speculative config, replicas, steps, pauses), gives commands at any time
(bound to the live canary, to another revision, or to nothing), makes pods Ready, flaps them, breaks
stable, feeds verdicts of every kind with evidence that does or does not lie within the step, jumps
the clock and restarts the operator (status round-tripped through JSON, the last command removals
lost). After every decision it checks what a rollout must never do: canary a rejected revision again, record
a canary twice or never, advance a step or promote without a Pass on that step's own evidence (or a command
given for that very canary), or ask for more pods than `replicas` plus the canary's.
"""

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import Analysis, Outcome, SpeculativeDeploymentStatus, Verdict
from specfleet.api.vocabulary import Command
from specfleet.api.vocabulary import Track as TrackName
from specfleet.render.manifests import canary_replicas, revision
from specfleet.rollout import Decision, Observation, TrackObservation, decide, live_canary

from bad_specs import BASE, merged

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)
INTERVAL = timedelta(minutes=1)
STEP_SETS = [
    [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "2m"}}],
    [{"weight": 50}],
    [{"weight": 10}, {"weight": 50, "pause": {}}, {"weight": 100}],
    [{"weight": 34, "pause": {}}],
]
ENDED = {"RolledBack", "Aborted", "Paused", "CanaryCancelled", "CanarySuperseded", "CanaryStarted"}
"""Decisions allowed to take traffic off a canary before stable is back at full size: the canary is
being rejected, paused after a failure or replaced (see README, Operating notes)."""


@dataclass(frozen=True)
class Track:
    """One Deployment: `ready` pods at its template's revision, `old` Ready pods of the previous template
    that a rolling update (maxUnavailable 0) keeps serving until the new ones are Ready."""

    revision: str | None = None
    asked: int = 0
    ready: int = 0
    old: int = 0

    def to(self, revision_: str, asked: int) -> "Track":
        if revision_ != self.revision:
            return Track(revision_, asked, 0, min(self.ready + self.old, asked))
        return Track(revision_, asked, min(self.ready, asked), min(self.old, max(0, asked - self.ready)))


class RolloutMachine(RuleBasedStateMachine):
    @initialize(guarded=st.booleans(), replicas=st.integers(1, 4), steps=st.sampled_from(STEP_SETS))
    def start(self, guarded: bool, replicas: int, steps: list[dict[str, Any]]) -> None:
        self.guarded, self.now, self.generation = guarded, T0, 1
        self.k, self.replicas, self.steps = 4, replicas, steps
        self.spec = self._spec()
        self.status = SpeculativeDeploymentStatus()
        self.stable, self.canary = Track(), Track()
        self.stable_broken = False
        self.commands: dict[str, str] = {}
        self.given_for: dict[tuple[str, str], str | None] = {}
        self.removed: tuple[str, ...] = ()
        self.removed_values: dict[str, str] = {}
        self.passes: list[tuple[str, int, datetime | None, datetime]] = []
        """Qualifying Passes fed: (revision, step, when the step started, time)."""
        self.first_ready: dict[tuple[str | None, int | None, datetime | None], datetime] = {}
        """When each step (revision, index, start) first had all its canary pods Ready: its evidence may start there
        and go on while pods are replaced."""
        self.rejected: set[str] = set()
        self.open: set[str] = set()
        self.counter = 0
        self.last: Decision | None = None
        self._decide()

    # the world

    def _spec(self) -> SpeculativeDeploymentSpec:
        patch = {
            "replicas": self.replicas,
            "speculative": {"numSpeculativeTokens": self.k},
            "rollout": {
                "steps": self.steps,
                "historyLimit": 50,
                "progressDeadline": "10m",
                "unguarded": not self.guarded,
            },
        }
        return SpeculativeDeploymentSpec.model_validate(merged(BASE, {"spec": patch})["spec"])

    def _observe(self, analysis: Analysis | None) -> Observation:
        stable_ready = 0 if self.stable_broken else self.stable.ready
        return Observation(
            now=self.now,
            generation=self.generation,
            desired_revision=revision(self.spec),
            tracks={
                TrackName.STABLE: TrackObservation(
                    self.stable.revision, stable_ready, settled=self.stable.ready == self.stable.asked
                ),
                TrackName.CANARY: TrackObservation(self.canary.revision, self.canary.ready, settled=True),
            },
            commands=dict(self.commands),
            analysis=analysis,
            prometheus=self.guarded,
        )

    def _serving(self, canary_traffic: bool) -> int:
        stable = 0 if self.stable_broken else self.stable.ready + self.stable.old
        return stable + (self.canary.ready + self.canary.old if canary_traffic else 0)

    def _decide(self, analysis: Analysis | None = None) -> Decision:
        before = self.status
        serving_before = self._serving(self.last is not None and self.last.canary_traffic)
        decision = decide(self.spec, before, self._observe(analysis))
        self._check_transition(before, decision)
        self.status, self.last = decision.status, decision
        if decision.status.step_ready_at is not None:
            self.first_ready.setdefault(self._step(decision.status), decision.status.step_ready_at)
        self.removed = decision.done_commands
        self.removed_values = {k: self.commands[k] for k in decision.done_commands if k in self.commands}
        for key in decision.done_commands:
            self.commands.pop(key, None)
        self._apply(decision)
        if not ENDED & {e.reason for e in decision.events}:  # make before break: never drop below replicas
            serving = self._serving(decision.canary_traffic)
            assert serving >= min(self.replicas, serving_before), (serving_before, serving, decision)
        return decision

    def _apply(self, decision: Decision) -> None:
        """Scale-downs are instant; scale-ups and new templates wait for `pods_ready`."""
        if decision.target(TrackName.STABLE) is not None:
            self.stable = self.stable.to(
                decision.target(TrackName.STABLE).revision, decision.target(TrackName.STABLE).replicas
            )
        if decision.target(TrackName.CANARY) is not None:
            self.canary = self.canary.to(
                decision.target(TrackName.CANARY).revision, decision.target(TrackName.CANARY).replicas
            )
        elif not decision.keep_canary and not decision.hold_children:
            self.canary = Track()

    # rules

    @rule(k=st.integers(2, 5), operator_up=st.booleans())
    def edit_speculative(self, k: int, operator_up: bool) -> None:
        self.k, self.generation = k, self.generation + 1
        self.spec = self._spec()
        if operator_up:  # else the next rule's decision sees this edit together with what came meanwhile
            self._decide()

    @rule(replicas=st.integers(1, 4))
    def edit_replicas(self, replicas: int) -> None:
        self.replicas, self.generation = replicas, self.generation + 1
        self.spec = self._spec()
        self._decide()

    @rule(steps=st.sampled_from(STEP_SETS))
    def edit_steps(self, steps: list[dict[str, Any]]) -> None:
        self.steps, self.generation = steps, self.generation + 1
        self.spec = self._spec()
        self._decide()

    @rule(
        command=st.sampled_from(list(Command)),
        bound=st.sampled_from(["none", "live", "other"]),
        operator_up=st.booleans(),
    )
    def give_command(self, command: Command, bound: str, operator_up: bool) -> None:
        self.counter += 1
        live = self.status.rejected_revision if command is Command.RETRY else live_canary(self.status)
        target = {"none": None, "live": live, "other": "0000000000"}[bound]
        value = f"v{self.counter}" + (f" revision={target}" if target else "") + f"@{self.counter}"
        self.commands[command.annotation] = value
        self.given_for[command.annotation, value] = target or live
        if operator_up:
            self._decide()

    @rule()
    def pods_ready(self) -> None:
        """Every asked-for pod becomes Ready; with that world, capacity must hold."""
        self.stable = replace(self.stable, ready=self.stable.asked, old=0)
        self.canary = replace(self.canary, ready=self.canary.asked, old=0)
        self.stable_broken = False
        decision = self._decide()
        if ENDED & {e.reason for e in decision.events}:
            return
        serving = self._serving(decision.canary_traffic)
        assert serving >= self.replicas, (serving, decision)

    @rule(ready=st.integers(0, 3))
    def canary_flaps(self, ready: int) -> None:
        self.canary = replace(self.canary, ready=min(ready, self.canary.asked), old=0)
        self._decide()

    @rule()
    def stable_breaks(self) -> None:
        self.stable_broken = True
        self._decide()

    @rule(
        verdict=st.sampled_from(list(Verdict)),
        evidence=st.sampled_from([0, 30, 60, 300, 3600]),
    )
    def analysis_arrives(self, verdict: Verdict, evidence: int) -> None:
        canary = self.status.canary_revision
        if canary is None:
            return
        analysis = Analysis(
            time=self.now,
            revision=canary,
            step=self.status.current_step or 0,
            verdict=verdict,
            evidence_seconds=evidence,
        )
        ready_at = self.first_ready.get(self._step(self.status))
        start = self.now - timedelta(seconds=evidence)
        if verdict is Verdict.PASS and ready_at is not None and start >= ready_at and evidence >= 60:
            self.passes.append((canary, self.status.current_step or 0, self.status.step_started_at, self.now))
        self._decide(analysis)

    @rule(seconds=st.sampled_from([1, 10, 59, 60, 120, 601, 3600]))
    def clock_jumps(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self._decide()

    @rule()
    def operator_restarts(self) -> None:
        """Status through JSON, as the API server stores it; the last annotation removals were lost."""
        raw = json.loads(self.status.model_dump_json(by_alias=True, exclude_none=True))
        self.status = SpeculativeDeploymentStatus.model_validate(raw)
        self.commands.update(self.removed_values)
        self._decide()

    # invariants

    def _check_transition(self, before: SpeculativeDeploymentStatus, decision: Decision) -> None:
        after = decision.status
        ignored = {e.message.split(" ", 1)[0] for e in decision.events if e.reason == "CommandIgnored"}
        acked = {c for c in decision.done_commands if c.removeprefix("specfleet.io/") not in ignored}  # acted on
        new = after.history[len(before.history) :] if len(before.history) < 50 else []
        for event in decision.events:
            if event.reason == "CanaryStarted":
                started = after.canary_revision
                assert started is not None
                assert started not in self.rejected, f"rejected revision {started} canaried again"
                self.open.add(started)
            if event.reason == "Created":  # the first revision is recorded as Created, once
                assert after.stable_revision is not None
                self.open.add(after.stable_revision)
            if event.reason == "Retry":
                self.rejected.clear()
        for entry in new:
            assert entry.revision in self.open, f"{entry.revision} recorded twice or never started"
            self.open.discard(entry.revision)
            if entry.outcome in (Outcome.ROLLED_BACK, Outcome.ABORTED):
                self.rejected.add(entry.revision)
            if entry.reason == "aborted by the user":
                self._given_for(Command.ABORT, entry.revision, acked)
            if entry.outcome is Outcome.PROMOTED:
                self._legitimate(before, entry.revision, entry.reason, acked)
        step_before, step_after = before.current_step, after.current_step
        same_canary = before.canary_revision == after.canary_revision and live_canary(before) is not None
        if same_canary and step_before is not None and step_after == step_before + 1:
            if Command.PROMOTE.annotation in acked:
                self._given_for(Command.PROMOTE, before.canary_revision, acked)  # type: ignore[arg-type]
            elif self.guarded:
                assert self._passed(before), "a step advanced without a Pass on its own evidence"
        desired = revision(self.spec)
        self.rejected = {r for r in self.rejected if r == desired}  # a spec change forgets the rejection
        # every canary that is no longer live was recorded (open ones are the live one at most)
        assert self.open <= {after.canary_revision}, (self.open, after.canary_revision)
        asked = (decision.target(TrackName.STABLE).replicas if decision.target(TrackName.STABLE) else 0) + (
            decision.target(TrackName.CANARY).replicas
            if decision.target(TrackName.CANARY)
            else self.canary.asked
            if decision.keep_canary
            else 0
        )
        surge = canary_replicas(self.replicas, max(s.weight for s in self.spec.rollout.steps))
        if decision.target(TrackName.STABLE) is not None:
            assert asked <= self.replicas + max(surge, self.canary.asked), (asked, decision)

    def _legitimate(self, before: SpeculativeDeploymentStatus, promoted: str, reason: str, acked: set[str]) -> None:
        if reason.startswith("promoted by the user"):
            self._given_for(Command.PROMOTE, promoted, acked)
        elif not self.guarded:
            assert "unguarded" in reason, reason
        else:
            assert reason == "all steps passed", reason
            assert self._passed(before), "promoted without a Pass on the last step's own evidence"

    @staticmethod
    def _step(status: SpeculativeDeploymentStatus) -> tuple[str | None, int | None, datetime | None]:
        return status.canary_revision, status.current_step, status.step_started_at

    def _passed(self, before: SpeculativeDeploymentStatus) -> bool:
        """A Pass fed during this step, on evidence from no earlier than its canary pods were first all Ready."""
        return before.step_ready_at is not None and any(
            (rev, step, started) == self._step(before) for rev, step, started, _ in self.passes
        )

    def _given_for(self, command: Command, revision_: str, acked: set[str]) -> None:
        assert command.annotation in acked
        value = self.commands[command.annotation]  # as the decision saw it
        given_for = self.given_for.get((command.annotation, value))
        assert given_for == revision_, f"{command.value} given for {given_for} acted on {revision_}"

    @invariant()
    def decided(self) -> None:
        assert self.last is not None


RolloutMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRollout = RolloutMachine.TestCase


# Counterexamples the machine once shrank to, kept as table tests so each defect stays fixed.
GATE_100 = [{"weight": 10}, {"weight": 50, "pause": {}}, {"weight": 100}]
SHRUNK: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = [
    (
        "steps shortened mid-canary: the canary kept its serving pod (make before break)",
        {"guarded": False, "replicas": 3, "steps": STEP_SETS[0]},
        [
            ("edit_speculative", {"k": 2, "operator_up": True}),
            ("pods_ready", {}),
            ("edit_steps", {"steps": [{"weight": 50}]}),
        ],
    ),
    (
        "a step advance followed by shortened steps: the canary keeps serving while the new share loads",
        {"guarded": False, "replicas": 3, "steps": GATE_100},
        [
            ("edit_speculative", {"k": 2, "operator_up": True}),
            ("pods_ready", {}),
            ("edit_steps", {"steps": [{"weight": 50}]}),
        ],
    ),
    (
        "commands given while the operator was down and no canary was live never act on the new one",
        {"guarded": False, "replicas": 1, "steps": STEP_SETS[0]},
        [
            ("edit_speculative", {"k": 2, "operator_up": False}),
            ("give_command", {"command": Command.PROMOTE, "bound": "none", "operator_up": False}),
            ("give_command", {"command": Command.ABORT, "bound": "none", "operator_up": True}),
        ],
    ),
    (
        "a canary of a retiring revision started again and promoted at once records its start first",
        {"guarded": False, "replicas": 1, "steps": [{"weight": 50}]},
        [
            ("edit_speculative", {"k": 2, "operator_up": True}),
            ("edit_speculative", {"k": 4, "operator_up": True}),
            ("pods_ready", {}),
            ("edit_speculative", {"k": 2, "operator_up": True}),
        ],
    ),
]


@pytest.mark.parametrize(("title", "start", "rules"), SHRUNK, ids=[s[0][:40] for s in SHRUNK])
def test_shrunk_counterexamples(title: str, start: dict[str, Any], rules: list[tuple[str, dict[str, Any]]]) -> None:
    machine = RolloutMachine()
    machine.start(**start)
    for name, arguments in rules:
        getattr(machine, name)(**arguments)
        machine.decided()
