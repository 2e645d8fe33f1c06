"""`specfleet run --allow-prometheus-url`: documented in --help; an entry that is not a plain base URL (userinfo,
a query, a fragment, another scheme) is refused naming the flag, before the operator connects to anything."""

import re

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_help_documents_the_allow_list() -> None:
    result = runner.invoke(app, ["run", "--help"], env=ENV)
    assert result.exit_code == 0 and "--allow-prometheus-url" in result.output


@pytest.mark.parametrize(
    "entry", ["http://user:secret@prom:9090", "http://prom:9090?x=1", "http://prom:9090#f", "ftp://prom", "prom:9090"]
)
def test_an_allow_list_entry_that_is_not_a_plain_base_url_is_refused_naming_the_flag(entry: str) -> None:
    result = runner.invoke(app, ["run", "--allow-prometheus-url", entry], env=ENV)
    assert result.exit_code == 2, result.output
    assert re.search("Invalid value for '?--allow-prometheus-url'?:", result.output), result.output
    assert "secret" not in result.output
