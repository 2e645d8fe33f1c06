"""The commands the dev tooling adds to `specfleet`, found through the `specfleet.commands` entry points.

The runtime never imports the tooling (`specfleet_workshop`, distribution specfleet-workshop): each entry point
names a function that adds its command to the typer app. When the tooling is not installed, each of its
commands is still listed and says how to install it, rather than typer's "No such command".
"""

from collections.abc import Callable, Iterable
from importlib.metadata import entry_points

import typer

ENTRY_POINT_GROUP = "specfleet.commands"

TOOLING_DISTRIBUTION = "specfleet-workshop"

TOOLING_COMMANDS = ("dev", "sim", "loadtest", "chart-file", "demo")
"""The commands specfleet-workshop provides, for the message when it is not installed."""

AddCommand = Callable[[typer.Typer], None]


def installed_commands() -> dict[str, AddCommand]:
    """The installed entry points of the group, by command name, loaded (the first one of a name wins)."""
    found: dict[str, AddCommand] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry_point.name, entry_point.load())
    return found


def not_installed_message(name: str) -> str:
    return f"`specfleet {name}` is part of the dev tooling, which is not installed: pip install {TOOLING_DISTRIBUTION}"


def _add_missing(app: typer.Typer, name: str) -> None:
    message = not_installed_message(name)

    @app.command(
        name=name,
        help=f"(not installed: pip install {TOOLING_DISTRIBUTION})",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def missing(ctx: typer.Context) -> None:
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2)


def add_commands(app: typer.Typer, names: Iterable[str], installed: dict[str, AddCommand]) -> None:
    """Add the commands `names` to `app` (in that order, which the help keeps): from their entry points when
    installed, else as a command that says how to install them."""
    for name in names:
        add = installed.get(name)
        if add is None:
            _add_missing(app, name)
        else:
            add(app)
