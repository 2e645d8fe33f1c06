"""Canaries judged from a real Prometheus scraping the vLLM fleet simulator, with the operator running.

Every moving part is real: kube-apiserver, scheduler, controllers, kwok nodes, Prometheus 2.42, the
operator process and the simulator process (which serves vLLM's metrics for the pods it sees). The
simulator's scenario states what each drafter has (its per-token acceptance alpha, the load), never the
number Prometheus should show; a test changes it at run time through its control endpoint.
"""

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from specfleet.render.argv import ITL_BUCKETS_FLAG
from specfleet_workshop.devcluster.cluster import ClusterInfo

from benchkit import PrivatePrometheus
from fleetkit import (
    EAGLE3_K5,
    GOOD_DRAFTER,
    OUTCOME_SECONDS,
    PLAIN,
    ROLLOUT,
    SCENARIO,
    Fleet,
    Operator,
    Simulator,
    canaried,
    promotion_of,
    running,
    sdep,
    start_canary,
    wait_for,
)

pytestmark = pytest.mark.integration


def last_outcome(fleet: Fleet) -> dict[str, Any]:
    return fleet.status("llama")["history"][-1]


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_a_good_eagle3_canary_against_a_plain_stable_is_promoted(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """alpha 0.8 at k 5: faster per token, though its per-step latency is higher and accepted/drafted < 0.6."""
    started = time.monotonic()
    canary = start_canary(fleet, EAGLE3_K5, stable=PLAIN)
    status = promotion_of(fleet, canary)
    print(f"\na good EAGLE-3 canary promoted {time.monotonic() - started:.0f} s after the change")
    analysis = status["lastAnalysis"]
    assert analysis["verdict"] == "Pass"
    measured, plain = analysis["canary"], analysis["stable"]
    assert measured["acceptanceAlpha"] == pytest.approx(0.8, abs=0.06)
    assert measured["acceptanceRate"] < 0.6  # the k-dependent ratio that used to roll it back
    assert len(measured["acceptancePerPosition"]) == 5
    assert measured["tokenLatencyP95Seconds"] < plain["tokenLatencyP95Seconds"]
    assert measured["stepLatencyP95Seconds"] > plain["stepLatencyP95Seconds"]  # a step emits several tokens
    assert "acceptanceAlpha" not in plain
    for track in (measured, plain):  # serving pressure, reported whatever the limits
        assert 0 <= track["kvCacheUsageMean"] <= track["kvCacheUsageMax"] <= 1
        assert track["queueTimeP95Seconds"] >= 0 and track["generationTokensPerPodPerSecond"] > 0
        assert track["servedFraction"] > 0.9  # both keep up with their load
        assert track["preemptionsPerSecond"] == 0  # the simulator never preempts (its counter stays 0)
    assert any(r.startswith("per-token p95") for r in analysis["reasons"])
    assert last_outcome(fleet)["outcome"] == "Promoted"


def test_the_same_drafter_at_alpha_0_3_is_rolled_back_with_the_evidence(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    start_canary(fleet, {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}, stable=PLAIN)
    status = wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=180)
    outcome = last_outcome(fleet)
    assert outcome["outcome"] == "RolledBack" and "acceptance alpha" in outcome["reason"], outcome
    assert "upper bound < 0.60" in outcome["reason"]
    assert outcome["acceptanceAlpha"] == pytest.approx(0.3, abs=0.08)
    assert status["lastAnalysis"]["verdict"] == "Fail"
    selector = fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector
    assert selector["specfleet.io/track"] == "stable"
    wait_for("the canary to go", lambda: "llama-canary" not in fleet.deployments())


def logged_rollback(log: Path) -> bool:
    """Whether an operator logging JSON wrote a line whose message tells of a rollback."""
    complete = log.read_text().split("\n")[:-1]  # the last piece may still be being written
    lines = [json.loads(line) for line in complete if line.startswith("{")]
    return any("RolledBack" in line.get("message", "") for line in lines)


def test_tokens_never_leave_their_secrets(
    dev_cluster: ClusterInfo, crd_installed: None, simulator: Simulator, fleet: Fleet, tmp_path: Path
) -> None:
    """A Prometheus bearer token and an HF token in Secrets, two canaries rolled back (one judged by an
    operator logging JSON, one by an operator logging every reconcile for people): neither token appears
    in the operator's logs, Events, status, `kubectl specfleet status` or the simulator's output."""
    tokens = {"prom-token": f"sf-prom-{uuid.uuid4().hex}", "hf-token": f"hf_{uuid.uuid4().hex}"}
    for name, token in tokens.items():
        fleet.core.create_namespaced_secret(
            fleet.namespace, {"metadata": {"name": name}, "stringData": {"token": token}}
        )
    prometheus = {"url": dev_cluster.prometheus_url, "authSecret": {"name": "prom-token", "key": "token"}}
    bad = {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}
    logs = [tmp_path / "operator-json.log", tmp_path / "operator-human.log"]
    # the spec names the operator's own Prometheus: its allow-list admits it, so the token is sent there
    url = dev_cluster.prometheus_url
    operator = Operator(dev_cluster, fleet.namespace, logs[0], url, extra=("--log-format", "json"))
    operator.start()
    try:
        fleet.apply(
            sdep(
                rollout=ROLLOUT,
                speculative=PLAIN,
                prometheus=prometheus,
                storage={"hfTokenSecret": {"name": "hf-token"}},
            )
        )
        wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)
        fleet.patch_spec("llama", {"speculative": bad})
        wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=180)
        # the pass logs its events after the status and children writes: stopping the operator on the status
        # alone could interrupt it before that line
        wait_for("the JSON operator to log the rollback", lambda: logged_rollback(logs[0]), timeout=60)
    finally:
        operator.stop()
    operator = Operator(dev_cluster, fleet.namespace, logs[1], url, extra=("--verbose",))
    operator.start()
    try:
        fleet.patch_spec("llama", {"speculative": {**bad, "numSpeculativeTokens": 3}})
        wait_for("a second rollback", lambda: len(canaried(fleet.status("llama"))) >= 2, timeout=180)
    finally:
        operator.stop()
    assert [h["outcome"] for h in canaried(fleet.status("llama"))][-2:] == ["RolledBack", "RolledBack"]
    events = fleet.core.list_namespaced_event(fleet.namespace).items
    plugin = fleet.specfleet("status", "llama")
    assert plugin.returncode == 0 and "RolledBack" in plugin.stdout, plugin.stderr
    seen = {
        "operator logs": "".join(log.read_text() for log in logs),
        "events": "\n".join(f"{e.reason} {e.message}" for e in events),
        "status": json.dumps(fleet.get("llama")),
        "kubectl specfleet status": plugin.stdout + plugin.stderr,
        "simulator": (tmp_path / "sim.log").read_text(),
    }
    assert len(events) >= 4 and "RolledBack" in seen["events"]
    for where, text in seen.items():
        for token in tokens.values():
            assert token not in text, f"a token appears in the {where}"


