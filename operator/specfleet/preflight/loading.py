"""Read a model's vocabulary and weight size from a local directory or the Hugging Face hub.

Hub ids go through HF_HOME's cache (the serving pods' model cache), so an offline pod (HF_HUB_OFFLINE=1)
reads what is cached and an online one downloads only tokenizer and config files, never weights.
transformers and huggingface_hub are imported here only: the serving image has them, the operator need not.
"""

import json
from pathlib import Path
from typing import Any

from specfleet.preflight.check import Vocabulary

WEIGHT_SUFFIXES = ((".safetensors",), (".bin", ".pt", ".pth"))
"""Weight files by preference: a repository with both formats counts its safetensors only."""
GIB = 1024**3


def where(model: str, revision: str | None) -> str:
    return f"{model}@{revision}" if revision and not Path(model).is_dir() else model


def tokenizer_vocabulary(model: str, revision: str | None) -> Vocabulary:
    """The vocabulary as transformers' AutoTokenizer loads it (what vLLM itself would load)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, revision=revision)
    return Vocabulary(
        source=f"tokenizer of {where(model, revision)}",
        size=len(tokenizer),
        bos_id=tokenizer.bos_token_id,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        tokens=tokenizer.get_vocab(),
    )


def _file(model: str, revision: str | None, name: str) -> Path:
    if Path(model).is_dir():
        return Path(model) / name
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(model, name, revision=revision))


def _first_id(value: Any) -> int | None:
    """A config's special-token id; a list (several EOS ids, as Llama 3.1 has) counts by its first."""
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def config_vocabulary(model: str, revision: str | None) -> Vocabulary:
    """The vocabulary a model's config.json declares: for drafter heads (EAGLE, Medusa) that ship no tokenizer."""
    config = json.loads(_file(model, revision, "config.json").read_text())
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    return Vocabulary(
        source=f"config.json of {where(model, revision)}",
        size=int(config["vocab_size"]),
        bos_id=_first_id(config.get("bos_token_id")),
        eos_id=_first_id(config.get("eos_token_id")),
        pad_id=_first_id(config.get("pad_token_id")),
    )


def _weight_bytes(sizes: dict[str, int]) -> int | None:
    """Top-level weight files only (Llama repositories also keep `original/*.pth`), in the preferred format."""
    top = {name: size for name, size in sizes.items() if "/" not in name}
    for suffixes in WEIGHT_SUFFIXES:
        chosen = [size for name, size in top.items() if name.endswith(suffixes)]
        if chosen:
            return sum(chosen)
    return None


def weights_gib(model: str, revision: str | None) -> float | None:
    """The size of the model's weight files: a local directory's, the hub's file listing, or the cached
    snapshot's when offline; None when no weight file is known (nothing is downloaded to find out)."""
    path = Path(model)
    if not path.is_dir():
        from huggingface_hub import HfApi, snapshot_download

        try:
            info = HfApi().model_info(model, revision=revision, files_metadata=True)
            found = _weight_bytes({s.rfilename: s.size or 0 for s in info.siblings or []})
            return found / GIB if found else None
        except Exception:  # offline, or no such repository: what the cache holds, if anything
            try:
                path = Path(snapshot_download(model, revision=revision, local_files_only=True))
            except Exception:
                return None
    found = _weight_bytes({p.name: p.stat().st_size for p in path.iterdir() if p.is_file()})
    return found / GIB if found else None
