"""The simulator's shell without a cluster: HTTP routes, run-time scenario control, file_sd targets."""

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.metrics import names
from specfleet.render.manifests import Track
from specfleet_workshop.fleetpods.loopback import ListenError, parse_listen
from specfleet_workshop.sim import Simulator, model
from specfleet_workshop.sim.scenario import load_scenario

from simkit import MI325X_NODE, example_pod, wait_for

K = 4
"""The example's num_speculative_tokens."""


def predicted_rate(acceptance: float, spread: float = 0.1) -> float:
    """accepted / drafted the model predicts for the example's EAGLE-3 drafter with this alpha."""
    return model.expected_drafts(acceptance, spread, 1.0, K, ((K, 1.0),)).acceptance_rate


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(url: str, method: str = "GET", body: str | None = None) -> tuple[int, str]:
    data = body.encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(tmp_path: Path, clock: FakeClock) -> Iterator[Simulator]:
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text("defaults: {acceptance: 0.6}\n")
    simulator = Simulator(
        load_scenario(scenario_file.read_text()),
        file_sd_dir=tmp_path,
        listen=("127.0.0.1", 0),
        seed=3,
        scenario_file=scenario_file,
        clock=clock,
    )
    with simulator:
        yield simulator


def targets(sim: Simulator) -> list[dict[str, Any]]:
    assert sim.targets_file is not None
    return json.loads(sim.targets_file.read_text())


@pytest.mark.parametrize("text", ["127.0.0.1:18000", "localhost:0", "127.0.0.2:9"])
def test_listen_accepts_loopback(text: str) -> None:
    host, port = parse_listen(text)
    assert host.startswith("127.") and 0 <= port <= 65535


@pytest.mark.parametrize("text", ["0.0.0.0:18000", "10.1.2.3:80", "[::1]:80", "example.com:80", "127.0.0.1", "a:b"])
def test_listen_refuses_anything_else(text: str) -> None:
    with pytest.raises(ListenError):
        parse_listen(text)


def test_a_ready_pod_is_a_target_with_podmonitor_labels_and_serves_vllm_metrics(
    sim: Simulator, clock: FakeClock
) -> None:
    sim.upsert_pod(example_pod("p1"), MI325X_NODE)
    [group] = targets(sim)
    assert group["targets"] == [sim.address]
    labels = group["labels"]
    assert labels["__metrics_path__"] == "/pods/team/p1/metrics"
    assert {labels[names.NAMESPACE], labels[names.POD], labels[names.TRACK], labels[names.SDEP]} == {
        "team",
        "p1",
        "canary",
        "llama-8b-eagle3",
    }
    assert labels[names.REVISION] and labels["instance"] == "10.64.0.7:8000"
    clock.now += 30
    status, body = request(sim.url + labels["__metrics_path__"])
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body)}
    drafted = families[names.DRAFT_TOKENS.removesuffix("_total")].samples[0].value
    accepted = families[names.ACCEPTED_TOKENS.removesuffix("_total")].samples[0].value
    assert drafted > 1000 and accepted / drafted == pytest.approx(predicted_rate(0.6), abs=0.05)
    assert predicted_rate(0.6) < 0.5  # accepted / drafted at k = 4 is well below alpha


def test_a_loading_pod_is_scraped_but_answers_503_and_an_unknown_one_404(sim: Simulator) -> None:
    sim.upsert_pod(example_pod("p1", ready=False), MI325X_NODE)
    assert len(targets(sim)) == 1
    assert request(sim.url + "/pods/team/p1/metrics")[0] == 503
    assert request(sim.url + "/pods/team/nope/metrics")[0] == 404
    sim.upsert_pod(example_pod("p1"), MI325X_NODE)
    assert request(sim.url + "/pods/team/p1/metrics")[0] == 200