TABLE_ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 50, "pause": {"duration": "60s"}}],
    "analysis": {"interval": "5s", "window": "30s"},
}
"""The settings a new user writes first: one 50% step with a 60 s pause, every guardrail and
fallback at its default."""


def table_canary(fleet: Fleet, simulator: Simulator, canary: dict[str, Any], scenario: dict[str, Any]) -> str:
    """Llama-3.1-8B on 4 MI300X replicas at 4 requests/s per pod, serving EAGLE-3 k=5; then `canary`."""
    simulator.put({**scenario, "defaults": {**scenario["defaults"], "load": 4.0}})
    fleet.apply(sdep(replicas=4, rollout=TABLE_ROLLOUT, speculative=EAGLE3_K5))
    old = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": canary})
    return wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != old and c)


def test_a_canary_failing_5_percent_of_requests_is_rolled_back_not_promoted(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """The same drafter, whose canary pods fail 1 request in 20: 240 requests used to be enough to promote it."""
    failing = {"target": "*", "drafter": GOOD_DRAFTER, "track": "canary", "error_rate": 0.05}
    started = time.monotonic()
    table_canary(fleet, simulator, {**EAGLE3_K5, "revision": "v2"}, {**SCENARIO, "pairs": [failing]})
    wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=600)
    print(f"\n5% errors rolled back {time.monotonic() - started:.0f} s after the change")
    outcome = last_outcome(fleet)
    assert "error rate" in outcome["reason"] and "lower bound > limit 1.00%" in outcome["reason"], outcome
    assert [h["outcome"] for h in canaried(fleet.status("llama"))] == ["RolledBack"]


