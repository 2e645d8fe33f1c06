"""The judge against a real Prometheus whose data is disturbed: vLLM's counters reset mid-step (a container
restart), and a Prometheus that stops scraping while the operator keeps asking it.

Every part is real (API server, Prometheus, the operator and the simulator as processes); the scenario states
what the drafters have (alpha, the load), and the faults are what a cluster does to the metrics: a restarted
vLLM counts from 0 under the same series, a target Prometheus no longer scrapes leaves old samples behind.
"""

import json
import signal
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specfleet.metrics import names
from specfleet.metrics.prometheus import Prometheus
from specfleet.metrics.promql import TrackSelector
from specfleet_workshop.devcluster.cluster import ClusterInfo

from benchkit import PrivatePrometheus
from fleetkit import (
    EAGLE3_K5,
    OUTCOME_SECONDS,
    PLAIN,
    ROLLOUT,
    SCENARIO,
    Fleet,
    Operator,
    Simulator,
    canaried,
    outcome_of,
    sdep,
    wait_for,
)

pytestmark = pytest.mark.integration

LOAD = SCENARIO["defaults"]["load"]
"""Requests offered per second to each pod (the scenario's)."""
RESET_ROLLOUT: dict[str, Any] = {**ROLLOUT, "analysis": {**ROLLOUT["analysis"], "interval": "60s", "window": "10s"}}
"""One analysis a minute, and a window too short for the watch's trailing ranges (two scrapes and more): the
counters are reset before anything can judge the canary, so every verdict stands on a reset."""


def sim_pods(simulator: Simulator, namespace: str, track: str) -> list[str]:
    """The Ready pods of `track` the simulator runs an engine for."""
    with urllib.request.urlopen(f"{simulator.url}/pods", timeout=60) as answer:
        pods = json.load(answer)
    return sorted(p["pod"] for p in pods if p["namespace"] == namespace and p["track"] == track and p["ready"])


def restart(simulator: Simulator, namespace: str, pod: str) -> None:
    """vLLM in `pod` starts again: its counters and histograms from 0."""
    request = urllib.request.Request(f"{simulator.url}/pods/{namespace}/{pod}/restart", method="POST")
    assert urllib.request.urlopen(request, timeout=60).status == 200


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def numbers(measured: dict[str, Any]) -> list[float]:
    values = [v for v in measured.values() if isinstance(v, int | float)]
    return values + [x for v in measured.values() if isinstance(v, list) for x in v]


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
@pytest.mark.parametrize(("drafter", "alpha", "outcome"), [(EAGLE3_K5["model"], 0.8, "Promoted"),
                                                           ("bad/EAGLE3-drafter", 0.3, "RolledBack")])  # fmt: skip
def test_counters_that_reset_mid_step_are_counted_across_the_reset(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, drafter: str, alpha: float, outcome: str
) -> None:
    """Every pod of both tracks restarts vLLM once the canary's series has samples: the verdict that ends the
    canary, an analysis over the step's whole evidence, reads the counters after they dropped and holds the
    reset, and its counts are the load the pods were offered (Prometheus' `increase` takes a drop as a reset; a
    difference of raw values would go negative)."""
    fleet.apply(sdep(rollout=RESET_ROLLOUT, speculative=PLAIN))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {**EAGLE3_K5, "model": drafter}})
    canary = wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != stable and c)
    provider = Prometheus(fleet.cluster.prometheus_url)
    selector = TrackSelector(fleet.namespace, "llama", "canary", canary)
    series = f'{names.REQUEST_SUCCESS}{selector.matchers()[:-1]},finished_reason="stop"}}'
    wait_for(
        "three scrapes of the canary",
        lambda: (provider.scalar(f"min(count_over_time({series}[1m]))") or 0) >= 3,
        timeout=120,
    )
    pods = {track: sim_pods(simulator, fleet.namespace, track) for track in ("canary", "stable")}
    assert pods["canary"] and pods["stable"], pods
    reset = time.time()
    for pod in pods["canary"] + pods["stable"]:
        restart(simulator, fleet.namespace, pod)
    every = f'{names.REQUEST_SUCCESS}{{namespace="{fleet.namespace}",finished_reason="stop"}}'
    wait_for(  # Prometheus saw every pod's counter drop
        "the resets scraped",
        lambda: provider.scalar(f"count(resets({every}[1m]) > 0)") == len(pods["canary"] + pods["stable"]),
        timeout=60,
    )
    status = outcome_of(fleet)
    ended = canaried(status)[-1]
    assert ended["outcome"] == outcome, ended
    analysis = status["lastAnalysis"]
    assert analysis["revision"] == canary and analysis["verdict"] == ("Pass" if outcome == "Promoted" else "Fail")
    decided = at(analysis["time"])
    assert reset < decided, (reset, analysis)  # the verdict read counters that had dropped
    assert decided - analysis["evidenceSeconds"] < reset, (reset, analysis)  # over the step, across the reset
    if outcome == "RolledBack":
        assert "acceptance alpha" in ended["reason"], ended
    for track in ("canary", "stable"):
        measured = analysis[track]
        assert all(v >= 0 for v in numbers(measured)), measured  # no negative increase anywhere
        assert measured["requestsPerPodPerSecond"] == pytest.approx(LOAD, rel=0.3), measured
        assert 0.9 < measured["servedFraction"] <= 1.1, measured
        assert not measured.get("errorRate"), measured
    assert analysis["canary"]["acceptanceAlpha"] == pytest.approx(alpha, abs=0.08)


