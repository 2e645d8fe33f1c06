"""The dev tooling's commands of `specfleet`, each added by an entry point of the `specfleet.commands` group
(`specfleet.cli.plugins`). Each imports what it runs in its body: the CLI builds every command at start-up."""

from typing import Annotated

import typer

from specfleet.console import make_console

stderr = make_console(stderr=True)

CHART_FILE_NAMES = (
    "files/prometheus-rules.yaml",
    "files/grafana-dashboard.json",
    "files/template-policy.yaml",
    "templates/crds/specfleet.io_speculativedeployments.yaml",
)
"""The keys of `specfleet_workshop.chartgen.GENERATED`, for the help text without importing the generators (a
unit test checks that both agree)."""

SIM_SUMMARY = (
    "Stand in for vLLM: serve each pod's /metrics from a model of speculative decoding, for Prometheus to scrape."
)


def add_dev(app: typer.Typer) -> None:
    from specfleet_workshop.devcluster.cli import app as dev_app

    app.add_typer(dev_app, name="dev")


def add_sim(app: typer.Typer) -> None:
    @app.command(
        name="sim",
        help=f"{SIM_SUMMARY}\n\n`specfleet sim --help` lists its options.",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def sim(ctx: typer.Context) -> None:
        """Hand the arguments to the command of the engine they ask for (`specfleet_workshop.cli.sim`), imported
        only now (it loads the engines)."""
        from specfleet_workshop.cli.sim import engine_command

        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command()(engine_command(ctx.args))
        typer.main.get_command(single).main(args=ctx.args, prog_name=ctx.command_path)


def add_loadtest(app: typer.Typer) -> None:
    from specfleet_workshop.cli.loadtest import loadtest_command

    app.command(name="loadtest")(loadtest_command)


def add_chart_file(app: typer.Typer) -> None:
    @app.command(name="chart-file")
    def chart_file(name: Annotated[str, typer.Argument(help=f"One of: {', '.join(CHART_FILE_NAMES)}.")]) -> None:
        """Print a Helm chart file generated from the Python sources (alert rules, Grafana dashboard, template
        policy, the CRD template)."""
        from specfleet_workshop.chartgen import GENERATED as CHART_FILES

        if name not in CHART_FILES:
            stderr.print(f"[red]error:[/] {name} is not a generated chart file; one of: {', '.join(CHART_FILES)}")
            raise typer.Exit(2)
        typer.echo(CHART_FILES[name](), nl=False)


def add_demo(app: typer.Typer) -> None:
    @app.command()
    def demo(
        keep: Annotated[
            bool, typer.Option("--keep", help="Leave the cluster, simulator and operator running.")
        ] = False,
    ) -> None:
        """Play the whole product on a local cluster: a config goes Healthy, a better one is promoted, a bad one
        is rolled back automatically. Builds what it needs on first use; cleans up unless --keep."""
        from specfleet_workshop.demo import run_demo

        outcomes = run_demo(keep)
        if outcomes != ["Healthy", "Promoted", "RolledBack"]:
            stderr.print(f"[red]the story did not go as written:[/] {outcomes}")
            raise typer.Exit(1)