def test_scrape_faults_break_only_the_matching_pods_endpoint_while_its_engine_runs_on(
    sim: Simulator, clock: FakeClock
) -> None:
    sim.upsert_pod(example_pod("web-canary-1"), MI325X_NODE)
    sim.upsert_pod(example_pod("web-stable-1", track=Track.STABLE), MI325X_NODE)
    clock.now += 10
    before = drafted_tokens(request(sim.url + "/pods/team/web-canary-1/metrics")[1])
    faults = "scrape_faults: [{pod: 'team/web-canary-*', answer: error}, {pod: '*/web-stable-1', answer: garbage}]"
    assert request(sim.url + "/scenario", "PUT", faults)[0] == 200
    clock.now += 20
    assert request(sim.url + "/pods/team/web-canary-1/metrics")[0] == 500
    status, body = request(sim.url + "/pods/team/web-stable-1/metrics")
    assert status == 200
    with pytest.raises(ValueError):  # what Prometheus would fail to parse too
        list(text_string_to_metric_families(body))
    assert request(sim.url + "/scenario", "PUT", "{}")[0] == 200
    after = drafted_tokens(request(sim.url + "/pods/team/web-canary-1/metrics")[1])
    assert after > before + 1000  # the 20 s without a scrape were simulated all the same


def test_a_restarted_pod_counts_from_zero_under_the_same_target_while_its_engine_serves_on(
    sim: Simulator, clock: FakeClock
) -> None:
    sim.upsert_pod(example_pod("web-canary-1"), MI325X_NODE)
    clock.now += 30
    before = drafted_tokens(request(sim.url + "/pods/team/web-canary-1/metrics")[1])
    assert request(sim.url + "/pods/team/web-canary-1/restart", "POST")[0] == 200
    assert drafted_tokens(request(sim.url + "/pods/team/web-canary-1/metrics")[1]) == 0  # vLLM starts again from 0
    clock.now += 30
    after = drafted_tokens(request(sim.url + "/pods/team/web-canary-1/metrics")[1])
    assert 0.5 * before < after < 1.5 * before  # the same load on a fresh engine: a reset, not a stall
    assert [g["labels"][names.POD] for g in targets(sim)] == ["web-canary-1"]  # the same series, reset
    assert request(sim.url + "/pods/team/nope/restart", "POST")[0] == 404
    sim.upsert_pod(example_pod("loading", ready=False), MI325X_NODE)
    assert request(sim.url + "/pods/team/loading/restart", "POST")[0] == 404


def drafted_tokens(body: str) -> float:
    families = {f.name: f for f in text_string_to_metric_families(body)}
    return families[names.DRAFT_TOKENS.removesuffix("_total")].samples[0].value


def test_pods_that_stop_running_or_vanish_lose_their_targets(sim: Simulator) -> None:
    sim.upsert_pod(example_pod("p1"), MI325X_NODE)
    sim.upsert_pod(example_pod("p2", track=Track.STABLE), MI325X_NODE)
    sim.upsert_pod(example_pod("p3"), MI325X_NODE)
    assert len(targets(sim)) == 3
    sim.upsert_pod(example_pod("p1", phase="Succeeded"), MI325X_NODE)
    sim.remove_pod("team", "p2")
    assert [g["labels"][names.POD] for g in targets(sim)] == ["p3"]
    sim.replace_pods("team", [(example_pod("p4"), MI325X_NODE)])
    assert [g["labels"][names.POD] for g in targets(sim)] == ["p4"]
    sim.replace_pods("elsewhere", [])
    assert len(targets(sim)) == 1


