"""The command line: validate, render, crd, as a user runs them."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.api.crd import crd_yaml
from specfleet.cli.main import app

from bad_specs import BASE, merged
from repokit import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
runner = CliRunner()


def write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_examples_cover_every_method_family() -> None:
    methods = {yaml.safe_load(p.read_text())["spec"]["speculative"]["method"] for p in EXAMPLES}
    assert {"draft_model", "eagle3", "mtp", "ngram", "dflash"} <= methods


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_and_render(example: Path) -> None:
    validated = runner.invoke(app, ["validate", "-f", str(example)])
    assert validated.exit_code == 0, validated.output
    rendered = runner.invoke(app, ["render", "-f", str(example), "--track", "canary"])
    assert rendered.exit_code == 0, rendered.output
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered.stdout)]
    assert kinds == ["Service", "Service", "Deployment"]


def test_validate_prints_one_line_per_problem_and_exits_1(tmp_path: Path) -> None:
    bad = merged(BASE, {"spec": {"replicas": -1, "speculative": {"numSpeculativeTokens": 0}}})
    result = runner.invoke(app, ["validate", "-f", str(write(tmp_path, bad))])
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if line]
    assert len(lines) == 2
    assert any("spec.replicas" in line for line in lines)
    assert any("spec.speculative.numSpeculativeTokens" in line for line in lines)


def test_validate_reads_standard_input() -> None:
    result = runner.invoke(app, ["validate", "-f", "-"], input=yaml.safe_dump(BASE))
    assert result.exit_code == 0, result.output


def test_validate_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-f", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr


def test_validate_broken_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("spec: [unclosed\n")
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    assert "not valid YAML" in result.stderr


def test_render_refuses_an_invalid_spec_with_the_field(tmp_path: Path) -> None:
    bad = merged(BASE, {"spec": {"speculative": {"method": "medusa"}}})
    result = runner.invoke(app, ["render", "-f", str(write(tmp_path, bad))])
    assert result.exit_code == 1
    assert "spec.speculative.method" in result.stderr
    assert result.stdout == ""


def test_crd_command_prints_the_generated_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0
    assert result.stdout == crd_yaml()


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("validate", "render", "crd", "dev"):
        assert command in result.stdout


def test_committed_field_reference_matches_the_models() -> None:
    result = runner.invoke(app, ["reference"])
    assert result.exit_code == 0
    assert (ROOT / "docs" / "reference.md").read_text() == result.stdout, "run: specfleet reference > docs/reference.md"
    assert "`spec.speculative.numSpeculativeTokens`" in result.stdout
