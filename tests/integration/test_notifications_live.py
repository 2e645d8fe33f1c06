"""Notifications from the operator (`specfleet run`, a real process) on the real dev cluster, to receivers on
loopback (aiohttp servers in this test): a rollback's CloudEvent, each transition once across a SIGKILL and a
restart, a namespace's target refused by the allow-list, and receivers that are down or slow holding no pass.

The rollbacks are unguarded (no Prometheus): an OOM-killed canary pod, read from the API server."""

import collections
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import Fleet, Operator, healthy, oom_killed, running, wait_for
from receiverkit import Received, dead_port, receiving

pytestmark = pytest.mark.integration

TOKEN = "Zq7tokenOfTheHook4411"
GATE = [{"weight": 50, "pause": {}}]


def targets_file(tmp_path: Path, *urls: str) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"targets": [{"sink": "webhook", "url": url} for url in urls]}))
    return path


def events(received: list[Received]) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in received]


def rolled_back_at_its_gate(fleet: Fleet) -> str:
    """A healthy fleet whose k changes, its canary at the manual gate, OOM-killed: rolled back. The canary."""
    healthy(fleet, steps=GATE)
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    canary = wait_for("the canary at its gate", fleet.phase_is("llama", "Paused"))["canaryRevision"]
    (pod, *_) = fleet.pods(f"specfleet.io/track=canary,specfleet.io/revision={canary}")
    oom_killed(fleet, pod.metadata.name, pod.spec.containers[0].name)
    wait_for("the rollback", fleet.phase_is("llama", "RolledBack"))
    return str(canary)


def test_a_rollback_is_one_cloudevent_and_a_restarted_operator_sends_no_transition_twice(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path, fleet: Fleet
) -> None:
    fleet.unguarded = True
    with receiving() as hook, receiving() as tenant_hook:
        tenant_url = (
            f"http://127.0.0.1:{tenant_hook.port}/tenant/{TOKEN}"  # an internal host, as far as the operator knows
        )
        fleet.kubectl("create", "secret", "generic", "specfleet-notifications",
                      f"--from-literal=targets.yaml=targets: [{{sink: webhook, url: '{tenant_url}'}}]")  # fmt: skip
        extra = (
            "--notifications-config", str(targets_file(tmp_path, f"http://127.0.0.1:{hook.port}/hook/{TOKEN}")),
            "--namespace-notifications", "--allow-notification-url", "https://hooks.example.com/specfleet",
        )  # fmt: skip
        operator = Operator(dev_cluster, namespace, tmp_path / "operator.log", extra=extra)
        with running(operator):
            canary = rolled_back_at_its_gate(fleet)
            first = events(hook.wait_for(3, timeout=60))
            assert collections.Counter(e["type"].rpartition(".")[2] for e in first) == {
                "StepAdvanced": 1, "GateWaiting": 1, "RolledBack": 1,
            }  # fmt: skip
            (rolled_back,) = [e for e in first if e["type"] == "io.specfleet.rollout.RolledBack"]
            data = rolled_back["data"]
            assert data["canary"]["revision"] == canary and data["stable"]["revision"] != canary
            assert data["fleet"]["namespace"] == namespace and data["fleet"]["name"] == "llama"
            assert "OOMKilled" in data["message"] and data["phase"] == "RolledBack"
            assert rolled_back["source"].endswith(f"/namespaces/{namespace}/speculativedeployments/llama")

            operator.kill()  # SIGKILL: whatever was queued is gone, what the status records stays
            operator.start()
            fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
            wait_for("the next canary at its gate", fleet.phase_is("llama", "Paused"))
            second = events(hook.wait_for(5, timeout=60))
        log = operator.log.read_text()
    assert collections.Counter(e["type"].rpartition(".")[2] for e in second) == {
        "StepAdvanced": 2, "GateWaiting": 2, "RolledBack": 1,
    }  # fmt: skip
    assert len({e["id"] for e in second}) == 5
    assert tenant_hook.received == []
    refused = fleet.core.list_namespaced_event(namespace, field_selector="reason=NotificationTargetRefused").items
    assert len(refused) == 2  # told once by each operator process, the first and the restarted one
    assert all(e.type == "Warning" and "targets[0].url" in e.message and TOKEN not in e.message for e in refused)
    assert "specfleet-notifications targets.yaml: targets[0].url" in log and "is not admitted" in log
    assert TOKEN not in log


def reconcile_seconds(port: int) -> tuple[float, float]:
    """The operator's reconciles: how many took at most 10 s, and how many there were."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("specfleet_reconcile_dur"))
    return float(samples['specfleet_reconcile_duration_seconds_bucket{le="10.0"}']), float(
        samples["specfleet_reconcile_duration_seconds_count"]
    )


def test_a_dead_and_a_slow_receiver_hold_no_pass_and_are_retried_then_given_up(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path, fleet: Fleet
) -> None:
    """The slow receiver holds every request 30 s and each attempt is cut at 12 s: a pass that waited for one would
    take over 10 s. None does, while the slow one is tried twice per transition and the dead one given up."""
    fleet.unguarded = True
    metrics, dead = dead_port(), dead_port()
    with receiving(delay=30.0) as slow:
        extra = (
            "--notifications-config",
            str(targets_file(tmp_path, f"http://127.0.0.1:{dead}/hook/{TOKEN}", f"http://127.0.0.1:{slow.port}/h")),
            "--notification-attempts", "2", "--notification-timeout", "12", "--metrics-port", str(metrics),
        )  # fmt: skip
        operator = Operator(dev_cluster, namespace, tmp_path / "operator.log", extra=extra)
        with running(operator):
            rolled_back_at_its_gate(fleet)
            within, passes = reconcile_seconds(metrics)
            attempts = events(slow.wait_for(6, timeout=240))
            given_up = f"RolledBack of {namespace}/llama to webhook http://127.0.0.1:{dead}/[…] (operator#0): could "
            given_up += "not be reached (ConnectionError); given up after 2 attempts"
            log = wait_for(
                "the dead receiver given up for the rollback",
                lambda: given_up in (text := operator.log.read_text()) and text,
                timeout=240,
            )
    assert passes > 5 and within == passes, f"{passes - within} of {passes} passes took over 10 s"
    by_id = collections.Counter(e["id"] for e in attempts)
    assert sorted(by_id.values()) == [2, 2, 2]  # each transition: cut at the timeout, retried once, same id
    assert TOKEN not in log
