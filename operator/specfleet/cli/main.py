"""The `specfleet` / `kubectl specfleet` command line."""

import typer

from specfleet.devcluster.cli import app as dev_app

app = typer.Typer(
    help="specfleet: canary speculative-decoding configs for vLLM fleets on Kubernetes.",
    no_args_is_help=True,
)
app.add_typer(dev_app, name="dev")


def main() -> None:
    app()