def test_the_good_drafter_at_k1_against_a_k5_stable_is_rolled_back_on_the_mean_per_token_latency(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """alpha 0.8 at the simulator's default acceptance spread: k=1 is much slower per token on average (the
    oracle: 3.37 vs 2.16 ms), while its p95 moves little (the worst-guessed prompts gain least from any k)."""
    started = time.monotonic()
    table_canary(fleet, simulator, {**EAGLE3_K5, "numSpeculativeTokens": 1}, SCENARIO)
    wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=600)
    print(f"\nk=1 vs k=5 rolled back {time.monotonic() - started:.0f} s after the change")
    outcome = last_outcome(fleet)
    assert "per-token mean" in outcome["reason"] and "lower bound > limit 5%" in outcome["reason"], outcome
    assert "acceptance alpha" not in outcome["reason"]  # acceptance was fine: latency decided
    assert outcome["acceptanceAlpha"] == pytest.approx(0.8, abs=0.06)


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_an_a_a_canary_is_promoted_not_rolled_back(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    fleet.apply(sdep(rollout=ROLLOUT, speculative=EAGLE3_K5))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    started = time.monotonic()
    fleet.patch_spec("llama", {"engine": {"tensorParallelSize": 2, "env": [{"name": "SPECFLEET_AA", "value": "1"}]}})
    canary = wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != stable and c)
    promotion_of(fleet, canary)
    print(f"\nan A/A canary promoted {time.monotonic() - started:.0f} s after the change")


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_an_a_a_canary_keeps_up_with_stable_under_the_throughput_and_kv_guardrails(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """Same config, same load per pod: both tracks complete what they are offered, with room in the KV cache."""
    guardrails = {**ROLLOUT["guardrails"], "maxThroughputDrop": 0.1, "maxKvCacheUsage": 0.95}
    fleet.apply(sdep(rollout={**ROLLOUT, "guardrails": guardrails}, speculative=EAGLE3_K5))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"engine": {"tensorParallelSize": 2, "env": [{"name": "SPECFLEET_AA", "value": "1"}]}})
    canary = wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != stable and c)
    status = promotion_of(fleet, canary)
    reasons = status["lastAnalysis"]["reasons"]
    assert any(r.startswith("completed") and "limit 10%" in r for r in reasons), reasons
    assert any(r.startswith("KV-cache usage") and "ceiling 95%" in r for r in reasons), reasons


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_an_a_a_canary_is_judged_on_its_time_to_first_token(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """`maxTimeToFirstTokenP95Regression` reads the simulator's TTFT histogram through Prometheus into a check in
    status; with both tracks on buckets 10% wide (vLLM's own are too coarse for a 20% limit) an A/A canary is not
    failed on it. The flag, one argv element of at most 1,024 characters, then holds only the TTFT buckets."""
    ttft = [float(f"{0.001 * 1.1**i:.4g}") for i in range(105)]  # 1 ms to 20 s
    fine = json.dumps({"time_to_first_token": ttft}, separators=(",", ":"))
    engine = {"tensorParallelSize": 2, "extraArgs": [ITL_BUCKETS_FLAG, fine]}
    guardrails = {**ROLLOUT["guardrails"], "maxTimeToFirstTokenP95Regression": 0.2}
    fleet.apply(sdep(rollout={**ROLLOUT, "guardrails": guardrails}, speculative=EAGLE3_K5, engine=engine))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"engine": {**engine, "env": [{"name": "SPECFLEET_AA", "value": "1"}]}})
    canary = wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != stable and c)

    def ttft_check() -> dict[str, Any] | None:
        analysis = fleet.status("llama").get("lastAnalysis") or {}
        if analysis.get("revision") != canary:
            return None
        named = [c for c in analysis.get("checks", []) if c["guardrail"] == "maxTimeToFirstTokenP95Regression"]
        return named[0] if named and named[0].get("estimate") is not None else None

    check = wait_for("an analysis with the TTFT check's estimate", ttft_check, timeout=OUTCOME_SECONDS)
    print(f"\nTTFT check of an A/A canary: {check}")
    assert check["verdict"] != "Fail", check
    assert check["limit"] == 0.2


