"""Custom guardrails reach the operator's metrics, the alert rules and the dashboard: a `guardrail` label
with the check's name (`custom:<name>`), only while the canary the analysis judged is live."""

from specfleet.controller.metrics import GUARDRAIL, GUARDRAIL_VERDICT, FleetCollector
from specfleet.metrics import alerts
from specfleet_workshop import chartgen

CHECKS = [
    {
        "guardrail": "custom:tool-calls-parsed",
        "verdict": "Fail",
        "estimate": 0.19,
        "lower": 0.16,
        "upper": 0.22,
        "limit": 0.01,
    },
    {"guardrail": "maxErrorRateIncrease", "verdict": "Inconclusive", "estimate": 0.0, "limit": 0.01},
]


def collected(status: dict) -> dict[str, list]:
    objects = [{"metadata": {"namespace": "ns", "name": "llama"}, "status": status}]
    return {family.name: family.samples for family in FleetCollector(lambda: objects).collect()}


def test_the_live_canarys_checks_are_exported_with_their_bounds_and_verdict() -> None:
    found = collected({"canaryRevision": "c1", "lastAnalysis": {"revision": "c1", "checks": CHECKS}})
    bounds = {(s.labels["guardrail"], s.labels["bound"]): s.value for s in found[GUARDRAIL]}
    assert bounds[("custom:tool-calls-parsed", "lower")] == 0.16
    assert bounds[("custom:tool-calls-parsed", "limit")] == 0.01
    assert ("maxErrorRateIncrease", "lower") not in bounds  # no bound recorded, none exported
    verdicts = {(s.labels["guardrail"], s.labels["verdict"]): s.value for s in found[GUARDRAIL_VERDICT]}
    assert verdicts[("custom:tool-calls-parsed", "Fail")] == 1.0
    assert verdicts[("custom:tool-calls-parsed", "Pass")] == 0.0
    assert sum(v for (g, _), v in verdicts.items() if g == "maxErrorRateIncrease") == 1.0
    assert all(s.labels["namespace"] == "ns" and s.labels["specfleet_io_name"] == "llama" for s in found[GUARDRAIL])


def test_a_finished_rollouts_last_analysis_is_not_exported() -> None:
    for status in (
        {"lastAnalysis": {"revision": "c1", "checks": CHECKS}},
        {"canaryRevision": "c2", "lastAnalysis": {"revision": "c1", "checks": CHECKS}},
    ):
        found = collected(status)
        assert found[GUARDRAIL] == [] and found[GUARDRAIL_VERDICT] == []


def test_alerts_and_the_dashboard_select_the_custom_guardrails() -> None:
    rules = {r["alert"]: r for r in alerts.RULES}
    failing, undecided = rules["SpecfleetCustomGuardrailFailing"], rules["SpecfleetCustomGuardrailUndecided"]
    assert 'guardrail=~"custom:.+"' in str(failing["expr"]) and 'verdict="Fail"' in str(failing["expr"])
    assert 'verdict="Inconclusive"' in str(undecided["expr"]) and undecided["for"] == "30m"
    panels = {p["title"]: p for p in chartgen.dashboard()["panels"]}
    row = "User-defined guardrails of the live canary (rollout.guardrails.custom)"
    assert panels[row]["type"] == "row"
    exprs = [t["expr"] for p in panels.values() for t in p.get("targets", [])]
    assert any(GUARDRAIL_VERDICT in e and "custom:" in e for e in exprs)
    assert any(e.startswith(f"max by (specfleet_io_name, guardrail, bound) ({GUARDRAIL}{{") for e in exprs)
