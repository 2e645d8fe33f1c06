"""A guardrail is one definition: each built-in guardrail is a module of `judge/guardrails/`, registered once,
and what reads guardrails (the judge, the budget's count, the spec, the CLI's table, the docs) agrees with it."""

import importlib
import re
import typing

from typer.testing import CliRunner

from specfleet.api.spec import Guardrails
from specfleet.cli import app as cli_app
from specfleet.cli import view
from specfleet.judge import judge, judged_guardrails
from specfleet.judge.guardrail import Guardrail, Reads
from specfleet.judge.guardrails import GUARDRAILS
from specfleet.metrics import promql

from judgekit import track
from repokit import ROOT

PACKAGE = ROOT / "operator" / "specfleet" / "judge" / "guardrails"
NOT_GUARDRAILS = {"min_draft_tokens", "min_requests", "max_canary_restarts", "custom", "output_equivalence"}
"""`Guardrails` fields that are not one limit judged from Prometheus: how much evidence before judging, the
restarts the state machine counts, the custom list, output equivalence's prompt pairs."""


def test_the_registry_holds_each_module_of_the_package_once() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    declared = [importlib.import_module(f"specfleet.judge.guardrails.{m}").GUARDRAIL for m in modules]
    assert all(isinstance(g, Guardrail) for g in declared)
    assert sorted(map(id, GUARDRAILS)) == sorted(map(id, declared))
    assert len({g.name for g in GUARDRAILS}) == len(GUARDRAILS)


def test_each_guardrail_declares_its_spec_field_by_both_names() -> None:
    fields = Guardrails.model_fields
    for g in GUARDRAILS:
        assert g.field in fields, g.name
        assert fields[g.field].alias == g.name
        limit = typing.get_args(fields[g.field].annotation) or (fields[g.field].annotation,)
        assert any(t is float or typing.get_origin(t) is typing.Annotated for t in limit), g.name


def test_every_limit_of_the_spec_is_a_registered_guardrail() -> None:
    """A limit added to the spec without its module would be in the CRD and judged by nothing."""
    registered = {g.field for g in GUARDRAILS}
    assert set(Guardrails.model_fields) - NOT_GUARDRAILS == registered


def test_each_guardrail_reads_metrics_the_analysis_queries() -> None:
    selector = promql.TrackSelector("ns", "fleet", "canary", "r1")
    queries = [
        *promql.COUNTERS.values(),
        *promql.HISTOGRAMS.values(),
        *promql.gauges(selector, promql.Range("60s", "5s")).values(),
        promql.finished_by_reason(selector, promql.Range("60s", "5s")),
        promql.accepted_by_position(selector, promql.Range("60s", "5s")),
        promql.request_rate_by_pod(selector, promql.Range("60s", "5s")),
    ]
    for g in GUARDRAILS:
        assert g.metrics, g.name
        for metric in g.metrics:
            assert any(metric in query for query in queries), f"{g.name}: nothing queries {metric}"


def test_each_guardrail_on_is_one_check_by_its_name_and_counted_when_bounded() -> None:
    on = Guardrails.model_validate({g.name: g.default() or 0.5 for g in GUARDRAILS})
    canary, stable = track(seed=1, alpha=0.8), track(seed=2, alpha=0.8)
    checks = judge(on, canary, stable, speculative=True, confidence=0.99).checks
    assert [c.guardrail for c in checks] == [g.name for g in GUARDRAILS]
    assert judged_guardrails(on, speculative=True) == sum(g.bounded for g in GUARDRAILS)
    off = Guardrails()
    assert judged_guardrails(off, speculative=False) == sum(
        g.bounded for g in GUARDRAILS if g.default() is not None and not g.speculative_only
    )


def test_the_cli_reads_each_guardrail_as_the_registry_says() -> None:
    result = CliRunner().invoke(cli_app.app, ["guardrails"])
    assert result.exit_code == 0
    assert view.GUARDRAILS_FILE.read_text() == result.stdout, (
        "run: specfleet guardrails > operator/specfleet/cli/guardrails.yaml"
    )
    units = view.guardrail_units()
    for g in GUARDRAILS:
        label, reads = units[g.name]
        assert label == g.label and reads is view.READS[g.reads.value]
    assert set(view.READS) == {r.value for r in Reads}


def test_the_docs_tables_hold_each_guardrails_row() -> None:
    judge_md, readme = (ROOT / "docs" / "judge.md").read_text(), (ROOT / "README.md").read_text()
    for g in GUARDRAILS:
        assert g.judge_row() in judge_md.splitlines(), f"docs/judge.md's table of guardrails needs {g.judge_row()}"
        assert g.tune_row() in readme.splitlines(), f"README.md's table of guardrails needs {g.tune_row()}"


def test_where_a_change_goes_names_the_files_a_guardrail_touches() -> None:
    """architecture.md's "A new guardrail" says which files change; each it names exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    bullet = re.search(r"^- \*\*A new guardrail\.\*\*(.*?)(?=^- \*\*)", text, re.MULTILINE | re.DOTALL)
    assert bullet, "docs/architecture.md lost its 'A new guardrail' bullet"
    named = set(re.findall(r"`((?:operator/|crds/|charts/|docs/|tests/|README)[^`]*)`", bullet.group(1)))
    assert named >= {
        "operator/specfleet/judge/guardrails/<name>.py",
        "operator/specfleet/judge/guardrails/__init__.py",
        "operator/specfleet/api/spec.py",
        "crds/specfleet.io_speculativedeployments.yaml",
        "charts/specfleet/templates/crds/specfleet.io_speculativedeployments.yaml",
        "docs/reference.md",
        str(view.GUARDRAILS_FILE.relative_to(ROOT)),
        "docs/judge.md",
        "README.md",
    }
    for path in named:
        assert list(ROOT.glob(path.replace("<name>", "*"))), f"architecture.md names {path}, which is not there"
