"""A pipeline waits for a rollout's outcome on the real cluster: `kubectl specfleet status|promote|retry --wait`
exits 0 on a promotion, 1 on a rollback (the reason on stderr), 2 at its timeout; `kubectl wait
--for=condition=RolledOut` (and `=False`) returns at the same ends, never on the status of the previous spec."""

import subprocess
import sys

import pytest

from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import EAGLE3_K5, PLAIN, Fleet, Operator, Simulator, healthy, start_canary, wait_for

pytestmark = pytest.mark.integration
GATE = [{"weight": 50, "pause": {}}]


def cli(cluster: ClusterInfo, namespace: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "specfleet.cli", *args, "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]


def run(command: list[str], timeout: float = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def kubectl_wait(fleet: Fleet, condition: str) -> subprocess.Popen[str]:
    command = [str(fleet.cluster.kubectl), "--kubeconfig", str(fleet.cluster.kubeconfig), "-n", fleet.namespace]
    command += ["wait", f"--for=condition={condition}", "--timeout=400s", "sdep/llama"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_promotion_exits_0_and_kubectl_wait_returns_for_the_promoted_spec(
    operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo
) -> None:
    first = healthy(fleet)["stableRevision"]  # RolledOut=True already, for this generation
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    waiting = kubectl_wait(fleet, "RolledOut")
    following = subprocess.Popen(
        cli(dev_cluster, fleet.namespace, "status", "llama", "--wait", "--timeout", "6m"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))
    assert waiting.poll() is None, "kubectl wait took the previous spec's RolledOut=True for this one"

    out, err = following.communicate(timeout=420)
    assert following.returncode == 0, err
    status = fleet.status("llama")
    assert status["phase"] == "Healthy" and status["stableRevision"] == canary != first
    lines = out.splitlines()
    assert any(f"canary {canary}" in line for line in lines), out  # it followed the canary to its end
    assert lines[-1].endswith(f"Healthy: RolloutComplete: serving revision {canary}")
    assert "\x1b" not in out

    _, kubectl_err = waiting.communicate(timeout=420)
    assert waiting.returncode == 0, kubectl_err
    rolled_out = next(c for c in fleet.status("llama")["conditions"] if c["type"] == "RolledOut")
    assert (
        rolled_out["status"] == "True"
        and rolled_out["observedGeneration"] == fleet.get("llama")["metadata"]["generation"]
    )


def test_a_bad_drafter_is_rolled_back_exit_1_with_the_reason_and_rolled_out_false(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, dev_cluster: ClusterInfo
) -> None:
    start_canary(fleet, {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}, stable=PLAIN)
    failed = kubectl_wait(fleet, "RolledOut=False")
    result = run(cli(dev_cluster, fleet.namespace, "status", "llama", "--wait", "--timeout", "6m"))
    assert result.returncode == 1, result.stdout + result.stderr
    reason = fleet.status("llama")["history"][-1]["reason"]
    assert "acceptance alpha" in reason and f"was rolled back: {reason}" in result.stderr
    assert result.stdout.splitlines()[-1].split(" ", 2)[2].startswith("RolledBack")
    _, kubectl_err = failed.communicate(timeout=420)
    assert failed.returncode == 0, kubectl_err


def test_a_rollout_at_a_gate_times_out_with_exit_2_a_retry_follows_its_canary_and_promote_ends_it(
    operator: Operator, fleet: Fleet, dev_cluster: ClusterInfo
) -> None:
    healthy(fleet, steps=GATE)
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    timed_out = run(cli(dev_cluster, fleet.namespace, "status", "llama", "--wait", "--timeout", "5s"))
    assert timed_out.returncode == 2, timed_out.stdout + timed_out.stderr
    assert "timed out after 5s" in timed_out.stderr

    canary = wait_for("the gate", fleet.phase_is("llama", "Paused"))["canaryRevision"]
    assert run(cli(dev_cluster, fleet.namespace, "abort", "llama")).returncode == 0
    wait_for("abort", fleet.phase_is("llama", "Aborted"))
    retried = run(cli(dev_cluster, fleet.namespace, "retry", "llama", "--wait", "--timeout", "30s"))
    assert retried.returncode == 2, retried.stdout + retried.stderr  # not 1: the abort it retries is not its end
    assert f"canary {canary}" in retried.stdout

    wait_for("the gate again", fleet.phase_is("llama", "Paused"))
    promoted = run(cli(dev_cluster, fleet.namespace, "promote", "llama", "--wait", "--timeout", "5m"))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert fleet.status("llama")["stableRevision"] == canary