STALE_AFTER = 30.0
"""How far behind the analysis time a track's newest sample may be (`analysis.STALE_SECONDS` at the dev
cluster's 5 s scrapes)."""


@pytest.mark.timeout(OUTCOME_SECONDS)
def test_a_prometheus_lagging_behind_holds_the_canary_instead_of_passing_on_old_samples(
    crd_installed: None, dev_cluster: ClusterInfo, fleet: Fleet, tmp_path: Path
) -> None:
    """The operator asks a Prometheus fed by a Prometheus agent's remote writes, as many clusters are set up.
    The agent stops (SIGSTOP: its scrapes and writes stop, nothing marks the series stale); the store answers
    on with what it has, which was evidence enough to pass the canary. Once its newest samples are older than
    the analysis time allows, every analysis is Inconclusive and says how old they are (onNoData counts),
    never a Pass; when the agent goes on, the canary passes again."""
    targets = tmp_path / "targets"
    targets.mkdir()
    simulator = Simulator(dev_cluster, fleet.namespace, tmp_path, extra=("--file-sd-dir", str(targets)))
    operator: Operator | None = None
    try:
        with (
            PrivatePrometheus(None, tmp_path / "store") as store,
            PrivatePrometheus(targets, tmp_path / "agent", remote_write=f"{store.url}/api/v1/write") as agent,
        ):
            # the operator's own Prometheus is the store: every fleet without a URL of its own is judged there
            operator = Operator(dev_cluster, fleet.namespace, tmp_path / "operator.log", prometheus_url=store.url)
            operator.start()
            # a pause no run outlasts: a Pass does not end the step, so the judge keeps looking
            rollout = {**ROLLOUT, "steps": [{"weight": 50, "pause": {"duration": "1h"}}]}
            fleet.apply(sdep(rollout=rollout))
            stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
            # an A/A change, which the judge passes once the evidence shows it within every guardrail
            fleet.patch_spec("llama", {"engine": {"tensorParallelSize": 2, "env": [{"name": "SF_AA", "value": "1"}]}})
            wait_for("a passing analysis", lambda: last_verdict(fleet) == "Pass", timeout=480)
            agent.process.send_signal(signal.SIGSTOP)
            try:
                looks = Looks(fleet, since=time.time() + STALE_AFTER)
                wait_for("three analyses on stale samples", lambda: looks.made(3), timeout=180)
            finally:
                agent.process.send_signal(signal.SIGCONT)
            assert [a["verdict"] for a in looks.made(3) or []] == ["Inconclusive"] * 3, looks.made(3)
            for look in looks.made(3) or []:
                assert any("newest sample" in r and "s old" in r for r in look["reasons"]), look["reasons"]
            status = fleet.status("llama")
            assert status["phase"] == "Progressing" and status["stableRevision"] == stable
            assert status["noDataSeconds"] > 0  # onNoData's clock runs
            wait_for("a Pass once the agent goes on", lambda: last_verdict(fleet) == "Pass", timeout=120)
    finally:
        if operator is not None:
            operator.stop()
        simulator.stop()


def last_verdict(fleet: Fleet) -> str | None:
    return (fleet.status("llama").get("lastAnalysis") or {}).get("verdict")


class Looks:
    """The fleet's analyses made after `since`, gathered by polling (status keeps the last one only)."""

    def __init__(self, fleet: Fleet, since: float) -> None:
        self.fleet, self.since = fleet, since
        self.seen: dict[str, dict[str, Any]] = {}

    def made(self, count: int) -> list[dict[str, Any]] | None:
        """The first `count` of them, once there are that many."""
        analysis = self.fleet.status("llama").get("lastAnalysis") or {}
        if analysis.get("time") and at(analysis["time"]) > self.since:
            self.seen.setdefault(analysis["time"], analysis)
        looks = [self.seen[t] for t in sorted(self.seen)]
        return looks[:count] if len(looks) >= count else None
