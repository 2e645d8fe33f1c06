"""`kubectl specfleet` against the real cluster and operator: look, steer, and fail clearly."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import Fleet, Operator, healthy, wait_for

pytestmark = pytest.mark.integration
GATE = [{"weight": 50, "pause": {}}]


def cli(cluster: ClusterInfo, namespace: str, *args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "specfleet.cli", *args, "--kubeconfig", kubeconfig or str(cluster.kubeconfig)]
    if "list" not in args or "-A" not in args:
        command += ["-n", namespace]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_kubectl_finds_the_plugin(dev_cluster: ClusterInfo, crd_installed: None, namespace: str) -> None:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    environment = {**os.environ, "PATH": path, "KUBECONFIG": str(dev_cluster.kubeconfig)}
    result = subprocess.run(  # kubectl takes no flags before a plugin's name: the kubeconfig comes from the env
        [str(dev_cluster.kubectl), "specfleet", "list", "-n", namespace],
        capture_output=True, text=True, timeout=60, env=environment,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "no SpeculativeDeployments" in result.stderr


def test_list_status_promote_history_and_undo(operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo) -> None:
    first = healthy(fleet, steps=GATE)["stableRevision"]
    listing = cli(dev_cluster, fleet.namespace, "list")
    assert listing.returncode == 0 and "llama" in listing.stdout and "Healthy" in listing.stdout

    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the gate", fleet.phase_is("llama", "Paused"))
    status = cli(dev_cluster, fleet.namespace, "status", "llama")
    assert status.returncode == 0 and "Paused" in status.stdout and "ManualGate" in status.stdout
    as_json = json.loads(cli(dev_cluster, fleet.namespace, "status", "llama", "-o", "json").stdout)
    assert as_json["phase"] == "Paused"

    assert cli(dev_cluster, fleet.namespace, "promote", "llama").returncode == 0
    second = wait_for("promotion", lambda: (s := fleet.status("llama")).get("phase") == "Healthy"
                      and s["stableRevision"] != first and s["stableRevision"])  # fmt: skip
    history = yaml.safe_load(cli(dev_cluster, fleet.namespace, "history", "llama", "-o", "yaml").stdout)
    assert [h["outcome"] for h in history] == ["Created", "Promoted"]
    assert [h["revision"] for h in history] == [first, second]

    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    wait_for("the next gate", fleet.phase_is("llama", "Paused"))
    assert cli(dev_cluster, fleet.namespace, "promote", "llama", "--full").returncode == 0
    wait_for("the third revision", lambda: fleet.status("llama").get("stableRevision") not in (first, second)
             and fleet.status("llama").get("phase") == "Healthy")  # fmt: skip

    undo = cli(dev_cluster, fleet.namespace, "undo", "llama", "--to-revision", second)
    assert undo.returncode == 0, undo.stderr
    assert fleet.get("llama")["spec"]["speculative"]["numSpeculativeTokens"] == 2
    wait_for("a canary of the old revision", lambda: fleet.status("llama").get("canaryRevision") == second)


def test_undo_returns_to_the_first_revision(operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo) -> None:
    first = healthy(fleet)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("k=2 promoted", lambda: (s := fleet.status("llama"))["stableRevision"] != first
             and s.get("phase") == "Healthy")  # fmt: skip
    undo = cli(dev_cluster, fleet.namespace, "undo", "llama")
    assert undo.returncode == 0, undo.stderr
    assert fleet.get("llama")["spec"]["speculative"]["numSpeculativeTokens"] == 4
    wait_for("the first revision stable again", lambda: (s := fleet.status("llama"))["stableRevision"] == first
             and s.get("phase") == "Healthy" and s["history"][-1]["outcome"] == "Promoted")  # fmt: skip


def test_pause_holds_a_canary_mid_step_and_resume_goes_on(
    operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo
) -> None:
    healthy(fleet, steps=[{"weight": 50, "pause": {"duration": "5s"}}])
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    canary = wait_for("canary traffic", lambda: fleet.status("llama").get("canaryWeight") and fleet.status("llama"))
    assert cli(dev_cluster, fleet.namespace, "pause", "llama").returncode == 0
    paused = wait_for(
        "the pause", lambda: (s := fleet.status("llama")).get("pausedAt") and s.get("phase") == "Paused" and s
    )
    assert paused["canaryRevision"] == canary["canaryRevision"]
    # a negative is seen over a window: three times the step's pause, the canary neither promoted nor moved
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = fleet.status("llama")
        assert now["phase"] == "Paused" and now["canaryRevision"] == canary["canaryRevision"], now
        assert now["canaryWeight"] == paused["canaryWeight"] and now["stableRevision"] == canary["stableRevision"]
        time.sleep(0.5)
    assert cli(dev_cluster, fleet.namespace, "resume", "llama").returncode == 0
    promoted = canary["canaryRevision"]
    wait_for("promotion after resume", lambda: (s := fleet.status("llama"))["stableRevision"] == promoted
             and s.get("phase") == "Healthy")  # fmt: skip


def test_abort_and_retry_from_the_cli(operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo) -> None:
    healthy(fleet, steps=GATE)
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))
    assert cli(dev_cluster, fleet.namespace, "abort", "llama").returncode == 0
    wait_for("abort", fleet.phase_is("llama", "Aborted"))
    assert cli(dev_cluster, fleet.namespace, "retry", "llama").returncode == 0
    wait_for("the canary again", lambda: fleet.status("llama").get("canaryRevision") == canary)


def test_clear_errors(dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path) -> None:
    missing = cli(dev_cluster, namespace, "status", "nope")
    assert missing.returncode == 1 and f"{namespace}/nope: not found" in missing.stderr

    token = subprocess.run(
        [str(dev_cluster.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig), "-n", namespace, "create", "token",
         "default"], capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    config = yaml.safe_load(dev_cluster.kubeconfig.read_text())
    config["users"] = [{"name": "nobody", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "nobody"
    limited = tmp_path / "nobody.kubeconfig"
    limited.write_text(yaml.safe_dump(config))
    denied = cli(dev_cluster, namespace, "list", kubeconfig=str(limited))
    assert denied.returncode == 1 and "forbidden by RBAC" in denied.stderr

    nowhere = tmp_path / "nowhere.kubeconfig"
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    nowhere.write_text(yaml.safe_dump(config))
    unreachable = cli(dev_cluster, namespace, "list", kubeconfig=str(nowhere))
    assert unreachable.returncode == 1 and "cannot reach the cluster" in unreachable.stderr
