"""The CLI starts without the heavy modules (`benchmarks/cli_startup.py` times it), and what it repeats to
avoid them agrees with the source it stands in for."""

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from specfleet.cli import app as cli_app
from specfleet.cli import main, rollouts
from specfleet_workshop.chartgen import GENERATED
from specfleet_workshop.cli import commands as workshop_commands
from specfleet_workshop.cli.sim import sim_command

HEAVY = (
    "kubernetes",
    "kopf",
    "specfleet.api.base",
    "specfleet_workshop.sim",
    "specfleet_workshop.devcluster.cluster",
    "aiohttp",
)
"""Not pydantic itself: typer (0.29) coerces every non-flag parameter through a pydantic TypeAdapter. What costs
is building specfleet's API models, which all derive from `specfleet.api.base` (`specfleet.api` loads them
lazily, so its vocabulary is cheap to import)."""


def modules_loaded_by(argv: list[str], tmp_path: Path, also: tuple[str, ...] = ()) -> list[str]:
    """Run the CLI in a fresh interpreter with `argv`; the heavy modules (and `also`) it imported on the way."""
    code = f"""
import json, sys
sys.argv = {["specfleet", *argv]!r}
try:
    from specfleet.cli.main import main
    main()
except SystemExit:
    pass
finally:
    heavy = sorted({{name.split(".")[0] if not name.startswith("specfleet") else name for name in sys.modules
                    if name.startswith({HEAVY + also!r})}})
    print(json.dumps(heavy), file=open({str(tmp_path / "modules.json")!r}, "w"))
"""
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    return json.loads((tmp_path / "modules.json").read_text())


@pytest.mark.parametrize(
    "argv", [["--help"], ["dev", "--help"], ["status", "--help"], ["render", "--help"], ["loadtest", "--help"]]
)
def test_help_imports_none_of_the_heavy_modules(argv: list[str], tmp_path: Path) -> None:
    assert modules_loaded_by(argv, tmp_path) == []


def test_status_reads_a_plain_kubeconfig_without_the_kubernetes_library(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: abc}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    loaded = modules_loaded_by(["status", "llama", "--kubeconfig", str(kubeconfig)], tmp_path, also=("pydantic",))
    assert loaded == []  # nor pydantic: a plain `status` does not go through typer's parameter checks


def test_the_vocabulary_builds_no_api_models() -> None:
    """The CLI, the simulator and the benchmarks take their names from here without paying for pydantic."""
    code = "import sys, specfleet.api.vocabulary; print(*sorted(m for m in sys.modules if m.startswith(MODELS)))"
    prefixes = ("specfleet.api", "pydantic")
    loaded = subprocess.run([sys.executable, "-c", f"MODELS = {prefixes!r}; {code}"], capture_output=True, text=True,
                            timeout=60, check=True)  # fmt: skip
    assert loaded.stdout.split() == ["specfleet.api", "specfleet.api.vocabulary"]


def test_what_the_cli_repeats_agrees_with_its_source() -> None:
    assert tuple(GENERATED) == workshop_commands.CHART_FILE_NAMES
    assert (sim_command.__doc__ or "").splitlines()[0] == workshop_commands.SIM_SUMMARY


def test_sim_hands_its_arguments_and_help_to_the_simulators_command() -> None:
    result = CliRunner().invoke(cli_app.app, ["sim", "--help"])
    assert result.exit_code == 0
    assert "sim [OPTIONS]" in result.output and "--scenario" in result.output
    refused = CliRunner().invoke(cli_app.app, ["sim", "--listen", "0.0.0.0:1", "-n", "a", "--scenario", __file__])
    assert refused.exit_code == 2


PLAIN = [
    ["status", "llama"],
    ["status", "llama", "-n", "team-a", "-o", "json"],
    ["status", "-w", "llama", "--namespace=team-a", "--output", "yaml", "--kubeconfig", "/k", "--context", "c"],
    ["status", "llama", "--watch", "-n", "a", "-n", "b", "--context=x", "--kubeconfig=/k"],
]
NOT_PLAIN = [
    ["status"],
    ["status", "--help"],
    ["status", "llama", "other"],
    ["status", "llama", "-o", "xml"],
    ["status", "llama", "-wn", "team-a"],
    ["status", "llama", "-n"],
    ["status", "llama", "-n=team-a"],
    ["status", "llama", "--bogus"],
    ["--version"],
    ["list"],
]


def recording_app(seen: list[dict[str, Any]]) -> typer.Typer:
    """An app whose `status` has the real command's signature and records what typer passes it."""

    @functools.wraps(rollouts.status_command)
    def status(**kwargs: Any) -> None:
        seen.append(kwargs)

    app = typer.Typer()
    app.callback()(lambda: None)
    app.command(name="status")(status)
    return app


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_status_gets_the_arguments_typer_would_give(argv: list[str]) -> None:
    seen: list[dict[str, Any]] = []
    result = CliRunner().invoke(recording_app(seen), argv)
    assert result.exit_code == 0, result.output
    assert main.plain_status_arguments(argv) == seen[0]


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=" ".join)
def test_anything_else_goes_through_typer(argv: list[str]) -> None:
    assert main.plain_status_arguments(argv) is None
