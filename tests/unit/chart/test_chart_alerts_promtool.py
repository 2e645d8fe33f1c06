"""The chart's pager alerts (rollback or abort, a fleet stuck in a phase, reconcile errors, the operator down)
evaluated by Prometheus' own rule engine: `promtool test rules` over the generated rules file.

The input series are the operator's: the rollout-phase samples come from `FleetCollector` run on fleet
objects, and the counter from the operator's registry names, so a renamed metric or label fails here.
"""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.controller import metrics as operator_metrics
from specfleet.metrics import alerts
from specfleet_workshop import chartgen

from repokit import ROOT

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
pytestmark = pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")

OPERATOR_POD = {"namespace": "specfleet-system", "pod": "specfleet-0"}


def _series(labels: dict[str, str], metric: str) -> str:
    body = ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{metric}{{{body}}}"


def phase_series(namespace: str, name: str, phases: list[tuple[str, int]]) -> list[dict[str, str]]:
    """The `specfleet_rollout_phase` series the operator exports for a fleet that sits in each of `phases` in
    turn (phase, minutes), sampled every minute: what `FleetCollector` yields for each status."""
    values: dict[str, list[str]] = {}
    for phase, minutes in phases:
        fleet = {"metadata": {"namespace": namespace, "name": name}, "status": {"phase": phase}}
        family = next(f for f in operator_metrics.FleetCollector([fleet].copy).collect())
        assert family.name == operator_metrics.ROLLOUT_PHASE
        for sample in family.samples:
            values.setdefault(_series(sample.labels, family.name), []).extend([str(int(sample.value))] * minutes)
    return [{"series": series, "values": " ".join(samples)} for series, samples in values.items()]


RULES = {str(rule["alert"]): rule for rule in alerts.RULES}


def annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus fills them in for an alert with `labels` and `value`."""
    filled = {}
    for key, text in dict(RULES[alert]["annotations"]).items():  # type: ignore[call-overload]
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        filled[key] = re.sub(r"\{\{ \$value[^}]*\}\}", value, text)
    return filled


def fires(alert: str, at: str, *labels: dict[str, str], value: str = "") -> dict[str, Any]:
    expected = [{"exp_labels": dict(lab), "exp_annotations": annotations(alert, lab, value)} for lab in labels]
    return {"eval_time": at, "alertname": alert, "exp_alerts": expected}


def silent(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


def _fleet(name: str, phase: str, severity: str = "warning") -> dict[str, str]:
    return {"severity": severity, "namespace": "team-a", "specfleet_io_name": name, "phase": phase}


def cases() -> list[dict[str, Any]]:
    up = _series({alerts.OPERATOR_TARGET[0]: alerts.OPERATOR_TARGET[1], **OPERATOR_POD}, "up")
    errors = _series({"result": "error", **OPERATOR_POD}, operator_metrics.RECONCILES_TOTAL)
    return [
        {  # a canary rolled back, another aborted, a third promoted: only the first two page
            "interval": "1m",
            "input_series": [
                *phase_series("team-a", "rolled", [("Progressing", 10), ("RolledBack", 20)]),
                *phase_series("team-a", "stopped", [("Paused", 10), ("Aborted", 20)]),
                *phase_series("team-a", "promoted", [("Progressing", 10), ("Healthy", 20)]),
            ],
            "alert_rule_test": [
                silent("SpecfleetCanaryRolledBack", "5m"),
                fires(
                    "SpecfleetCanaryRolledBack",
                    "15m",
                    _fleet("rolled", "RolledBack"),
                    _fleet("stopped", "Aborted"),
                ),
            ],
        },
        {  # Degraded pages after 5 minutes, not before
            "interval": "1m",
            "input_series": phase_series("team-a", "late", [("Progressing", 5), ("Degraded", 30)]),
            "alert_rule_test": [
                silent("SpecfleetFleetDegraded", "8m"),
                fires("SpecfleetFleetDegraded", "15m", _fleet("late", "Degraded")),
            ],
        },
        {  # stuck: Progressing for over STUCK_FOR fires; one that moved on to Healthy within it does not
            "interval": "1m",
            "input_series": [
                *phase_series("team-a", "stuck", [("Progressing", 180)]),
                *phase_series("team-a", "moving", [("Progressing", 100), ("Healthy", 80)]),
            ],
            "alert_rule_test": [
                silent("SpecfleetFleetStuck", "90m"),
                fires("SpecfleetFleetStuck", "150m", _fleet("stuck", "Progressing")),
            ],
        },
        {  # reconcile errors for 30 minutes, then none: fires after 15 minutes of errors, resolves after them
            "interval": "1m",
            "input_series": [{"series": errors, "values": "0+2x30 60x30"}],  # 2 a minute: 33.33m a second
            "alert_rule_test": [
                silent("SpecfleetReconcileErrors", "10m"),
                fires("SpecfleetReconcileErrors", "25m", {"severity": "warning", **OPERATOR_POD}, value="33.33m"),
                silent("SpecfleetReconcileErrors", "55m"),
            ],
        },
        {  # the operator answers for 20 minutes, then its target fails: fires 5 minutes later
            "interval": "1m",
            "input_series": [{"series": up, "values": "1x20 0x20"}],
            "alert_rule_test": [
                silent("SpecfleetOperatorDown", "15m"),
                silent("SpecfleetOperatorDown", "23m"),
                fires("SpecfleetOperatorDown", "30m", {"severity": "critical"}),
            ],
        },
        {  # no operator target at all (scaled to 0, every pod unready): fires too
            "interval": "1m",
            "input_series": [{"series": _series(OPERATOR_POD, "up"), "values": "1x20"}],
            "alert_rule_test": [
                fires("SpecfleetOperatorDown", "10m", {"severity": "critical"}),
            ],
        },
    ]


def test_pager_alerts_fire_on_recorded_operator_series_and_only_then(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(chartgen.prometheus_rules_yaml())
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": cases()}))
    result = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_generated_rule_passes_promtool_check() -> None:
    committed = ROOT / "charts" / "specfleet" / chartgen.RULES_FILE
    result = subprocess.run([PROMTOOL, "check", "rules", str(committed)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
