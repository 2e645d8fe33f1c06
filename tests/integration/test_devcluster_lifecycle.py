"""The dev environment keeps what you made and leaves nothing behind, with real processes.

Each test has a cluster of its own (its own state directory, free ports, one node), so the session's
cluster, and anyone else's, is never touched. No sleeps as assertions: every wait polls with a deadline.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import pytest

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster import cluster, process
from specfleet_workshop.devcluster.binaries import COMPONENTS, TOOLS, find_binary
from specfleet_workshop.devcluster.config import Layout, free_ports
from specfleet_workshop.devcluster.nodes import pool_from_counts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPECFLEET = Path(sys.executable).with_name("specfleet")
ONE_NODE = ["--mi300x", "1", "--mi325x", "0", "--mi355x", "0", "--cpu-nodes", "0"]


@pytest.fixture(autouse=True)
def _binaries_built() -> None:
    missing = [name for name in TOOLS if find_binary(COMPONENTS[name], cache_root()) is None]
    if missing:
        pytest.fail(f"dev cluster binaries not built yet ({', '.join(missing)}): run `specfleet dev build` first")


def processes(where: Callable[[int, str], bool]) -> list[tuple[int, str]]:
    """(pid, command line) of every live process for which `where(session id, command line)` holds."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            continue
        if where(int(fields[3]), command_line):
            found.append((int(entry.name), command_line))
    return found


