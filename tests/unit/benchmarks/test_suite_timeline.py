"""The suite's timeline: each worker's busy time, and what the end of the run waited on."""

import json
import sys
from pathlib import Path

import pytest

import suite_timeline

SPANS = [
    {"test": "a", "worker": "gw0", "kind": "integration", "start": 100.0, "stop": 400.0},
    {"test": "b", "worker": "gw1", "kind": "unit", "start": 100.0, "stop": 110.0},
    {"test": "c", "worker": "gw1", "kind": "vllm", "start": 110.0, "stop": 200.0},
]


def test_the_summary_says_when_each_worker_ran_out_and_what_the_end_waited_on() -> None:
    lines = suite_timeline.summary(SPANS, tail=120.0)
    assert lines[0] == "run: 300 s, 3 tests"
    assert "  gw0: busy 300 s, out of tests at 300 s" in lines and "  gw1: busy 100 s, out of tests at 100 s" in lines
    tail = lines[lines.index("running in the last 120 s (start, end):") + 1 :]
    assert tail == ["       0    300  a"]  # c ended 200 s before the run did


def test_the_plot_is_drawn_from_a_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record, out = tmp_path / "timeline.json", tmp_path / "timeline.png"
    record.write_text(json.dumps(SPANS))
    monkeypatch.setattr(sys, "argv", ["suite_timeline.py", "--record", str(record), "--plot", str(out)])
    suite_timeline.main()
    assert out.read_bytes().startswith(b"\x89PNG")
