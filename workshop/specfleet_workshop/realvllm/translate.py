"""A pod's rendered `vllm serve` argv -> the argv real vLLM runs on 2 CPU cores. Pure.

Only what is tied to the hardware or to downloading weights changes; every other flag, the
`--speculative-config` keys and `--custom-histogram-buckets` pass through as rendered, so real vLLM
judges exactly what the operator would deploy. Each change is reported as one line.

| in the pod's argv | on CPU | why |
| --- | --- | --- |
| the model (positional or `--model`) | the tiny target's directory | no hub; 2 cores |
| `--speculative-config` `model` | a tiny drafter, by `DRAFTER_TABLE` | the same |
| `--speculative-config` `revision`, `code_revision`, `quantization` | dropped | local fp32 weights |
| `--speculative-config` `draft_tensor_parallel_size` | 1 | one CPU device |
| `--tensor-parallel-size`, `-tp` | 1 | one CPU device |
| `--host`, `--port` | 127.0.0.1 and a free port | several servers share the loopback |
| `--gpu-memory-utilization` | dropped | the CPU KV cache is `VLLM_CPU_KVCACHE_SPACE` (1 GiB) |
| `--dtype` | float32 | the tiny models are fp32 |
| `--max-model-len`, `--max-num-seqs`, `--max-num-batched-tokens` | 1024, 8, 1024 | fit the 1 GiB KV cache |
| `--revision`, `--quantization`, `--download-dir` | dropped | local fp32 weights |
| (added) `--enforce-eager` | | skips 18 s of compile warm-up, same throughput |
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from specfleet_workshop.realvllm.models import TinyModel, model_dir

TINY_PREFIX = "specfleet-tiny/"
"""Model ids `specfleet-tiny/<name>` name a tiny model directly (e.g. `specfleet-tiny/bad-drafter`)."""

DRAFTER_TABLE: tuple[tuple[str, TinyModel], ...] = (
    ("*bad-drafter*", TinyModel.BAD_DRAFTER),
    ("*", TinyModel.GOOD_DRAFTER),
)
"""A drafter id (fnmatch, first match) -> the tiny drafter standing in for it: any real drafter is
assumed good; a canary that should fail names one like `specfleet-tiny/bad-drafter`."""

SUPPORTED_METHODS = frozenset({"ngram", "draft_model"})
"""Methods the tiny models can serve on CPU. EAGLE/EAGLE-3, MTP, Medusa, DFlash and DSpark need a drafter
trained for the target's architecture (or layers the tiny Llama lacks); ngram_gpu needs a GPU; suffix
needs the arctic-inference package."""

MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 1024

_DROPPED = ("--gpu-memory-utilization", "--revision", "--quantization", "-q", "--download-dir")
_SET = {
    "--tensor-parallel-size": "1",
    "-tp": "1",
    "--dtype": "float32",
    "--max-model-len": str(MAX_MODEL_LEN),
    "--max-num-seqs": str(MAX_NUM_SEQS),
    "--max-num-batched-tokens": str(MAX_NUM_BATCHED_TOKENS),
}
_ADDED = ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens")
_SPECULATIVE_DROPPED = ("revision", "code_revision", "quantization")


class UntranslatableError(ValueError):
    """The argv cannot run on the tiny models (a method that needs a trained drafter, no model)."""


@dataclass(frozen=True)
class Translation:
    argv: tuple[str, ...]
    """The arguments after `vllm serve`."""
    changes: tuple[str, ...]
    """One line per translation made, e.g. `--tensor-parallel-size 8 -> 1`."""


def drafter_for(model_id: str) -> TinyModel:
    if model_id.startswith(TINY_PREFIX):
        return TinyModel(model_id.removeprefix(TINY_PREFIX))
    return next(tiny for pattern, tiny in DRAFTER_TABLE if fnmatchcase(model_id.lower(), pattern))


def _target_for(model_id: str) -> TinyModel:
    if model_id.startswith(TINY_PREFIX):
        return TinyModel(model_id.removeprefix(TINY_PREFIX))
    return TinyModel.TARGET


def _split(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """`--flag value` / `--flag=value` / `--switch` / positional -> (name or positional, value) in order."""
    items: list[tuple[str, str | None]] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            items.append((name, value))
        elif arg.startswith("-") and index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            items.append((arg, argv[index + 1]))
            index += 1
        else:
            items.append((arg, None))
        index += 1
    return items


def _speculative(text: str, models: Path, strict: bool) -> tuple[str, list[str]]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise UntranslatableError(f"--speculative-config is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise UntranslatableError("--speculative-config is not a JSON object")
    method = config.get("method") or "draft_model"
    if method not in SUPPORTED_METHODS and not strict:
        return text, [f"speculative method {method} kept as rendered: no tiny drafter for it"]
    if method not in SUPPORTED_METHODS:
        raise UntranslatableError(
            f"speculative method {method!r} cannot run on the tiny CPU models (supported: "
            f"{', '.join(sorted(SUPPORTED_METHODS))})"
        )
    changes = []
    if "model" in config and method == "draft_model":
        tiny = drafter_for(str(config["model"]))
        changes.append(f"speculative model {config['model']} -> {tiny.value}")
        config["model"] = str(model_dir(models, tiny))
    for key in _SPECULATIVE_DROPPED:
        if key in config:
            changes.append(f"speculative {key} {config.pop(key)} dropped")
    if config.get("draft_tensor_parallel_size", 1) != 1:
        changes.append(f"speculative draft_tensor_parallel_size {config['draft_tensor_parallel_size']} -> 1")
        config["draft_tensor_parallel_size"] = 1
    return json.dumps(config, sort_keys=True, separators=(",", ":")), changes


def translate(argv: Sequence[str], models: Path, port: int, strict: bool = True) -> Translation:
    """The CPU argv for a pod's `vllm serve` arguments (without `vllm serve`), with the tiny models in `models`.

    `strict=False` keeps a speculative config the tiny models cannot serve as rendered instead of refusing
    it: enough for vLLM's argument parser, not for a server.
    """
    out: list[str] = []
    changes: list[str] = []
    seen: set[str] = set()
    has_model = False
    for name, value in _split(argv):
        seen.add(name)
        if not name.startswith("-") or name == "--model":
            model_id = value if name == "--model" else name
            if model_id is None:
                raise UntranslatableError("--model has no value")
            tiny = _target_for(model_id)
            changes.append(f"model {model_id} -> {tiny.value}")
            out.append(str(model_dir(models, tiny)))
            has_model = True
        elif name in _DROPPED:
            changes.append(f"{name} {value} dropped")
        elif name in _SET:
            if value != _SET[name]:
                changes.append(f"{name} {value} -> {_SET[name]}")
            out += [name, _SET[name]]
        elif name == "--host":
            out += [name, "127.0.0.1"]
            changes.append(f"--host {value} -> 127.0.0.1")
        elif name == "--port":
            out += [name, str(port)]
            changes.append(f"--port {value} -> {port}")
        elif name == "--speculative-config" and value is not None:
            text, more = _speculative(value, models, strict)
            out += [name, text]
            changes += more
        else:
            out += [name] if value is None else [name, value]
    if not has_model:
        raise UntranslatableError("no model argument")
    for name in _ADDED:
        if name not in seen:
            out += [name, _SET[name]]
            changes.append(f"{name} {_SET[name]} added")
    for name, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        if name not in seen:
            out += [name, value]
            changes.append(f"{name} {value} added")
    if "--enforce-eager" not in seen:
        out.append("--enforce-eager")
        changes.append("--enforce-eager added")
    return Translation(argv=tuple(out), changes=tuple(changes))
