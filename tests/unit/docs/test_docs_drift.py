"""The docs name only what the chart and the operator have, and their tables leave nothing out.

Alert names (`Specfleet...`), the operator's metric names (`specfleet_...`) and the chart objects named with
the release (`...-metrics`, `...-capacity`) quoted in README.md, docs/*.md and the comments of the chart's
values.yaml are checked against the chart as the pinned helm renders it and the metrics the operator serves;
the tables of the docs must hold every alert rule and every operator metric.
"""

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from specfleet.controller import handlers  # noqa: F401  (imports every metric the operator's process registers)
from specfleet.controller.metrics import FleetCollector

from repokit import KUBE, ROOT

CHART = ROOT / "charts" / "specfleet"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VALUES = CHART / "values.yaml"
INSTALL = ROOT / "docs" / "install.md"

ALERT = re.compile(r"\bSpecfleet[A-Z][A-Za-z0-9]*\b")
# Not metrics: specfleet_io_* (the pods' target labels) and specfleet_workshop (the dev tooling's package).
METRIC = re.compile(r"\bspecfleet_(?!io_|workshop\b)[a-z0-9_]+")
RELEASE_OBJECT = re.compile(r"`((?:<release>|[a-z0-9][a-z0-9-]*)-(metrics|capacity))`")
TABLE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)
INSTALL_COMMAND = re.compile(r"helm install (\S+) charts/specfleet --namespace (\S+)")
SERIES_SUFFIXES = ("_bucket", "_count", "_sum", "_created")
OTHER_RELEASE = "team"
"""Stands for `<release>` in the docs: a release name without `specfleet` in it."""
KIND_BY_SUFFIX = {"metrics": "Service", "capacity": "ClusterRole"}


def _text(path: Path) -> str:
    """The prose of a page; for values.yaml, its comments."""
    text = path.read_text()
    if path.suffix == ".yaml":
        return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return text


def _named(pattern: re.Pattern[str], paths: list[Path]) -> dict[str, list[str]]:
    """Each name the pages quote -> where (`file:line`)."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for number, line in enumerate(_text(path).splitlines(), start=1):
            for match in pattern.finditer(line):
                found.setdefault(match.group(0), []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def _table_names(pattern: re.Pattern[str], paths: list[Path]) -> set[str]:
    """Names in the first column of the pages' Markdown tables."""
    return {name for path in paths for name in TABLE_ROW.findall(path.read_text()) if pattern.fullmatch(name)}


def _render(helm: Path, release: str, namespace: str) -> list[dict[str, Any]]:
    """The chart with every optional object on: the PrometheusRule and the capacity ClusterRole."""
    everything = ("--set", "monitoring.force=true", "--set", "watchNamespaces={team-a}", "--set", "capacityCheck=true")
    result = subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", namespace, *KUBE, *everything],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _documented_release() -> tuple[str, str]:
    match = INSTALL_COMMAND.search(INSTALL.read_text())
    assert match, "docs/install.md no longer shows `helm install <release> charts/specfleet --namespace <ns>`"
    return match.group(1), match.group(2)


@pytest.fixture(scope="module")
def rendered_alerts(helm: Path) -> set[str]:
    (rule,) = [m for m in _render(helm, *_documented_release()) if m["kind"] == "PrometheusRule"]
    return {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


def _served_metrics() -> set[str]:
    """The `specfleet_*` families the operator's /metrics serves: what its process registers, and the per-object
    gauges of FleetCollector."""
    fleet = CollectorRegistry()
    fleet.register(FleetCollector(lambda: []))
    text = generate_latest(REGISTRY).decode() + generate_latest(fleet).decode()
    families = set(re.findall(r"^# HELP (specfleet_\w+)", text, re.MULTILINE))
    return {name for name in families if not name.endswith("_created")}  # a histogram's creation time, not a metric


def test_every_alert_the_docs_name_is_a_rule_of_the_chart(rendered_alerts: set[str]) -> None:
    named = _named(ALERT, [*DOCS, VALUES])
    unknown = {name: where for name, where in named.items() if name not in rendered_alerts}
    assert unknown == {}, f"alert rules: {sorted(rendered_alerts)}"


def test_every_alert_rule_is_in_a_docs_table_and_in_the_values_comment(rendered_alerts: set[str]) -> None:
    assert len(rendered_alerts) >= 4
    assert _table_names(ALERT, DOCS) == rendered_alerts
    assert set(_named(ALERT, [VALUES])) == rendered_alerts


def test_every_metric_the_docs_name_is_one_the_operator_serves() -> None:
    served = _served_metrics()
    named = _named(METRIC, [*DOCS, VALUES])
    unknown = {
        name: where
        for name, where in named.items()
        if name not in served and not any(name.removesuffix(s) in served for s in SERIES_SUFFIXES)
    }
    assert unknown == {}, f"the operator serves: {sorted(served)}"


def test_every_operator_metric_is_in_a_docs_table() -> None:
    served = _served_metrics()
    assert {"specfleet_speculation_paying", "specfleet_speedup", "specfleet_reconciles_total"} <= served
    assert _table_names(METRIC, DOCS) == served


def test_the_objects_the_docs_name_by_release_are_the_ones_the_chart_renders(helm: Path) -> None:
    release, namespace = _documented_release()
    names = {
        (release, kind): {m["metadata"]["name"] for m in manifests if m["kind"] == kind}
        for release, manifests in ((r, _render(helm, r, namespace)) for r in (release, OTHER_RELEASE))
        for kind in KIND_BY_SUFFIX.values()
    }
    quoted = _named(RELEASE_OBJECT, DOCS)
    (service,) = names[release, "Service"]
    assert f"`{service}`" in quoted, f"the docs do not name the metrics Service of the release they install, {service}"
    for token, where in quoted.items():
        match = RELEASE_OBJECT.fullmatch(token)
        assert match is not None
        name, suffix = match.groups()
        rendered_release = OTHER_RELEASE if "<release>" in name else release
        wanted = name.replace("<release>", OTHER_RELEASE)
        assert wanted in names[rendered_release, KIND_BY_SUFFIX[suffix]], (token, where, names)
