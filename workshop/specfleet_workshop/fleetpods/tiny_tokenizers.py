"""Tiny tokenizers made locally, saved as transformers saves a hub tokenizer, for the preflight to load for real.

Tests make pairs that differ where a drafter can differ from its target (vocabulary size, BOS/EOS/PAD ids);
the preflight kubelet (`kubelet`) makes one stand-in for each hub model a preflight names that its model cache lacks.
"""

import json
import re
from pathlib import Path

STAND_IN_VOCAB = 512
COMMIT = "0" * 40
"""The commit a hand-made hub snapshot claims to be (refs/<revision> points at it)."""


def write_tokenizer(
    directory: Path, vocab_size: int = STAND_IN_VOCAB, bos_id: int = 1, eos_id: int = 2, pad_id: int | None = 0
) -> Path:
    """A word-level tokenizer of `vocab_size` ids, `<s>`, `</s>` and `<pad>` at the ids given, `tok<i>` elsewhere,
    and the config.json a model beside it would have."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {"<s>": bos_id, "</s>": eos_id} | ({"<pad>": pad_id} if pad_id is not None else {})
    taken = set(specials.values())
    vocab = specials | {f"tok{i}": i for i in range(vocab_size) if i not in taken}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>" if pad_id is not None else None
    )
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(directory))
    # transformers reads a hub model's config.json before its tokenizer; a drafter head's is all it has
    config = {"vocab_size": vocab_size, "bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def hub_snapshot(hf_home: Path, repo_id: str, revision: str | None) -> Path:
    """Where the hub cache under `hf_home` keeps `repo_id` at `revision`, made so that offline loading finds it."""
    revision = revision or "main"
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = revision if re.fullmatch(r"[0-9a-f]{40}", revision) else COMMIT
    if commit != revision:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(commit)
    return repo / "snapshots" / commit


def has_snapshot(hf_home: Path, repo_id: str, revision: str | None) -> bool:
    revision = revision or "main"
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    return (repo / "snapshots" / commit).is_dir()
