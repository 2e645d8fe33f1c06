"""The whole suite runs on several pytest-xdist workers (`-n` in pyproject.toml): the integration tests mostly
wait on simulations and servers that run in wall time, so they run side by side on one shared dev cluster.

- The cluster is started by the first worker that needs it and stopped, if this run started it, by the
  controller once every worker is done (a worker cannot know that the others are).
- Real vLLM servers take ~2.5 GiB each and start on a busy CPU: the `vllm` tests run on one worker, one
  after another, except test_images' two, whose module group xdist joins with `vllm` into `images_vllm`
  (one server at a time, beside the `vllm` group).
- A test that acts on what every test shares (`cluster_wide`: an operator over every namespace, CRDs) runs alone,
  after the other integration tests, beside the unit tests.
- The longest tests are handed out first, by the durations the last run on this machine recorded (under the
  cache directory, outside the repo), so no long test starts last while the other workers sit idle. Without
  a record, real vLLM goes first, then the other integration tests, then unit tests.
- A worker always holds one test queued behind the one it runs (xdist needs the next test to finish the
  current one): behind a long test that is the shortest left, so no long test waits minutes in a busy
  worker's queue while others go idle (`ShortBehindLongScheduling`); and the queue is this order, not
  xdist's default of groups with the most tests first.
"""

import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Container
from pathlib import Path
from typing import Any

import pytest

from specfleet_workshop.cachedir import cache_root

from testrun import CLUSTER_STARTED, RUN_DIR, ShortBehindLongScheduling


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for size in ("COLUMNS", "LINES"):  # xdist workers get COLUMNS=80: output widths must not depend on where tests run
        os.environ.pop(size, None)
    if not _is_worker(config) and RUN_DIR not in os.environ:
        os.environ[RUN_DIR] = tempfile.mkdtemp(prefix="specfleet-tests-")  # the workers inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_worker(config) or RUN_DIR not in os.environ:
        return
    run_dir = Path(os.environ.pop(RUN_DIR))
    started = run_dir / CLUSTER_STARTED
    if started.exists():
        from specfleet_workshop.devcluster.cluster import down  # only when a run started the cluster

        down(Path(started.read_text()))
    shutil.rmtree(run_dir, ignore_errors=True)


DURATIONS = "test-durations.json"
"""Seconds each test took (setup, call and teardown) at its last run, in the cache directory."""
TIMELINE = "test-timeline.json"
"""When each test ran and on which worker at the last run, in the cache directory (`benchmarks/suite_timeline.py`
reads it: where the run's time went)."""
UNRECORDED = {"vllm": 1e6, "integration": 120.0, "unit": 0.1}
"""Seconds assumed for a test the record does not know yet, by kind."""
_took: dict[str, float] = defaultdict(float)
_ran: dict[str, dict[str, Any]] = {}


def _durations_file() -> Path:
    return cache_root() / DURATIONS


def _recorded() -> dict[str, float]:
    try:
        record = json.loads(_durations_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in record.items()} if isinstance(record, dict) else {}


def _kind(marks: Container[str]) -> str:
    """`vllm`, `integration` or `unit`, from the names of a test's marks (an item's, or a report's keywords)."""
    return next((mark for mark in ("vllm", "integration") if mark in marks), "unit")


def _marks(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()}


def _group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0] if marker and marker.args else marker.kwargs.get("name", "")) if marker else ""


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first; a group (one worker runs all its tests in a row) weighs what its tests add up to, and
    keeps its tests together and in order."""
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("vllm"))
    recorded = _recorded()
    seconds = {item.nodeid: recorded.get(item.nodeid, UNRECORDED[_kind(_marks(item))]) for item in items}
    weight: dict[str, float] = defaultdict(float)
    for item in items:
        weight[_group(item) or item.nodeid] += seconds[item.nodeid]
    first_seen = {key: index for index, key in reversed(list(enumerate(_group(i) or i.nodeid for i in items)))}
    items.sort(
        key=lambda item: (_stage(item), -weight[_group(item) or item.nodeid], first_seen[_group(item) or item.nodeid])
    )


def _expected_seconds(nodeid: str, recorded: dict[str, float]) -> float:
    """As the record says; else what a test of its kind is assumed to take (the controller sees ids, not marks)."""
    nodeid = nodeid.split("@")[0]
    return recorded.get(nodeid, UNRECORDED["integration" if nodeid.startswith("tests/integration/") else "unit"])


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run with `-p no:xdist` does not know it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` in the order `pytest_collection_modifyitems` made, except for which test a worker gets
    queued behind the one it runs."""
    if config.getoption("dist") != "loadgroup":
        return None
    recorded = _recorded()
    return ShortBehindLongScheduling(config, log, expected=lambda nodeid: _expected_seconds(nodeid, recorded))


def _stage(item: pytest.Item) -> int:
    """Integration tests first; then those that need the cluster alone (integration conftest), which wait for
    the others to leave it while the other workers run the unit tests, handed out last."""
    if item.get_closest_marker("cluster_wide"):
        return 1
    return 2 if _kind(_marks(item)) == "unit" else 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid.split("@")[0]  # xdist suffixes a grouped test's id with "@group"
    _took[nodeid] += report.duration
    node = getattr(report, "node", None)  # the xdist worker that ran it, on the controller
    span = _ran.setdefault(
        nodeid, {"worker": node.gateway.id if node else "main", "kind": _kind(report.keywords), "start": report.start}
    )
    span["stop"] = report.stop


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _is_worker(session.config) or not _took:
        return
    record = {**_recorded(), **{nodeid: round(seconds, 2) for nodeid, seconds in _took.items()}}
    path = _durations_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=0, sort_keys=True))
    spans = [{"test": nodeid, **span} for nodeid, span in sorted(_ran.items(), key=lambda item: item[1]["start"])]
    (path.parent / TIMELINE).write_text(json.dumps(spans, indent=0))
