"""`kubectl specfleet status|promote|retry --wait` as a pipeline runs them: the exit code says how the rollout
ended (0 succeeded, 1 rolled back or aborted, 2 timed out), with one plain line per change on the way."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from specfleet.api.rollout_result import Ending, ResultReason
from specfleet.api.vocabulary import Command
from specfleet.cli import rollouts, view, wait
from specfleet.cli.main import app

from clikit import FakeApi

runner = CliRunner()
STEPS = {"rollout": {"steps": [{"weight": 25}, {"weight": 50}]}}


def status(phase: str, generation: int = 1, reason: str = "", message: str = "", **fields: Any) -> dict[str, Any]:
    conditions = [{"type": "Progressing", "status": "True", "reason": reason, "message": message}]
    return {"phase": phase, "observedGeneration": generation, "conditions": conditions, **fields}


HEALTHY_OLD = status("Healthy", reason="RolloutComplete", stableRevision="old")
CANARY = status(
    "Progressing", reason="CanaryStep", message="waiting", stableRevision="old", canaryRevision="new", currentStep=0
)
GATE = {**CANARY, **status("Paused", reason="ManualGate", message="waiting for promote")}
PROMOTING = status("Progressing", reason="Promoting", stableRevision="new", canaryRevision="new")
HEALTHY_NEW = status("Healthy", reason="RolloutComplete", stableRevision="new")
REASON = "acceptance alpha 0.31, 99% bounds 0.27 to 0.35: upper bound < 0.60"
ROLLED_BACK = status(
    "RolledBack",
    reason="RolledBack",
    message=REASON,
    stableRevision="old",
    rejectedRevision="new",
    history=[{"revision": "new", "outcome": "RolledBack", "time": "2026-11-29T12:00:00Z", "reason": REASON}],
)


def with_verdict(base: dict[str, Any], verdict: str, step: int = 0) -> dict[str, Any]:
    analysis = {"revision": "new", "verdict": verdict, "time": "2026-11-29T12:00:00Z", "step": step}
    return {**base, "currentStep": step, "lastAnalysis": analysis}


def writes(*statuses: dict[str, Any] | Exception) -> Callable[[dict[str, Any]], None]:
    """An operator that has written the next of `statuses` by each read (the last one stays); an exception is
    raised by that read instead."""
    queue = list(statuses)

    def on_read(obj: dict[str, Any]) -> None:
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        obj["status"] = item

    return on_read


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    """The fake API server behind every command; `--wait` polls it without pausing."""
    fake = FakeApi(HEALTHY_OLD)
    fake.obj["spec"] = STEPS
    cluster = view.Cluster(fake, "ns")  # type: ignore[arg-type]
    monkeypatch.setattr(view, "connect", lambda *a: cluster)
    monkeypatch.setattr(rollouts, "connect", lambda *a: cluster)
    monkeypatch.setattr(wait, "POLL_SECONDS", 0.001)
    yield fake


def test_a_promotion_exits_0_with_one_line_per_change(api: FakeApi) -> None:
    api.on_read = writes(
        CANARY,
        CANARY,  # nothing changed: no line
        with_verdict(CANARY, "Inconclusive"),
        with_verdict(CANARY, "Inconclusive"),
        with_verdict(CANARY, "Pass", step=1),
        PROMOTING,
        HEALTHY_NEW,
    )
    result = runner.invoke(app, ["status", "llama", "--wait", "--timeout", "1m"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and all(line.split()[1] == "ns/llama" for line in lines)
    assert "canary new at step 1/2 (25%): CanaryStep: waiting" in lines[0]
    assert "verdict Inconclusive" in lines[1] and "step 2/2 (50%), verdict Pass" in lines[2]
    assert "promoting new" in lines[3]
    assert lines[4].endswith("Healthy: RolloutComplete: serving revision new")
    assert "\x1b" not in result.output  # no colour or cursor movement in a CI log


def test_a_rollback_exits_1_with_its_reason_on_stderr(api: FakeApi) -> None:
    api.on_read = writes(CANARY, with_verdict(CANARY, "Fail"), ROLLED_BACK)
    result = runner.invoke(app, ["status", "llama", "--wait"])
    assert result.exit_code == 1
    assert "RolledBack: revision new was rolled back: " + REASON in result.stderr
    assert result.stdout.splitlines()[-1].split(" ", 2)[2].startswith("RolledBack")


def test_a_rollout_that_does_not_end_in_time_exits_2(api: FakeApi) -> None:
    api.on_read = writes(GATE)
    result = runner.invoke(app, ["status", "llama", "--wait", "--timeout", "50ms"])
    assert result.exit_code == 2
    assert "timed out after 50ms" in result.stderr and "ManualGate" in result.stderr
    assert api.reads > 1
    assert len(result.stdout.splitlines()) == 1


def test_a_status_from_before_the_change_is_not_taken_for_its_outcome(api: FakeApi) -> None:
    api.obj["metadata"]["generation"] = 2  # `kubectl apply` just changed the spec; the operator has not acted
    api.on_read = writes(
        HEALTHY_OLD, HEALTHY_OLD, {**CANARY, "observedGeneration": 2}, {**HEALTHY_NEW, "observedGeneration": 2}
    )
    result = runner.invoke(app, ["status", "llama", "--wait"])
    assert result.exit_code == 0, result.output
    first, *_, last = result.stdout.splitlines()
    assert "waiting: the operator has not acted on generation 2 yet" in first
    assert "serving revision new" in last and api.reads == 4


def test_nothing_to_do_exits_0_at_once(api: FakeApi) -> None:
    result = runner.invoke(app, ["status", "llama", "--wait"])
    assert result.exit_code == 0 and api.reads == 1
    assert "serving revision old" in result.stdout


def test_an_unreachable_api_server_is_tried_again_a_missing_object_is_not(api: FakeApi) -> None:
    api.on_read = writes(ConnectionRefusedError(111, "Connection refused"), ApiException(status=503), HEALTHY_NEW)
    result = runner.invoke(app, ["status", "llama", "--wait"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("trying again") == 2

    api.on_read = writes(ApiException(status=404, reason="Not Found"))
    missing = runner.invoke(app, ["status", "llama", "--wait"])
    assert missing.exit_code == 1 and "ns/llama: not found" in missing.stderr


def operator_acting_on(command: Command, after_reads: int, then: list[dict[str, Any]]) -> Callable[[dict, Any], None]:
    """An operator that sees `command`'s annotation only at read `after_reads` (the command's own read is the
    first): it acknowledges it in the status it writes for it (`then[0]`), removes it, then writes the rest."""
    reads, queue = [0], list(then)

    def on_read(obj: dict[str, Any]) -> None:
        reads[0] += 1
        annotations = obj["metadata"].get("annotations") or {}
        if reads[0] < after_reads or (command.annotation not in annotations and not queue):
            return
        if command.annotation in annotations:
            acknowledged = {command.annotation: annotations.pop(command.annotation)}
            obj["status"] = {**queue.pop(0), "acknowledgedCommands": acknowledged}
        elif queue:
            obj["status"] = queue.pop(0)

    return on_read


def test_retry_wait_follows_the_new_canary_not_the_rollback_it_retries(api: FakeApi) -> None:
    api.obj["status"] = ROLLED_BACK
    api.on_read = operator_acting_on(Command.RETRY, after_reads=4, then=[CANARY, PROMOTING, HEALTHY_NEW])
    result = runner.invoke(app, ["retry", "llama", "--wait"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "waiting: the operator has not acted on specfleet.io/retry=" in lines[0]
    assert "canary new" in lines[1] and lines[-1].endswith("serving revision new")


def test_promote_wait_exits_with_the_rollouts_end(api: FakeApi) -> None:
    api.obj["status"] = GATE
    api.on_read = operator_acting_on(Command.PROMOTE, after_reads=2, then=[PROMOTING, HEALTHY_NEW])
    assert runner.invoke(app, ["promote", "llama", "--wait", "--timeout", "1m"]).exit_code == 0
    (patch,) = api.patches
    assert Command.PROMOTE.annotation in patch["metadata"]["annotations"]

    api.obj["status"], api.patches = GATE, []
    api.on_read = operator_acting_on(Command.PROMOTE, after_reads=2, then=[ROLLED_BACK])
    failed = runner.invoke(app, ["promote", "llama", "--wait"])
    assert failed.exit_code == 1 and REASON in failed.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["status", "llama", "--wait", "-w"], "not with --watch"),
        (["status", "llama", "--wait", "-o", "json"], "--output"),
        (["status", "llama", "--timeout", "5m"], "--timeout needs --wait"),
        (["retry", "llama", "--timeout", "5m"], "--timeout needs --wait"),
        (["status", "llama", "--wait", "--timeout", "5"], "invalid duration '5'"),
    ],
)
def test_options_that_do_not_go_together_are_usage_errors(api: FakeApi, argv: list[str], says: str) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and says in " ".join(result.stderr.split())
    assert api.reads == 0 and api.patches == []


def test_a_command_is_waited_for_until_the_operator_acknowledges_or_removes_it() -> None:
    written = (Command.PROMOTE.annotation, "step revision=new 2026-11-29T12:00:00+00:00")
    metadata = {"generation": 1, "annotations": dict([written])}
    unread = {"metadata": metadata, "status": GATE}
    assert wait.wait_result(unread, written).reason is ResultReason.COMMAND_PENDING
    assert wait.wait_result(unread).ending is Ending.PENDING  # without the command: the gate itself
    acknowledged = {"metadata": metadata, "status": {**HEALTHY_NEW, "acknowledgedCommands": dict([written])}}
    assert wait.wait_result(acknowledged, written).ending is Ending.SUCCEEDED
    removed = {"metadata": {"generation": 1}, "status": ROLLED_BACK}
    assert wait.wait_result(removed, written).ending is Ending.FAILED
    replaced = {"metadata": {"generation": 1, "annotations": {written[0]: "step"}}, "status": HEALTHY_NEW}
    assert wait.wait_result(replaced, written).ending is Ending.SUCCEEDED
