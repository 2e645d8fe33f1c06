"""The short version of benchmarks/peers.py: its manifests and its arithmetic, without a cluster or the peers.

The side-by-side run needs the peers' binaries and 40 minutes; what can be checked without them is that
each controller is asked the same question (the same PromQL guardrails, canary told from stable by the
labels the simulator gives peer pods) at the settings the table says, and that the table's ratios are right.
"""

from pathlib import Path

import pytest

from promtoolkit import evaluated

import peers_fleets
import peers_phases
import peers_report

PROMETHEUS = "http://127.0.0.1:9090"


def test_argo_template_judges_both_guardrails_on_the_pod_template_hash() -> None:
    template = peers_fleets.argo_template("argo-ns", "documented", PROMETHEUS)
    metrics = {m["name"]: m for m in template["spec"]["metrics"]}
    assert set(metrics) == {"token-latency-p95-ratio", "acceptance-alpha"}
    latency = metrics["token-latency-p95-ratio"]
    assert latency["interval"] == "300s" and latency["failureLimit"] == 3
    assert latency["successCondition"] == "result[0] <= 1.1"
    query = latency["provider"]["prometheus"]["query"]
    assert query.count("vllm:request_time_per_output_token_seconds_bucket") == 2
    assert 'rollouts_pod_template_hash="{{args.canary-hash}}"' in query
    assert 'rollouts_pod_template_hash="{{args.stable-hash}}"' in query
    assert "[300s]" in query and 'app="{{args.app}}"' in query
    alpha = metrics["acceptance-alpha"]
    assert alpha["successCondition"] == "result[0] >= 0.6"
    assert 'position="0"' in alpha["provider"]["prometheus"]["query"]
    assert alpha["provider"]["prometheus"]["address"] == PROMETHEUS


def test_argo_rollout_is_a_basic_canary_with_background_analysis_of_its_own_hashes() -> None:
    rollout = peers_fleets.argo_rollout("breach-t-00", "breach", "tuned", peers_fleets.GOOD)
    canary = rollout["spec"]["strategy"]["canary"]
    assert "trafficRouting" not in canary
    assert canary["steps"] == [{"setWeight": 50}, {"pause": {}}]  # held live until the breach
    assert canary["analysis"]["templates"] == [{"templateName": "vllm-tuned"}]
    args = {a["name"]: a for a in canary["analysis"]["args"]}
    assert args["app"]["value"] == "breach-t-00"
    assert args["canary-hash"]["valueFrom"] == {"podTemplateHashValue": "Latest"}
    assert args["stable-hash"]["valueFrom"] == {"podTemplateHashValue": "Stable"}
    good = peers_fleets.argo_rollout("good-t-00", "good", "tuned", None)
    assert good["spec"]["strategy"]["canary"]["steps"][1] == {"pause": {"duration": "100s"}}


def test_peer_pods_run_what_specfleet_renders_labelled_only_with_app() -> None:
    template = peers_fleets.pod_template("x", peers_fleets.GOOD)
    assert template["metadata"]["labels"] == {"app": "x"}
    [container] = template["spec"]["containers"]
    assert container["command"] == ["vllm", "serve"]
    assert peers_fleets.GOOD in " ".join(container["args"])
    plain = peers_fleets.pod_template("x", None)
    assert "--speculative-config" not in plain["spec"]["containers"][0]["args"]


def test_flagger_canary_is_blue_green_with_the_same_queries_on_app_labels() -> None:
    canary = peers_fleets.flagger_canary("aa-d-01", "aa", "documented")
    assert canary["spec"]["provider"] == "kubernetes"
    analysis = canary["spec"]["analysis"]
    assert (analysis["interval"], analysis["threshold"]) == ("60s", 2)
    assert {m["templateRef"]["name"] for m in analysis["metrics"]} == {"token-latency-p95-ratio", "acceptance-alpha"}
    assert all(m["interval"] == "60s" for m in analysis["metrics"])
    good = peers_fleets.flagger_canary("good-t-00", "good", "tuned")["spec"]["analysis"]
    assert (good["interval"], good["iterations"]) == ("10s", 10)
    templates = {t["metadata"]["name"]: t["spec"] for t in peers_fleets.flagger_templates("fl", PROMETHEUS)}
    latency = templates["token-latency-p95-ratio"]["query"]
    assert 'app="{{ target }}"' in latency and 'app="{{ target }}-primary"' in latency
    assert "[{{ interval }}]" in latency
    assert templates["acceptance-alpha"]["provider"] == {"type": "prometheus", "address": PROMETHEUS}


