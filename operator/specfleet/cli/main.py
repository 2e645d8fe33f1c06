"""Entry point of `specfleet`, `kubectl-specfleet` and `python -m specfleet.cli`.

A plain `status NAME [options]` runs straight from `specfleet.cli.view`, without typer: `kubectl specfleet
status` is typed many times a day, and importing typer and building the app with its pydantic parameter
checks costs about 0.15 s before any command runs. Everything else (and anything unusual in a `status`
command line, with typer's own messages) goes to the typer app in `specfleet.cli.app`, imported only then.
"""

import os
import sys
from typing import Any

from specfleet.cli import view


def __getattr__(name: str) -> Any:
    """`from specfleet.cli.main import app` still works, without making every import of this module pay for it."""
    if name == "app":
        from specfleet.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STATUS_OPTIONS = {
    "-n": "namespace", "--namespace": "namespace", "-o": "output", "--output": "output",
    "--kubeconfig": "kubeconfig", "--context": "context",
}  # fmt: skip
_STATUS_FLAGS = {"-w": "watch", "--watch": "watch"}


def plain_status_arguments(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments typer gives `status_command` for a plain `status NAME [options]`, else None.

    Only the plain forms: anything else (--help, an unknown or bundled option, a missing value, a value
    typer would refuse) returns None and goes through typer, with its messages. A unit test checks that
    both give the same arguments.
    """
    if not args or args[0] != "status":
        return None
    values: dict[str, Any] = {"name": None, "watch": False, "namespace": None, "output": "table",
                              "kubeconfig": None, "context": None, "wait": False, "timeout": None}  # fmt: skip
    remaining = iter(args[1:])
    for arg in remaining:
        option, equals, inline = arg.partition("=")
        if arg in _STATUS_FLAGS:
            values[_STATUS_FLAGS[arg]] = True
        elif option in _STATUS_OPTIONS and (equals or arg == option):
            value = inline if equals else next(remaining, None)
            if value is None or (not equals and value.startswith("-")) or (equals and not option.startswith("--")):
                return None
            values[_STATUS_OPTIONS[option]] = value
        elif arg.startswith("-") or values["name"] is not None:
            return None
        else:
            values["name"] = arg
    if values["name"] is None or values["output"] not in {output.value for output in view.Output}:
        return None
    return {**values, "output": view.Output(values["output"])}


def _status_without_typer(arguments: dict[str, Any]) -> None:
    """Run `status` as click's main would: "Aborted!" on Ctrl-C, quiet on a closed pipe (`| head`)."""
    try:
        view.show_status(**arguments)
    except KeyboardInterrupt:
        print("\nAborted!", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(1)


def main() -> None:
    arguments = plain_status_arguments(sys.argv[1:])
    if arguments is not None:
        _status_without_typer(arguments)
        return
    from specfleet.cli.app import app

    app()
