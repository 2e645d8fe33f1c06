"""Files the chart and the images are built from: generated ones are current, and agree with the code."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.api.spec import DEFAULT_VLLM_VERSION
from specfleet.cli.main import app
from specfleet.controller import metrics as operator_metrics
from specfleet.metrics import alerts, names
from specfleet.render.manifests import DEFAULT_IMAGE_REPOSITORY, HF_HOME, SERVING_UID
from specfleet_workshop import chartgen

from repokit import ROOT

CHART = ROOT / "charts" / "specfleet"
IMAGES = ROOT / "images"


@pytest.mark.parametrize("name", sorted(chartgen.GENERATED))
def test_committed_chart_files_are_what_python_generates(name: str) -> None:
    committed = (CHART / name).read_text()
    assert committed == chartgen.GENERATED[name](), f"regenerate: specfleet chart-file {name} > charts/specfleet/{name}"


def test_the_cli_prints_each_generated_file_and_refuses_others() -> None:
    runner = CliRunner()
    for name, generate in chartgen.GENERATED.items():
        result = runner.invoke(app, ["chart-file", name])
        assert result.exit_code == 0 and result.stdout == generate()
    refused = runner.invoke(app, ["chart-file", "templates/deployment.yaml"])
    assert refused.exit_code == 2


def test_the_rule_file_holds_exactly_the_alert_rules() -> None:
    assert yaml.safe_load((CHART / chartgen.RULES_FILE).read_text()) == {
        "groups": [{"name": "specfleet", "rules": alerts.RULES}]
    }


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.fail("promtool missing: run .ci/install-system-deps (Debian's prometheus package ships it)")
    rules = tmp_path / "rules.yaml"
    rules.write_text(chartgen.prometheus_rules_yaml())
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts.RULES)} rules found" in result.stdout


def _exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_shows_what_a_rollout_is_judged_on() -> None:
    dashboard = chartgen.dashboard()
    titles = {p["title"] for p in dashboard["panels"]}
    assert {
        "Acceptance alpha (per token, independent of k)",
        "Accepted / drafted tokens (falls as k grows)",
        "Acceptance per position",
        "p95 latency per output token",
        "p95 latency per engine step (inter-token latency)",
        "Phase",
        "Canary weight",
    } <= titles
    exprs = "\n".join(_exprs(dashboard))
    for metric in (names.ACCEPTED_TOKENS, names.DRAFT_TOKENS, names.ACCEPTED_PER_POSITION, names.NUM_DRAFTS):
        assert metric in exprs
    assert f"{names.TIME_PER_OUTPUT_TOKEN}_bucket" in exprs and f"{names.INTER_TOKEN_LATENCY}_bucket" in exprs
    assert f"by ({names.SDEP}, {names.TRACK}, le)" in exprs
    assert operator_metrics.ROLLOUT_PHASE in exprs and operator_metrics.CANARY_WEIGHT in exprs
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert json.loads(chartgen.dashboard_json()) == dashboard


def test_every_metric_the_dashboard_queries_exists() -> None:
    known = {getattr(names, n) for n in dir(names) if n.isupper() and isinstance(getattr(names, n), str)}
    known |= {
        getattr(operator_metrics, n)
        for n in dir(operator_metrics)
        if n.isupper() and isinstance(getattr(operator_metrics, n), str)
    }
    queried = set()
    for expr in _exprs(chartgen.dashboard()):
        queried |= {m.removesuffix("_bucket") for m in re.findall(r"((?:vllm:|specfleet_)[a-z_:]+)", expr)}
    assert queried and queried <= known, queried - known


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_serving_image_defaults_to_the_crd_default_vllm_version() -> None:
    dockerfile = IMAGES / "vllm-rocm" / "Dockerfile"
    args = dict(a.split("=", 1) for kind, a in _instructions(dockerfile) if kind == "ARG" and "=" in a)
    assert args["VLLM_VERSION"] == DEFAULT_VLLM_VERSION
    assert f"{DEFAULT_IMAGE_REPOSITORY}:v<vllmVersion>" in dockerfile.read_text()


def test_the_serving_image_runs_as_the_pods_user_with_the_cache_home() -> None:
    instructions = _instructions(IMAGES / "vllm-rocm" / "Dockerfile")
    assert ("USER", f"{SERVING_UID}:{SERVING_UID}") == [i for i in instructions if i[0] == "USER"][-1]
    env = " ".join(a for kind, a in instructions if kind == "ENV")
    assert f"HF_HOME={HF_HOME}" in env and "HOME=/cache" in env
    assert any("arctic-inference==" in a for kind, a in instructions if kind == "RUN")


def test_the_operator_image_matches_the_chart() -> None:
    instructions = _instructions(IMAGES / "operator" / "Dockerfile")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    user = f"{values['podSecurityContext']['runAsUser']}:{values['podSecurityContext']['runAsGroup']}"
    assert [a for kind, a in instructions if kind == "USER"] == [user]
    assert [a for kind, a in instructions if kind == "ENTRYPOINT"] == ['["specfleet", "run"]']
    assert [a for kind, a in instructions if kind == "EXPOSE"] == [
        f"{values['healthPort']} {values['metrics']['port']}"
    ]
    assert len([a for kind, a in instructions if kind == "FROM"]) == 2, "multi-stage: build, then runtime"


def test_the_operator_build_context_sends_what_the_build_stage_copies() -> None:
    dockerfile = IMAGES / "operator" / "Dockerfile"
    copied = {
        src.rstrip("/")
        for kind, a in _instructions(dockerfile)
        if kind == "COPY" and "--from" not in a
        for src in a.split()[:-1]
    }
    ignore = (IMAGES / "operator" / "Dockerfile.dockerignore").read_text().splitlines()
    assert {line[1:].rstrip("/") for line in ignore if line.startswith("!")} == copied