def test_specfleet_fleets_take_the_defaults_documented_and_the_shared_interval_tuned() -> None:
    documented = peers_fleets.specfleet_fleet("b", "breach", "documented", peers_fleets.GOOD)["spec"]["rollout"]
    assert "analysis" not in documented and documented["steps"][0]["pause"] == {"duration": "2h"}
    tuned = peers_fleets.specfleet_fleet("g", "good", "tuned", None)["spec"]
    assert tuned["rollout"]["analysis"] == {"interval": "10s", "window": "30s"}
    assert tuned["speculative"] == {"method": "none"}
    assert tuned["rollout"]["steps"][0]["pause"] == {"duration": "100s"}


def test_tuned_settings_share_interval_and_window() -> None:
    tuned = {peers_fleets.SETUPS[c, "tuned"] for c in peers_fleets.CONTROLLERS}
    assert {(s.interval, s.window) for s in tuned} == {(10, 30)}


def test_the_scenario_breaks_only_breach_drafters_and_starves_only_aa_canaries() -> None:
    document = peers_fleets.scenario(1.0, breach=True, cold=True)
    by_drafter = {p["drafter"]: p for p in document["pairs"]}
    assert by_drafter[peers_fleets.drafter("breach", "tuned")]["acceptance"] == 0.3
    assert by_drafter[peers_fleets.drafter("aa", "documented")]["load"] == 0.0
    assert peers_fleets.GOOD not in by_drafter
    assert peers_fleets.scenario(1.0, breach=False, cold=False)["pairs"] == []


def test_summary_and_ratios() -> None:
    assert peers_report.summarize([]) == {"p50": None, "p95": None, "max": None}
    times = [float(t) for t in range(1, 21)]
    assert peers_report.summarize(times) == {"p50": 10.5, "p95": 19.0, "max": 20.0}
    assert peers_report.ratio(10.0, 40.0) == 0.25
    assert peers_report.ratio(None, 3.0) is None and peers_report.ratio(1.0, 0.0) is None
    results = {
        "specfleet/tuned": {"breach": {"p95": 12.0}},
        "argo/documented": {"breach": {"p95": 960.0}},
        "argo/tuned": {"breach": {"p95": 48.0}},
        "flagger/tuned": {"breach": {"p95": None}},
    }
    found = peers_report.ratios(results)
    assert found["specfleet tuned / argo documented (p95)"] == 0.013
    assert found["specfleet tuned / argo tuned (p95)"] == 0.25
    assert found["specfleet tuned / flagger tuned (p95)"] is None


def test_table_has_a_row_per_controller_and_setting_then_the_ratios() -> None:
    row = {
        "breach": {"trials": 3, "rolled_back": 2, "before_breach": 1, "p50": 9.0, "p95": 11.0},
        "aa": {"trials": 3, "false_rollbacks": 0},
        "good": {"promoted": 3, "rolled back": 0, "held": 0},
        "outage": {"promoted": 0, "rolled back": 1, "held": 2},
    }
    text = peers_report.table({"specfleet/tuned": row, "argo/tuned": row})
    assert (
        "| specfleet/tuned | 9.0 s / 11.0 s | 2 / 3 (1 before t0) | 0 / 3 | promoted 3 | rolled back 1, held 2 |"
        in text
    )
    assert "| specfleet tuned / argo tuned (p95) | 1.00 |" in text


@pytest.mark.parametrize(
    ("controller", "status", "expected"),
    [
        ("specfleet", {"phase": "RolledBack"}, "rolled back"),
        ("specfleet", {"phase": "Healthy", "stableRevision": "new"}, "promoted"),
        ("specfleet", {"phase": "Progressing", "stableRevision": "old", "canaryRevision": "new"}, "held"),
        ("argo", {"phase": "Degraded", "abort": True}, "rolled back"),
        ("argo", {"phase": "Healthy", "stableRS": "new"}, "promoted"),
        ("argo", {"phase": "Paused", "stableRS": "old"}, "held"),
        ("flagger", {"phase": "Failed"}, "rolled back"),
        ("flagger", {"phase": "Succeeded"}, "promoted"),
        ("flagger", {"phase": "Progressing"}, "held"),
    ],
)
def test_outcomes_read_from_each_controllers_status(controller: str, status: dict, expected: str) -> None:
    fleet = peers_fleets.Fleet(controller, "tuned", "good", "g", initial="old")
    assert peers_phases.outcome(fleet, {"status": status}) == expected


