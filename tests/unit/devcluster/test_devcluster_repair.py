"""What `dev up` decides before it touches a process: restart in place, or recreate (and say why); and how
`dev status` shows each component's health. The restarts themselves run against real processes in
tests/integration/test_devcluster_lifecycle.py."""

import json
from pathlib import Path

import pytest
from rich.console import Console

from specfleet_workshop.devcluster import process
from specfleet_workshop.devcluster.cli import status_table
from specfleet_workshop.devcluster.cluster import (
    PROCESSES,
    ClusterInfo,
    ClusterStatus,
    ComponentStatus,
    unusable_reason,
)
from specfleet_workshop.devcluster.config import Layout, Ports


def restartable_state(tmp_path: Path) -> tuple[Layout, ClusterInfo]:
    """Every file a restart needs, as `up` leaves them (empty files will do: nothing reads them here)."""
    layout = Layout(tmp_path / "state")
    files = [
        layout.marker,
        layout.kubeconfig,
        *(layout.pki / name for name in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")),
        *(layout.component_kubeconfig(name) for name in ("controller-manager", "scheduler", "kwok")),
        layout.kwok_config,
        layout.prometheus_config,
    ]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    (layout.etcd_data / "member").mkdir(parents=True)
    binaries = {}
    for name in PROCESSES:
        binaries[name] = tmp_path / "bin" / name
        binaries[name].parent.mkdir(exist_ok=True)
        binaries[name].touch()
    info = ClusterInfo(
        state_dir=layout.state_dir, kubeconfig=layout.kubeconfig, api_url="https://127.0.0.1:16443",
        prometheus_url="http://127.0.0.1:19090", file_sd_dir=layout.file_sd_dir, ports=Ports(), binaries=binaries,
        versions={}, node_names=("mi300x-0",),
    )  # fmt: skip
    return layout, info


def test_a_complete_state_can_be_restarted_in_place(tmp_path: Path) -> None:
    layout, info = restartable_state(tmp_path)
    assert unusable_reason(layout, info) is None


def test_without_cluster_json_the_state_cannot_be_restarted(tmp_path: Path) -> None:
    layout, _ = restartable_state(tmp_path)
    assert "cluster.json is missing" in (unusable_reason(layout, None) or "")


@pytest.mark.parametrize("lost", ["etcd/member", "pki/ca.crt", "pki/sa.key", "kubeconfigs/kwok.kubeconfig"])
def test_lost_etcd_data_or_pki_makes_the_state_unusable_and_says_which(tmp_path: Path, lost: str) -> None:
    layout, info = restartable_state(tmp_path)
    path = layout.state_dir / lost
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    assert unusable_reason(layout, info) == f"{path} is missing"


def test_a_binary_gone_from_the_cache_makes_the_state_unusable(tmp_path: Path) -> None:
    layout, info = restartable_state(tmp_path)
    info.binaries["kube-scheduler"].unlink()
    assert "kube-scheduler binary" in (unusable_reason(layout, info) or "")


def test_a_pid_file_keeps_its_restart_count_and_older_pid_files_read_as_never_restarted(tmp_path: Path) -> None:
    pid_file = tmp_path / "etcd.pid"
    process.write_record(pid_file, process.ProcessRecord(10, 20, ["etcd", "--x"], restarts=3))
    assert process.read_record(pid_file) == process.ProcessRecord(10, 20, ["etcd", "--x"], 3)
    pid_file.write_text(json.dumps({"pid": 10, "start_time": 20, "command": ["etcd"]}))  # before restarts existed
    assert process.read_record(pid_file) == process.ProcessRecord(10, 20, ["etcd"], 0)


def component(name: str, pid: int | None, running: bool, healthy: bool, restarts: int = 0) -> ComponentStatus:
    return ComponentStatus(name, "v1", 1, pid, running, healthy, None, restarts)


def test_each_component_shows_its_health_in_one_word() -> None:
    components = (
        component("etcd", 11, running=True, healthy=True),
        component("kube-apiserver", 12, running=True, healthy=False),
        component("kube-scheduler", 13, running=False, healthy=False, restarts=2),
        component("kwok", None, running=False, healthy=False),
    )
    assert [item.health for item in components] == ["healthy", "unhealthy", "dead", "missing"]
    console = Console(width=200, record=True)
    console.print(status_table(ClusterStatus(Path("/s"), None, components)))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 5}
    assert "dead" in rows["kube-scheduler"] and " 2 " in rows["kube-scheduler"]
    assert "unhealthy" in rows["kube-apiserver"]
    assert not ClusterStatus(Path("/s"), None, components).healthy