def wait_until(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def dev(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`specfleet dev ...` as a user types it, output through pipes."""
    done = subprocess.run([str(SPECFLEET), "dev", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "cluster"
    yield state
    if state.exists():
        cluster.down(state)


def pids(state: Path) -> dict[str, int | None]:
    return {item.name: item.pid for item in cluster.status(state).components}


def kill(state: Path, name: str) -> None:
    record = process.read_record(Layout(state).pid_file(name))
    assert record is not None and process.is_alive(record)
    os.kill(record.pid, signal.SIGKILL)
    wait_until(f"{name} to be gone", lambda: not process.is_alive(record), timeout=30)


def test_up_restarts_only_dead_components_and_objects_and_ca_survive(state_dir: Path) -> None:
    dev("up", "--state-dir", str(state_dir), "--free-ports", *ONE_NODE)
    info = cluster.load_info(state_dir)
    assert info is not None
    ca = (state_dir / "pki" / "ca.crt").read_bytes()
    with info.api_client() as api:
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "keep-me"}})
        core.create_namespaced_config_map("keep-me", {"metadata": {"name": "notes"}, "data": {"written": "before"}})

    for victim in ("kube-apiserver", "etcd", "kube-scheduler"):
        before = pids(state_dir)
        kill(state_dir, victim)
        assert cluster.status(state_dir).components[cluster.PROCESSES.index(victim)].health == "dead"

        done = dev("up", "--state-dir", str(state_dir), *ONE_NODE)

        assert f"{victim} is not running" in done.stderr and "etcd data and CA kept" in done.stderr
        assert "recreating" not in done.stderr
        after = cluster.status(state_dir)
        assert after.healthy, after
        restarted = {name for name, pid in pids(state_dir).items() if pid != before[name]}
        assert restarted == {victim}
        assert after.components[cluster.PROCESSES.index(victim)].restarts == 1
        assert (state_dir / "pki" / "ca.crt").read_bytes() == ca
        # A new client from the same kubeconfig: its TLS handshake trusts only the original CA.
        with info.api_client() as api:
            notes = kubernetes.client.CoreV1Api(api).read_namespaced_config_map("notes", "keep-me")
        assert notes.data == {"written": "before"}

    status = subprocess.run(
        [str(SPECFLEET), "dev", "status", "--state-dir", str(state_dir)], capture_output=True, text=True, check=True
    )
    assert status.stdout.count("healthy") == len(cluster.PROCESSES)

    recreated = dev("up", "--state-dir", str(state_dir), "--recreate", *ONE_NODE)

    assert "recreating the cluster" in recreated.stderr and "--recreate" in recreated.stderr
    assert (state_dir / "pki" / "ca.crt").read_bytes() != ca
    info = cluster.load_info(state_dir)
    assert info is not None
    with info.api_client() as api, pytest.raises(kubernetes.client.ApiException) as gone:
        kubernetes.client.CoreV1Api(api).read_namespace("keep-me")
    assert gone.value.status == 404


def test_up_recreates_a_cluster_whose_etcd_data_is_gone_and_says_why(state_dir: Path) -> None:
    cluster.up(state_dir, pool=pool_from_counts(mi300x=1, mi325x=0, mi355x=0, cpu=0), ports=free_ports())
    for name in reversed(cluster.PROCESSES):
        cluster.stop_component(state_dir, name)
    wiped = state_dir / "etcd" / "member"
    subprocess.run(["rm", "-rf", str(wiped)], check=True)

    done = dev("up", "--state-dir", str(state_dir), *ONE_NODE)

    assert f"cannot restart the cluster in {state_dir} ({wiped} is missing): recreating it" in done.stderr
    assert cluster.status(state_dir).healthy


def test_down_stops_restarted_components_too(state_dir: Path) -> None:
    cluster.up(state_dir, pool=pool_from_counts(mi300x=1, mi325x=0, mi355x=0, cpu=0), ports=free_ports())
    kill(state_dir, "kwok")
    dev("up", "--state-dir", str(state_dir), *ONE_NODE)
    running = pids(state_dir)

    done = dev("down", "--state-dir", str(state_dir))

    assert all(name in done.stderr for name in cluster.PROCESSES)
    assert processes(lambda _sid, command: str(state_dir) in command) == []
    # None also for a zombie: the processes this test's `cluster.up` started are its children, stopped by another
    assert all(process.process_start_time(pid) is None for pid in running.values() if pid)  # process (`dev down`)
    for pid in filter(None, running.values()):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def leftovers(session: int, state: Path) -> list[tuple[int, str]]:
    """Processes of a benchmark run: in its session (operator, simulator) or naming its cluster's state."""
    return processes(lambda sid, command: sid == session or str(state) in command)


@pytest.mark.parametrize(
    ("script", "args", "done"),
    [
        ("create_many.py", ["--steady-seconds", "1", "--timeout", "240"], '"healthy": 2'),
        ("cluster_floor.py", ["--timeout", "240"], '"available": 2'),
    ],
)
def test_a_benchmark_run_leaves_no_process_behind(tmp_path: Path, script: str, args: list[str], done: str) -> None:
    state = tmp_path / "bench-state"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / script), "--count", "2", "--state-dir", str(state), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # its log directory too
    )  # fmt: skip
    try:
        out, err = run.communicate(timeout=480)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 0, err[-3000:]
    assert done in out, err[-3000:]
    assert "stopped (6 processes)" in err, err[-3000:]
    assert leftovers(run.pid, state) == [], err[-3000:]
    assert not state.exists()


def test_ctrl_c_during_a_benchmark_stops_its_cluster_simulator_and_operator(tmp_path: Path) -> None:
    state = tmp_path / "bench-state"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "time_to_rollback.py"), "--trials", "1", "--aa-trials", "0",
         "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # its log directory too
    )  # fmt: skip
    try:

        def simulator_and_operator_running() -> bool:
            assert run.poll() is None, run.communicate()[1][-3000:]
            commands = [command for _, command in processes(lambda sid, _command: sid == run.pid)]
            return any("specfleet.cli sim " in c for c in commands) and any("specfleet.cli run " in c for c in commands)

        wait_until("the benchmark's simulator and operator", simulator_and_operator_running, timeout=300)
        assert leftovers(run.pid, state), "the cluster and the processes are there before the Ctrl-C"

        os.killpg(run.pid, signal.SIGINT)  # what a terminal sends its foreground job on Ctrl-C
        _, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert "stopped (6 processes)" in err, err[-3000:]
    assert leftovers(run.pid, state) == [], err[-3000:]
    assert not state.exists()
