"""Start and stop the cluster's processes through pid files, never by name.

A pid file records the pid and the process's start time (field 22 of /proc/<pid>/stat): a pid that the
kernel has since given to an unrelated process has another start time, so `stop` leaves it alone.
Processes run in their own session, so a Ctrl-C in the shell that ran `dev up` does not kill them.
"""

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any


@dataclass(frozen=True)
class ProcessRecord:
    """What a pid file holds."""

    pid: int
    start_time: int
    command: list[str]
    restarts: int = 0
    """How many times `dev up` restarted this component in place (shown by `dev status`)."""


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot, or None when there is no such (live) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing paren.
    after_name = stat[stat.rindex(")") + 2 :].split()
    state, start_time = after_name[0], after_name[19]
    if state in ("Z", "X"):
        return None
    return int(start_time)


def read_record(pid_file: Path) -> ProcessRecord | None:
    try:
        data = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return None
    return ProcessRecord(int(data["pid"]), int(data["start_time"]), list(data["command"]), int(data.get("restarts", 0)))


def write_record(pid_file: Path, record: ProcessRecord) -> None:
    pid_file.write_text(
        json.dumps(
            {"pid": record.pid, "start_time": record.start_time, "command": record.command, "restarts": record.restarts}
        )
    )


def is_alive(record: ProcessRecord) -> bool:
    """True when the recorded process still runs (same pid and same start time)."""
    return process_start_time(record.pid) == record.start_time


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process, from /proc/<pid>/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What ends a run from outside: Ctrl-C, `kill`, a closed terminal."""


@contextmanager
def _signals_handled_by(handler: Callable[[int, FrameType | None], Any] | int) -> Iterator[None]:
    previous = {number: signal.signal(number, handler) for number in ENDING_SIGNALS}
    try:
        yield
    finally:
        for number, handler_before in previous.items():
            signal.signal(number, handler_before)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def signals_as_interrupts() -> AbstractContextManager[None]:
    """SIGTERM and SIGHUP end the block as Ctrl-C does (KeyboardInterrupt), so the `finally` blocks that stop
    clusters and processes run however a run is ended; SIGINT too, which a shell ignores for a job it
    starts with `&`."""
    return _signals_handled_by(_interrupt)


def signals_ignored() -> AbstractContextManager[None]:
    """While stopping what a run started: a second Ctrl-C must not leave half of it running."""
    return _signals_handled_by(signal.SIG_IGN)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then act on them as the handlers before would.

    Between starting a process and recording it (a pid file, a list to stop) a Ctrl-C would leave it running
    and known to nobody. Only the main thread can set handlers; elsewhere the block runs as it is. The
    started process does not inherit the holding handler: exec resets caught signals to their default.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {number: signal.getsignal(number) for number in ENDING_SIGNALS}
    held = [number for number, handler in previous.items() if handler not in (signal.SIG_IGN, None)]
    for number in held:
        signal.signal(number, hold)
    try:
        yield
    finally:
        for number in held:
            signal.signal(number, previous[number])
        for signum in received:
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            else:  # SIG_DFL: what would have happened
                os.kill(os.getpid(), signum)


def start(command: list[str], pid_file: Path, log_file: Path, restarts: int = 0) -> ProcessRecord:
    """Start a detached process with its output appended to `log_file`, and record it in `pid_file`.

    The record keeps the command line, so a component that died can be started again exactly as it was.
    """
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with signals_deferred(), log_file.open("ab") as log:  # no Ctrl-C between the start and the pid file
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        start_time = process_start_time(process.pid)
        if start_time is None:
            raise RuntimeError(f"{Path(command[0]).name} exited at once; see {log_file}")
        record = ProcessRecord(process.pid, start_time, command, restarts)
        write_record(pid_file, record)
    return record


def _reap(pid: int, timeout: float = 0.0) -> None:
    """Collect the exit status when we are the parent (pytest sessions), so no zombie is left behind.

    A Go program's main thread turns zombie before its other threads have exited, and until they have,
    waitpid reports nothing: after a stop we therefore keep asking for up to `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if reaped == pid or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def stop(pid_file: Path, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process, SIGKILL it after `timeout`; remove the pid file. True if it was running."""
    record = read_record(pid_file)
    if record is None:
        pid_file.unlink(missing_ok=True)
        return False
    was_running = is_alive(record)
    if was_running:
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_alive(record) and time.monotonic() < deadline:
            _reap(record.pid)
            time.sleep(0.05)
        if is_alive(record):
            os.kill(record.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while is_alive(record) and time.monotonic() < deadline:
                _reap(record.pid)
                time.sleep(0.05)
    _reap(record.pid, timeout=5.0)
    pid_file.unlink(missing_ok=True)
    return was_running
