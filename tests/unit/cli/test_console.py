"""Output wraps at the terminal's width in a terminal, and not at all in a pipe or file; -o json|yaml is exact.

The terminal is a real pseudo-terminal of 57 columns. The pipe cases keep that terminal on the child's other
standard streams, as a shell does for `specfleet demo | tee log`: rich used to measure it there and wrap
the pipe at 57 (or at 80 without any terminal).
"""

import fcntl
import io
import json
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.cli import view
from specfleet.cli.main import app
from specfleet.console import PIPE_WIDTH, make_console, pipe_width

COLUMNS = 57
LONG = " ".join(f"word{i}" for i in range(40))  # 318 characters


def _pty(columns: int) -> tuple[int, int]:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return leader, follower


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def run(code: str, *, stdout_is_terminal: bool, stderr_is_terminal: bool = True) -> tuple[str, str]:
    """Run `code` in a child whose stdin is the 57-column terminal; return what it wrote to stdout and stderr."""
    leader, follower = _pty(COLUMNS)
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=follower,
        stdout=follower if stdout_is_terminal else subprocess.PIPE,
        stderr=follower if stderr_is_terminal else subprocess.PIPE,
        env=environment,
    )
    os.close(follower)
    terminal = _read_all(leader)
    out, err = child.communicate(timeout=60)
    os.close(leader)
    assert child.returncode == 0, (terminal, err)
    return (terminal if stdout_is_terminal else out.decode()), (terminal if stderr_is_terminal else err.decode())


PRINT_LONG = f"from specfleet.console import make_console; make_console().print({LONG!r})"


def test_a_terminal_gets_lines_wrapped_at_its_width() -> None:
    out, _ = run(PRINT_LONG, stdout_is_terminal=True)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) > 1
    assert max(len(line) for line in lines) <= COLUMNS
    assert " ".join(lines).split() == LONG.split()


def test_a_pipe_gets_whole_lines_even_with_a_terminal_on_the_other_streams() -> None:
    out, _ = run(PRINT_LONG, stdout_is_terminal=False)
    assert out == LONG + "\n"


def test_a_command_writing_to_a_piped_stderr_does_not_wrap(tmp_path: Path) -> None:
    """`specfleet dev status` on a state directory with a long name: its one-line message stays one line."""
    state_dir = tmp_path / ("a-rather-long-directory-name-" * 4) / "state"
    code = (
        "import sys; from specfleet.cli.main import main; "
        f"sys.argv = ['specfleet', 'dev', 'status', '--state-dir', {str(state_dir)!r}]; main()"
    )
    leader, follower = _pty(COLUMNS)
    child = subprocess.run(
        [sys.executable, "-c", code], stdin=follower, stdout=follower, stderr=subprocess.PIPE, check=False,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    os.close(follower)
    os.close(leader)
    assert child.returncode == 1  # no cluster there
    assert child.stderr.decode() == f"no dev cluster in {state_dir}\n"


def test_pipe_width_follows_columns_when_it_is_set() -> None:
    assert pipe_width({"COLUMNS": "132"}) == 132
    assert pipe_width({}) == pipe_width({"COLUMNS": "wide"}) == pipe_width({"COLUMNS": "0"}) == PIPE_WIDTH


def test_a_file_console_lays_tables_out_wide_and_never_wraps_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    buffer = io.StringIO()
    console = make_console(file=buffer)
    console.print(LONG * 2)
    assert console.width == PIPE_WIDTH
    assert buffer.getvalue() == LONG * 2 + "\n"


REASON = "per-token p95 9.58 ms vs stable 7.57 ms: +26%, 99% bounds +21% to +32%: lower bound > limit 10% " * 3
STATUS = {
    "phase": "RolledBack",
    "history": [{"revision": "abc123", "outcome": "RolledBack", "time": "2026-11-30T10:00:00Z", "reason": REASON}],
    "lastAnalysis": {"verdict": "Fail", "reasons": [REASON], "canary": {"acceptanceAlpha": 0.312345678901}},
}


class OneObject:
    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return {"metadata": {"name": "llama", "namespace": "ns"}, "spec": {}, "status": STATUS}


@pytest.mark.parametrize(("output", "load"), [("json", json.loads), ("yaml", yaml.safe_load)])
def test_status_as_json_or_yaml_is_exact(monkeypatch: pytest.MonkeyPatch, output: str, load: Any) -> None:
    monkeypatch.setattr(view, "connect", lambda *a: view.Cluster(OneObject(), "ns"))  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["status", "llama", "-o", output])
    assert result.exit_code == 0, result.output
    assert load(result.stdout) == STATUS
    assert REASON.strip() in result.stdout  # one line, not folded


def test_status_shows_each_guardrails_estimate_bounds_limit_and_what_it_still_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs = "~1,900 more canary requests, ~4 min at the current rate"
    checks = [
        {"guardrail": "maxErrorRateIncrease", "verdict": "Inconclusive", "estimate": 0.0, "lower": -0.012,
         "upper": 0.017, "limit": 0.01, "needs": needs},
        {"guardrail": "maxTokenLatencyMeanRegression", "verdict": "Pass", "estimate": -0.3, "lower": -0.33,
         "upper": -0.27, "limit": 0.05},
    ]  # fmt: skip
    status = {"phase": "Progressing", "lastAnalysis": {"verdict": "Inconclusive", "time": "t", "checks": checks}}

    class Fleet:
        def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
            return {"metadata": {"name": "llama", "namespace": "ns"}, "spec": {}, "status": status}

    monkeypatch.setattr(view, "connect", lambda *a: view.Cluster(Fleet(), "ns"))  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["status", "llama"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    error_row = next(line for line in result.stdout.splitlines() if "error rate vs stable" in line)
    assert "Inconclusive" in error_row and "-1.20 pt .. +1.70 pt" in error_row and needs in error_row
    mean_row = next(line for line in result.stdout.splitlines() if "mean per token vs stable" in line)
    assert "Pass" in mean_row and "-30.0%" in mean_row and "+5.0%" in mean_row
