"""The command line: validate, render, crd, as a user runs them."""

import json
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
    assert result.stdout.startswith(f"{path}: (file): not valid YAML")


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "stringData": {"token": "x"}}


def test_validate_skips_other_kinds_and_says_how_many(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([SECRET, BASE, {**SECRET, "kind": "ConfigMap"}]))
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: llama-eagle3: valid" in result.stderr
    assert "skipped 2 documents of other kinds (ConfigMap, Secret)" in result.stderr


def test_validate_a_file_without_a_speculative_deployment_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(SECRET))
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    assert "skipped 1 document of another kind (Secret)" in result.stderr
    assert "holds no SpeculativeDeployment" in result.stderr


def _directory(tmp_path: Path) -> Path:
    """b.yml is invalid, a.yaml and c.json valid; notes.txt is not a manifest and must not be read."""
    (tmp_path / "b.yml").write_text(
        yaml.safe_dump(merged(BASE, {"metadata": {"name": "bad"}, "spec": {"replicas": -1}}))
    )
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "c.json").write_text(json.dumps(merged(BASE, {"metadata": {"name": "from-json"}})))
    (tmp_path / "notes.txt").write_text("spec: [not yaml\n")
    (tmp_path / "nested").mkdir()
    return tmp_path


def test_validate_a_directory_names_the_file_of_each_result_in_order(tmp_path: Path) -> None:
    directory = _directory(tmp_path)
    result = runner.invoke(app, ["validate", "-f", str(directory)])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        f"{directory / 'b.yml'}: bad: spec.replicas: Input should be greater than or equal to 0"
    ]
    valid = [line for line in result.stderr.splitlines() if line.endswith(": valid")]
    assert valid == [f"{directory / 'a.yaml'}: llama-eagle3: valid", f"{directory / 'c.json'}: from-json: valid"]


def test_validate_an_empty_directory_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-f", str(tmp_path)])
    assert result.exit_code == 1
    assert "holds no .yaml/.yml/.json file" in result.stderr


def test_validate_output_json_reports_every_document(tmp_path: Path) -> None:
    directory = _directory(tmp_path)
    (directory / "d.yaml").write_text(
        yaml.safe_dump_all(
            [
                SECRET,
                merged(BASE, {"metadata": {"name": "deep"}, "spec": {"speculative": {"numSpeculativeTokens": 12}}}),
            ]
        )
    )
    result = runner.invoke(app, ["validate", "-f", str(directory), "-o", "json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["valid"] is False
    rows = {(Path(d["file"]).name, d["name"]): d for d in report["documents"]}
    assert list(rows) == [("a.yaml", "llama-eagle3"), ("b.yml", "bad"), ("c.json", "from-json"), ("d.yaml", "deep")]
    assert rows["b.yml", "bad"]["valid"] is False
    assert rows["b.yml", "bad"]["errors"] == [
        {"field": "spec.replicas", "message": "Input should be greater than or equal to 0"}
    ]
    assert rows["d.yaml", "deep"]["valid"] is True
    assert [w["field"] for w in rows["d.yaml", "deep"]["warnings"]] == ["spec.speculative.numSpeculativeTokens"]
    assert [(Path(s["file"]).name, s["kind"]) for s in report["skipped"]] == [("d.yaml", "Secret")]


def test_validate_output_json_exits_0_when_valid_with_warnings() -> None:
    warned = merged(BASE, {"spec": {"accelerator": {"productNames": ["MI325X"]}}})
    result = runner.invoke(app, ["validate", "-f", "-", "-o", "json"], input=yaml.safe_dump(warned))
    assert result.exit_code == 0, result.output
    (document,) = json.loads(result.stdout)["documents"]
    assert document["file"] == "-" and document["valid"] is True
    assert [w["field"] for w in document["warnings"]] == ["spec.accelerator.productNames[0]"]


def test_validate_help_documents_the_exit_codes_and_the_outputs() -> None:
    result = runner.invoke(app, ["validate", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "Exit codes: 0 every SpeculativeDeployment is valid (warnings and notes allowed); 1 one is invalid" in text
    assert "text|json" in text and "directory" in text


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
