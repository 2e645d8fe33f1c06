"""The dev tooling's commands reach `specfleet` through the `specfleet.commands` entry points, and say how to
install the tooling when it is not."""

import typer
from typer.testing import CliRunner

from specfleet.cli import plugins
from specfleet.cli.app import app


def test_every_tooling_command_is_an_installed_entry_point() -> None:
    """The editable install (`pip install -e '.[test]'`) installs the tooling: each command it names is found."""
    assert set(plugins.installed_commands()) == set(plugins.TOOLING_COMMANDS)


def test_the_installed_tooling_commands_run() -> None:
    result = CliRunner().invoke(app, ["dev", "--help"])
    assert result.exit_code == 0, result.output
    assert "not installed" not in result.output


def test_without_the_tooling_each_command_says_how_to_install_it() -> None:
    bare = typer.Typer()
    bare.command()(lambda: None)  # a second command, so typer keeps the command names
    plugins.add_commands(bare, plugins.TOOLING_COMMANDS, installed={})
    runner = CliRunner()
    listed = runner.invoke(bare, ["--help"])
    for name in plugins.TOOLING_COMMANDS:
        assert name in listed.output
        result = runner.invoke(bare, [name, "up", "--free-ports"])
        assert result.exit_code == 2
        assert plugins.not_installed_message(name) in result.output


def test_an_entry_point_adds_its_command_where_it_is_asked_for() -> None:
    added: list[str] = []

    def add_sim(app: typer.Typer) -> None:
        added.append("sim")

        @app.command(name="sim")
        def sim() -> None:
            typer.echo("simulating")

    bare = typer.Typer()
    bare.command(name="other")(lambda: None)
    plugins.add_commands(bare, ["sim"], installed={"sim": add_sim})
    assert added == ["sim"]
    assert CliRunner().invoke(bare, ["sim"]).output == "simulating\n"
