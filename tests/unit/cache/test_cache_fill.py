"""Any entry of the shared cache: made once under a lock, built aside and renamed, and a half-made entry of a dead
process told apart from one another process is building."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specfleet_workshop.cachedir import CacheWaitError, exclusively, fill_once

from repokit import ROOT


def test_a_leftover_of_a_killed_build_is_removed_and_the_entry_built(tmp_path: Path) -> None:
    """A process killed mid-build leaves its staging directory; its lock dies with it, so the next caller knows
    nobody is building it any more."""
    target = tmp_path / "entry"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILD, str(target)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "building"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert (tmp_path / ".entry.building" / "half").is_file()
    said: list[str] = []

    fill_once(target, lambda staging: staging.mkdir() or (staging / "whole").touch(), "the entry", said.append)

    assert sorted(path.name for path in target.iterdir()) == ["whole"]
    assert not (tmp_path / ".entry.building").exists()
    assert any("removing the half-made" in line for line in said)


KILLED_BUILD = """
import sys, time
from pathlib import Path
from specfleet_workshop.cachedir import fill_once
def build(staging):
    staging.mkdir(); (staging / "half").touch(); print("building", flush=True); time.sleep(600)
fill_once(Path(sys.argv[1]), build, "the entry")
"""


def test_an_entry_another_process_is_building_is_left_alone_and_the_wait_names_it(tmp_path: Path) -> None:
    target = tmp_path / "entry"
    staging = tmp_path / ".entry.building"
    staging.mkdir()
    with exclusively(tmp_path / ".entry.lock", "the entry", lambda line: None):  # another builder at work
        with pytest.raises(CacheWaitError, match=r"waited 1s for the entry, still being made by pid \d+"):
            fill_once(target, lambda path: path.mkdir(), "the entry", lambda line: None, wait=1)
        assert staging.is_dir()
    assert not target.exists()


def test_a_failed_build_leaves_nothing_behind_and_the_next_caller_builds(tmp_path: Path) -> None:
    target = tmp_path / "entry"

    def failing(staging: Path) -> None:
        staging.mkdir()
        raise RuntimeError("pip: no space left on device")

    with pytest.raises(RuntimeError, match="no space left"):
        fill_once(target, failing, "the entry", lambda line: None)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".entry.lock"]

    fill_once(target, lambda staging: staging.write_text("whole"), "the entry", lambda line: None)
    assert target.read_text() == "whole"