def test_the_scale_table_puts_figures_side_by_side_with_specfleets_ratios() -> None:
    figures = {"objects": 10, "all_converged_seconds": 20.0, "cpu_seconds": 4.0, "peak_rss_mib": 100.0,
               "api_requests_per_object": 5.0, "idle_writes_per_minute": 0.0, "idle_reads_per_minute": 0.0}  # fmt: skip
    scale = {
        "specfleet": {**figures, "per_object_seconds": {"p50": 3.0, "p95": 9.0}},
        "argo": {
            **figures,
            "all_converged_seconds": 40.0,
            "api_requests_per_object": 0,
            "per_object_seconds": {"p50": 12.0},
        },
    }
    ratios = peers_report.scale_ratios(scale)
    assert ratios["all_converged_seconds / argo"] == 0.5 and ratios["cpu_seconds / argo"] == 1.0
    assert ratios["per_object_p50_seconds / argo"] == 0.25
    assert ratios["api_requests_per_object / argo"] is None  # no ratio over zero
    assert not any("flagger" in name for name in ratios)  # a controller not measured has no ratio
    table = peers_report.scale_table(scale, nodes=4)
    assert table.splitlines()[0] == "| 10 fleets each, 4 nodes | specfleet | argo |"
    assert "| all converged after (s) | 20.0 | 40.0 |" in table


def test_fleetscale_reads_whole_audit_events_after_an_offset_and_leaves_out_its_own(tmp_path: Path) -> None:
    import fleetscale

    log = tmp_path / "audit.log"
    lines = [
        '{"verb": "create", "userAgent": "kopf/1.45.2"}',
        '{"verb": "get", "userAgent": "specfleet-bench"}',
        '{"verb": "patch", "userAgent": "rollouts-controller/v1.10.1 (linux/amd64)"}',
    ]
    log.write_text("\n".join(lines) + '\n{"verb": "partial')
    events, offset = fleetscale.audit_events(log, 0)
    assert [e["verb"] for e in events] == ["create", "get", "patch"]  # the partial last line waits
    assert [e["verb"] for e in fleetscale.controller_requests(events)] == ["create", "patch"]
    with log.open("a") as handle:
        handle.write('", "userAgent": "flagger/v1"}\n')
    later, _ = fleetscale.audit_events(log, offset)
    assert later == [{"verb": "partial", "userAgent": "flagger/v1"}]
    log.write_text(lines[0] + "\n")  # rotated: shorter than the offset, read from its start
    assert fleetscale.audit_events(log, offset)[0] == [{"verb": "create", "userAgent": "kopf/1.45.2"}]


def test_the_share_of_scrapes_that_succeeded_is_read_per_controller_namespace(tmp_path: Path) -> None:
    """Prometheus' own engine over `up`: a namespace whose pods answered every scrape reads 1, one whose second
    pod failed every scrape reads 0.5."""
    series = {
        'up{job="file-sd", namespace="sf", pod="a"}': "1x20",
        'up{job="file-sd", namespace="argo", pod="b"}': "1x20",
        'up{job="file-sd", namespace="argo", pod="c"}': "0x20",
        'up{job="prometheus", namespace="argo"}': "0x20",  # not a simulated pod
    }
    expected = [{"labels": '{namespace="sf"}', "value": 1}, {"labels": '{namespace="argo"}', "value": 0.5}]
    assert evaluated(tmp_path, series, peers_phases.SCRAPED.format(seconds=100), "100s", expected) == ""


def test_only_scrapes_prometheus_gave_up_on_count_against_the_simulator(tmp_path: Path) -> None:
    """Over 20 scrapes, a pod that failed 5 after the 5 s timeout and one whose 10 failures were answered at
    once (a loading pod's 503): a quarter of one namespace's scrapes timed out, none of the other's; the run is
    invalid when fewer than 95% were answered in time."""
    series = {  # `v x n` is n + 1 samples, 5 s apart from 0 s
        'up{job="file-sd", namespace="argo", pod="b"}': "1x15 0x4",
        'scrape_duration_seconds{job="file-sd", namespace="argo", pod="b"}': "0.1x15 5x4",
        'up{job="file-sd", namespace="sf", pod="a"}': "0x9 1x10",
        'scrape_duration_seconds{job="file-sd", namespace="sf", pod="a"}': "0.01x20",
    }
    query = peers_phases.TIMED_OUT.format(seconds=100, interval=5, slow=2.5)
    expected = [{"labels": '{namespace="argo"}', "value": 0.25}]  # none timed out: no series (read as 0)
    assert evaluated(tmp_path, series, query, "102s", expected) == ""  # the 20 scrapes from 5 s to 100 s
    shares = {"specfleet": 1.0, "argo": 0.75, "flagger": None}
    warning = peers_report.scrape_warning(shares, peers_phases.MIN_ANSWERED)
    assert warning is not None and "argo 75.0%" in warning and "flagger no scrapes" in warning
    assert "specfleet" not in warning
    assert peers_report.scrape_warning({"specfleet": 0.99, "argo": 0.96}, peers_phases.MIN_ANSWERED) is None
