"""The `specfleet` / `kubectl specfleet` command line as a typer app (`specfleet.cli.main` runs it).

typer builds every command's options at start-up, even for `--help`, so the modules here import only
typer, rich and the standard library at the top; each command imports what it runs (the API models,
rendering, the operator, the Kubernetes library) in its body (`benchmarks/cli_startup.py` times it).
"""

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from specfleet import __version__
from specfleet.api.vocabulary import KIND, Track
from specfleet.cli import plugins, rollouts
from specfleet.cli.run import run
from specfleet.cli.view import GUARDRAILS_HEADER, YAML_WIDTH
from specfleet.console import make_console
from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy

app = typer.Typer(
    help="specfleet: canary speculative-decoding configs for vLLM fleets on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
tooling = plugins.installed_commands()  # the dev tooling's commands, when specfleet-workshop is installed
plugins.add_commands(app, ["dev"], tooling)
app.command()(run)

stderr = make_console(stderr=True)

plugins.add_commands(app, ["sim", "loadtest"], tooling)
rollouts.register(app)  # after `sim`: the help lists the commands in the order they were registered


FileOption = Annotated[
    Path,
    typer.Option("--filename", "-f", help="SpeculativeDeployment manifest (YAML; '-' reads standard input)."),
]


def _load_documents(path: Path) -> list[Any]:
    import yaml

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        stderr.print(f"[red]error:[/] cannot read {path}: {error.strerror}")
        raise typer.Exit(2) from error
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        stderr.print(f"[red]error:[/] {path} is not valid YAML: {error}")
        raise typer.Exit(1) from error


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"specfleet {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """specfleet: canary speculative-decoding configs for vLLM fleets on Kubernetes."""


@app.command()
def crd() -> None:
    """Print the SpeculativeDeployment CRD, generated from the API models."""
    from specfleet.api.crd import crd_yaml

    typer.echo(crd_yaml(), nl=False)


plugins.add_commands(app, ["chart-file"], tooling)


class ValidateOutput(StrEnum):
    TEXT = "text"
    JSON = "json"


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _manifest_files(path: Path) -> list[Path]:
    """`path` itself, or the manifests directly in the directory `path`, by name."""
    if str(path) == "-" or not path.is_dir():
        return [path]
    found = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    if not found:
        stderr.print(f"[red]error:[/] {path} holds no {'/'.join(MANIFEST_SUFFIXES)} file")
        raise typer.Exit(1)
    return found


def _read(path: Path) -> str:
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        stderr.print(f"[red]error:[/] cannot read {path}: {error.strerror}")
        raise typer.Exit(2) from error


VALIDATE_HELP = (
    "Check SpeculativeDeployments offline: schema, cross-field rules, vLLM version support, GPU products and "
    "memory budgets, and what spec.template adds to the pods against the operator's template policy.\n\n"
    "Prints one line per problem, naming the file, the object and the field: errors, warnings (risks it may run "
    "with) and notes (what could not be checked). Documents of other kinds (a Secret beside the fleet) are "
    "skipped and counted.\n\n"
    "Exit codes: 0 every SpeculativeDeployment is valid (warnings and notes allowed); 1 one is invalid, a file "
    "does not parse, or no SpeculativeDeployment was found; 2 a file cannot be read."
)


@app.command(no_args_is_help=True, help=VALIDATE_HELP)
def validate(
    path: Annotated[
        Path,
        typer.Option(
            "--filename",
            "-f",
            help="A SpeculativeDeployment manifest (YAML, or JSON in a .json file; '-' reads standard input), or a "
            "directory: every *.yaml, *.yml and *.json directly in it, by name.",
        ),
    ],
    output: Annotated[
        ValidateOutput,
        typer.Option(
            "--output",
            "-o",
            help="text for people; json for scripts (per document: file, name, valid, "
            "errors, warnings, notes; and the documents skipped).",
        ),
    ] = ValidateOutput.TEXT,
    template_policy: Annotated[
        TemplatePolicy,
        typer.Option(help="The operator's --template-policy (the chart's templatePolicy) to check spec.template by."),
    ] = DEFAULT_POLICY,
) -> None:
    """Check SpeculativeDeployments offline (the help text is VALIDATE_HELP)."""
    import json

    from specfleet.api.problems import Severity
    from specfleet.validation import reports_json, validate_text

    files = [validate_text(str(file), _read(file), template_policy) for file in _manifest_files(path)]
    summary = reports_json(files)
    if output is ValidateOutput.JSON:
        typer.echo(json.dumps(summary, indent=2))
    for file in files if output is ValidateOutput.TEXT else []:
        for document in file.documents:
            where = ": ".join(part for part in ("" if file.source == "-" else file.source, document.label) if part)
            for problem in document.problems:
                typer.echo(f"{where}: {problem}" if where else str(problem), err=problem.severity is not Severity.ERROR)
            if document.valid:
                stderr.print(f"[green]{where}: valid[/]", highlight=False)
    skipped = summary["skipped"]
    if skipped:
        kinds = ", ".join(sorted({s["kind"] for s in skipped}))
        count = "1 document of another kind" if len(skipped) == 1 else f"{len(skipped)} documents of other kinds"
        stderr.print(f"skipped {count} ({kinds})")
    if not summary["documents"]:
        stderr.print(f"[red]error:[/] {path} holds no {KIND}")
    raise typer.Exit(0 if summary["valid"] else 1)


@app.command()
def reference() -> None:
    """Print the field reference of SpeculativeDeployment (Markdown), generated from the API models."""
    from specfleet.api.reference import reference_markdown

    typer.echo(reference_markdown())


@app.command()
def guardrails() -> None:
    """Print the built-in guardrails (spec field, default, metrics, how `status` shows them) as YAML, from the
    judge's registry: `kubectl specfleet status` reads its copy of this without importing the judge."""
    import yaml

    from specfleet.judge.guardrails import described

    typer.echo(GUARDRAILS_HEADER + yaml.safe_dump(described(), sort_keys=False, width=YAML_WIDTH), nl=False)


@app.command(name="render")
def render_command(
    filename: FileOption,
    track: Annotated[Track, typer.Option(help="Which track to render.")] = Track.STABLE,
) -> None:
    """Print the Kubernetes objects a SpeculativeDeployment becomes, as multi-document YAML."""
    import yaml

    from specfleet.api.problems import InvalidSpecError
    from specfleet.api.resource import SpeculativeDeployment
    from specfleet.render.manifests import render
    from specfleet.validation import errors, validate_document

    manifests = []
    for document in _load_documents(filename):
        problems = errors(validate_document(document))
        if problems:
            for problem in problems:
                stderr.print(f"[red]error:[/] {problem}")
            raise typer.Exit(1)
        try:
            manifests += render(SpeculativeDeployment.from_mapping(document), track)
        except InvalidSpecError as error:
            for problem in error.problems:
                stderr.print(f"[red]error:[/] {problem}")
            raise typer.Exit(1) from error
    typer.echo(yaml.safe_dump_all(manifests, sort_keys=False, width=120), nl=False)


plugins.add_commands(app, ["demo"], tooling)
