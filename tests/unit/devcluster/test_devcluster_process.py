"""Pid files: start detached, stop exactly the recorded process, ignore a pid that was reused."""

import json
import os
import signal
import subprocess
from pathlib import Path

from specfleet_workshop.devcluster import process


def test_start_records_and_stop_terminates_the_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids" / "sleeper.pid"
    record = process.start(["sleep", "60"], pid_file, tmp_path / "logs" / "sleeper.log")
    assert process.is_alive(record)
    assert process.read_record(pid_file) == record
    assert process.rss_bytes(record.pid)
    assert process.stop(pid_file) is True
    assert not process.is_alive(record)
    assert not pid_file.exists()


def test_stop_leaves_a_process_alone_whose_start_time_differs(tmp_path: Path) -> None:
    """A pid reused by the kernel for an unrelated process must not be killed."""
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "stale.pid"
        pid_file.write_text(json.dumps({"pid": unrelated.pid, "start_time": 1, "command": ["old"]}))
        assert process.stop(pid_file) is False
        assert unrelated.poll() is None
        assert not pid_file.exists()
    finally:
        unrelated.kill()
        unrelated.wait()


def test_stop_without_a_pid_file_is_a_no_op(tmp_path: Path) -> None:
    assert process.stop(tmp_path / "missing.pid") is False


def test_process_start_time_of_a_missing_pid_is_none() -> None:
    assert process.process_start_time(2**22 + 1) is None


def test_a_signal_during_a_start_waits_until_the_process_is_recorded(tmp_path: Path) -> None:
    """A Ctrl-C (here SIGHUP, to leave pytest's own SIGINT alone) between Popen and the pid file is held."""
    seen: list[str] = []
    previous = signal.signal(signal.SIGHUP, lambda *_: seen.append("handled"))
    try:
        with process.signals_deferred():
            os.kill(os.getpid(), signal.SIGHUP)  # a handler runs before the next bytecode: the holding one
            seen.append("recorded")
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert seen == ["recorded", "handled"]