def test_a_drafter_that_turns_bad_after_the_first_step_is_caught(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    rollout = {
        **ROLLOUT,
        "steps": [{"weight": 25, "pause": {"duration": "1s"}}, {"weight": 50, "pause": {"duration": "5m"}}],
    }
    fleet.apply(sdep(rollout=rollout, speculative=EAGLE3_K5))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    # a new revision that serves as stable does (the drafter's revision moves, its weights do not): the first
    # step is shown within every limit on any machine, then the drafter turns bad
    fleet.patch_spec("llama", {"speculative": {"revision": "v2"}})
    wait_for("step 2", lambda: fleet.status("llama").get("currentStep") == 1, timeout=420)
    simulator.put(
        {**SCENARIO, "pairs": [{"target": "*", "drafter": "yuhuili/*", "track": "canary", "acceptance": 0.25}]}
    )
    wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=180)
    assert fleet.status("llama")["stableRevision"] == stable
    assert "acceptance alpha" in last_outcome(fleet)["reason"]


def test_prometheus_going_away_holds_the_rollout_then_follows_the_policy(
    crd_installed: None, simulator: Simulator, fleet: Fleet, dev_cluster: ClusterInfo, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    with (
        PrivatePrometheus(dev_cluster.file_sd_dir, tmp_path) as prometheus,
        # the spec names a Prometheus of the test's own: the operator asks it once its allow-list admits it
        running(Operator(dev_cluster, fleet.namespace, log, extra=("--allow-prometheus-url", prometheus.url))),
    ):
        # a pause no run outlasts: the Pass must not end the step (a Pass after a 5m pause promoted at once)
        rollout = {**ROLLOUT, "steps": [{"weight": 50, "pause": {"duration": "1h"}}]}
        fleet.apply(sdep(rollout=rollout, prometheus={"url": prometheus.url}))
        stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
        # an A/A change: a Pass needs the canary shown within every guardrail (k=3 against k=4 is not surely)
        same = {"engine": {"tensorParallelSize": 2, "env": [{"name": "SPECFLEET_AA", "value": "1"}]}}
        fleet.patch_spec("llama", same)
        wait_for(
            "a passing analysis",
            lambda: (fleet.status("llama").get("lastAnalysis") or {}).get("verdict") == "Pass",
            timeout=360,
        )
        prometheus.stop()
        held = wait_for(
            "an Error verdict",
            lambda: (s := fleet.status("llama")).get("lastAnalysis", {}).get("verdict") == "Error" and s,
            timeout=60,
        )
        assert held["phase"] == "Progressing" and held["stableRevision"] == stable  # held, never promoted
        assert "Prometheus" in held["lastAnalysis"]["reasons"][0]
        wait_for("the onProviderError policy (Rollback after 20s)", fleet.phase_is("llama", "RolledBack"), timeout=90)
        assert "Prometheus errors for 20s" in last_outcome(fleet)["reason"]
