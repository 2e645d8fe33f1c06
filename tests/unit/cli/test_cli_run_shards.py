"""`specfleet run --shards N --shard I`: documented in --help, and refused with the flag named before the operator
connects to anything."""

import re

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app

runner = CliRunner()


def test_help_documents_the_shard_flags() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    assert "--shards" in result.output and "--shard " in result.output
    assert "BASE-shard-I-of-N" in result.output and "specfleet.io/shard" in result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--shards", "2", "--leader-election", "off"], "--shards"),  # no election to give each shard its Lease
        (["--shards", "0"], "--shards"),
        (["--shards", "2", "--shard", "2", "--leader-election", "ops/specfleet"], "--shard"),
        (["--shard", "1"], "--shard"),
        (["--shard", "-1"], "--shard"),
    ],
)
def test_a_shard_that_cannot_be_is_refused_naming_the_flag(args: list[str], flag: str) -> None:
    result = runner.invoke(app, ["run", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert re.search(f"Invalid value for '?{flag}'?:", result.output), result.output