def test_unreadable_pods_are_skipped(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    broken = example_pod("p1")
    broken["spec"]["containers"][0]["args"] = ["m", "--speculative-config", "{not json"]
    sim.upsert_pod(broken, MI325X_NODE)
    assert targets(sim) == []
    assert "not simulating team/p1" in caplog.text


def test_describe_shows_the_match_and_the_gpu(sim: Simulator) -> None:
    sim.upsert_pod(example_pod("p1"), MI325X_NODE)
    sim.upsert_pod(example_pod("p2"), {})
    status, body = request(sim.url + "/pods")
    described = {entry["pod"]: entry for entry in json.loads(body)}
    assert status == 200
    assert described["p1"]["gpu"] == "MI325X" and described["p2"]["gpu"] == "MI300X"  # unknown node: the fallback
    assert (described["p1"]["acceptance"], described["p1"]["acceptance_spread"]) == (0.6, 0.1)
    assert described["p1"]["expected_acceptance_rate"] == pytest.approx(predicted_rate(0.6))
    assert described["p1"]["per_position_acceptance"] == pytest.approx([0.6] * K)
    assert described["p1"]["expected_per_position_acceptance"][0] < 0.6  # drafts weight slow requests more
    assert described["p1"]["expected_draft_tokens"] == K
    assert described["p1"]["draft_pass_overhead_seconds"] == pytest.approx(0.0002)
    assert described["p1"]["method"] == "eagle3" and described["p1"]["k"] == K


def test_put_scenario_replaces_the_document_and_bad_ones_are_refused(sim: Simulator, clock: FakeClock) -> None:
    sim.upsert_pod(example_pod("p1"), MI325X_NODE)
    clock.now += 20
    status, body = request(sim.url + "/scenario", "PUT", "pairs: [{target: '*', drafter: eagle3, acceptance: 0.3}]")
    assert status == 200 and "acceptance: 0.3" in body
    assert "acceptance: 0.3" in request(sim.url + "/scenario")[1]
    described = json.loads(request(sim.url + "/pods")[1])[0]
    assert described["expected_acceptance_rate"] == pytest.approx(predicted_rate(0.3))
    status, body = request(sim.url + "/scenario", "PUT", "pairs: [{target: '*', acceptance: 7}]")
    assert status == 400 and "pairs[0].acceptance" in body
    status, body = request(sim.url + "/scenario", "PUT", "pairs: [{target: '*', acceptance_rate: 0.5}]")
    assert status == 400 and "pairs[0]: acceptance_rate is not a knob" in body
    assert "acceptance: 0.3" in request(sim.url + "/scenario")[1]
    assert request(sim.url + "/elsewhere", "PUT", "")[0] == 404


def test_the_scenario_file_is_reloaded_when_it_changes(sim: Simulator, tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("defaults: {acceptance: 0.25, load: 1}\n")
    wait_for("the reload", lambda: sim.scenario.defaults.acceptance == 0.25, timeout=10.0)
    (tmp_path / "scenario.yaml").write_text("defaults: {acceptance: 9}\n")  # invalid: the last good one stays
    assert not sim.reload_scenario_file()
    assert sim.scenario.defaults.acceptance == 0.25


def test_stop_removes_the_targets_file(tmp_path: Path) -> None:
    simulator = Simulator(load_scenario(""), file_sd_dir=tmp_path, listen=("127.0.0.1", 0)).start()
    simulator.upsert_pod(example_pod("p1"), MI325X_NODE)
    assert simulator.targets_file is not None and simulator.targets_file.exists()
    path = simulator.targets_file
    simulator.stop()
    assert not path.exists()
    simulator.upsert_pod(example_pod("p2"), MI325X_NODE)
    assert not path.exists()


def test_healthz_and_unknown_paths(sim: Simulator) -> None:
    assert request(sim.url + "/healthz") == (200, "ok\n")
    assert request(sim.url + "/nope")[0] == 404


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "0.0.0.0:18000"], "not an IPv4 loopback address"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "no usable kubeconfig"),
    ],
)
def test_cli_refuses_bad_settings(tmp_path: Path, args: list[str], message: str) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("pairs: []\n")
    result = CliRunner().invoke(app, ["sim", "--scenario", str(scenario), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_refuses_a_bad_scenario(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("pairs: [{target: x, acceptance: 2}]\n")
    result = CliRunner().invoke(app, ["sim", "--scenario", str(scenario)])
    assert result.exit_code == 2
    assert "pairs[0].acceptance" in result.output


def test_cli_needs_a_scenario_unless_the_engine_is_real_vllm() -> None:
    result = CliRunner().invoke(app, ["sim"])
    assert result.exit_code == 2
    assert "--scenario is required with --engine sim" in result.output
