"""`--wait` of `kubectl specfleet status|promote|retry`: follow a rollout to its end, for pipelines (docs/ci.md).

It reads the object every `POLL_SECONDS` and judges it with `api.rollout_result`, the judgement the operator
writes as the `RolledOut` condition. It prints one plain line whenever the phase, the canary's step, the
verdict or the judgement changes: no live redraw and no colour, so a CI log keeps every line as it was.

Exit codes: `SUCCEEDED` 0, `FAILED` 1 (the reason on stderr), `TIMED_OUT` 2. An API server that cannot be
reached, or answers 429 or 5xx, is tried again until the timeout; any other API error ends the wait (the
caller turns it into one line, exit 1).
"""

import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from specfleet.api.durations import parse_duration
from specfleet.api.rollout_result import Ending, ResultReason, RolloutResult, rollout_result
from specfleet.api.vocabulary import ConditionType

SUCCEEDED, FAILED, TIMED_OUT = 0, 1, 2
POLL_SECONDS = 2.0
"""How often the object is read: a rollout's steps last minutes, a CI log wants its end within seconds."""

WrittenCommand = tuple[str, str]
"""A command annotation just written and its value (`specfleet.io/promote`, `step revision=<rev> <time>`)."""


def wait_result(obj: Mapping[str, Any], command: WrittenCommand | None = None) -> RolloutResult:
    """How the rollout stands (`api.rollout_result`); after `command`, pending until the operator acted on it.

    A command changes no generation, so until the operator reads it the status still says what it said
    before: a retry of a rolled-back revision would read as that rollback. The operator acknowledges a command
    in the status it writes for it, then removes the annotation; either means the status is past it.
    """
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if command is not None:
        annotation, value = command
        acknowledged = (status.get("acknowledgedCommands") or {}).get(annotation) == value
        still_there = (metadata.get("annotations") or {}).get(annotation) == value
        if still_there and not acknowledged:
            message = f"the operator has not acted on {annotation}={value!r} yet"
            return RolloutResult(Ending.PENDING, ResultReason.COMMAND_PENDING, message)
    return rollout_result(status, metadata.get("generation"))


def _progressing(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ConditionType.PROGRESSING), {})


def _canary(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    """The canary part of a line (`, canary 5f8c at step 1/2 (25%)`, `, promoting 5f8c`) and the verdict of its
    last analysis, if it has one."""
    status = obj.get("status") or {}
    canary = status.get("canaryRevision")
    if not canary:
        return "", None
    if canary == status.get("stableRevision"):
        return f", promoting {canary}", None
    steps = ((obj.get("spec") or {}).get("rollout") or {}).get("steps") or []
    index = status.get("currentStep")
    where = ""
    if isinstance(index, int) and 0 <= index < len(steps):
        where = f" at step {index + 1}/{len(steps)} ({steps[index].get('weight', '?')}%)"
    analysis = status.get("lastAnalysis") or {}
    verdict = analysis.get("verdict") if analysis.get("revision") == canary else None
    return f", canary {canary}{where}", verdict


def progress_key(obj: Mapping[str, Any], result: RolloutResult) -> tuple[object, ...]:
    """What a new line is printed for: the judgement, the phase, the canary and its step, its last verdict,
    the Progressing reason (not its message, which counts down the evidence still needed at every look)."""
    status = obj.get("status") or {}
    canary, verdict = _canary(obj)
    return result.ending, result.reason, status.get("phase"), canary, verdict, _progressing(status).get("reason")


def progress_line(obj: Mapping[str, Any], result: RolloutResult, now: datetime) -> str:
    """One plain line: time, object, phase, canary and step, verdict, and why."""
    metadata, status = obj.get("metadata") or {}, obj.get("status") or {}
    head = f"{now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if result.reason in (ResultReason.NOT_OBSERVED, ResultReason.COMMAND_PENDING):
        return f"{head} waiting: {result.message}"
    canary, verdict = _canary(obj)
    verdict_part = f", verdict {verdict}" if verdict else ""
    if result.reason is ResultReason.ROLLING_OUT:
        progressing = _progressing(status)
        why = ": ".join(part for part in (progressing.get("reason"), progressing.get("message")) if part)
    else:
        why = f"{result.reason}: {result.message}"
    return f"{head} {status.get('phase', 'Pending')}{canary}{verdict_part}: {why}"


def transient(error: BaseException) -> bool:
    """An API error worth trying again over a long wait: no connection, throttled, or a server error."""
    from specfleet.cli import kubeapi

    status = kubeapi.error_status(error)
    return kubeapi.is_connection_error(error) if status is None else status == 429 or status >= 500


def follow(
    fetch: Callable[[], Mapping[str, Any]],
    what: str,
    timeout: str | None = None,
    command: WrittenCommand | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Read the object with `fetch` until its rollout ends or `timeout` (a duration, e.g. `45m`; None: no
    limit) runs out; the exit code. `what` names the object in messages (`team-a/llama`)."""
    out, err = out or sys.stdout, err or sys.stderr
    deadline = None if timeout is None else clock() + parse_duration(timeout).total_seconds()
    seen: tuple[object, ...] | None = None
    trouble: str | None = None
    last = "nothing read yet"
    while True:
        try:
            obj = fetch()
        except Exception as error:
            if not transient(error):
                raise
            if str(error) != trouble:
                print(
                    f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {what}: cannot read it ({error}); trying again", file=err
                )
            trouble = str(error)
        else:
            trouble = None
            result = wait_result(obj, command)
            key = progress_key(obj, result)
            if key != seen:
                last = progress_line(obj, result, datetime.now(UTC))
                print(last, file=out, flush=True)
                seen = key
            if result.ending is Ending.SUCCEEDED:
                return SUCCEEDED
            if result.ending is Ending.FAILED:
                print(f"error: {what}: {result.reason}: {result.message}", file=err, flush=True)
                return FAILED
        if deadline is not None and clock() >= deadline:
            print(f"error: {what}: timed out after {timeout}; last: {last}", file=err, flush=True)
            return TIMED_OUT
        sleep(POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - clock())))
