"""The runtime distribution (operator/pyproject.toml, `specfleet`: what `pip install specfleet` and the operator
image install) holds no dev tooling and depends on none of the tooling's libraries."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]

TOOLING_PACKAGE = "specfleet_workshop"

TOOLING_MODULE_NAMES = ("devcluster", "sim", "realvllm", "fleetpods", "loadtest", "demo", "chartgen", "cachedir")

TOOLING_ONLY_DEPENDENCIES = {"aiohttp", "matplotlib", "transformers"}
"""What only the tooling needs: the load test's client, its plots, the simulator's tiny tokenizers (the
preflight's tokenizer loading is the runtime's optional `preflight` extra, not a dependency)."""


def project(directory: str) -> dict:
    return tomllib.loads((REPO / directory / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """Built from a copy of operator/: setuptools builds in the source tree, and its build/ keeps modules that were
    since removed from the sources."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "operator"
    shutil.copytree(REPO / "operator", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("specfleet-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_runtime_wheel_holds_no_tooling_module(runtime_wheel: zipfile.ZipFile) -> None:
    names = runtime_wheel.namelist()
    assert "specfleet/cli/main.py" in names and "specfleet/controller/__init__.py" in names
    assert not [name for name in names if name.startswith(f"{TOOLING_PACKAGE}/")]
    tooling = [
        name for name in names
        if name.startswith("specfleet/") and Path(name).parts[1].removesuffix(".py") in TOOLING_MODULE_NAMES
    ]  # fmt: skip
    assert tooling == []


def test_the_runtime_wheel_depends_on_no_tooling_library(runtime_wheel: zipfile.ZipFile) -> None:
    (metadata,) = [name for name in runtime_wheel.namelist() if name.endswith(".dist-info/METADATA")]
    requirements = [
        Requirement(line.removeprefix("Requires-Dist:").strip())
        for line in runtime_wheel.read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    unconditional = {requirement.name.lower() for requirement in requirements if requirement.marker is None}
    assert unconditional == {Requirement(line).name.lower() for line in project("operator")["dependencies"]}
    assert not unconditional & TOOLING_ONLY_DEPENDENCIES
    assert "specfleet" not in {requirement.name for requirement in requirements}


def test_the_tooling_distribution_depends_on_the_runtime_and_adds_the_commands() -> None:
    workshop = project("workshop")
    assert "specfleet" in {Requirement(line).name for line in workshop["dependencies"]}
    assert set(workshop["entry-points"]["specfleet.commands"]) == {"dev", "sim", "loadtest", "chart-file", "demo"}


def test_the_development_install_is_both_distributions() -> None:
    """The root pyproject.toml (`pip install -e '.[test]'`) installs both packages' sources, their dependencies
    and the tooling's entry points, so the README's two commands stay as they are."""
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = {Requirement(line).name for line in root["project"]["dependencies"]}
    for part in ("operator", "workshop"):
        wanted = {Requirement(line).name for line in project(part)["dependencies"]} - {"specfleet"}
        assert wanted <= names, part
    assert root["project"]["entry-points"] == project("workshop")["entry-points"]
    assert root["tool"]["setuptools"]["packages"]["find"]["where"] == ["operator", "workshop"]
