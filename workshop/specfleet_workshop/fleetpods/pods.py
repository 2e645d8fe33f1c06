"""What the dev engines (the simulator, real vLLM) read from a pod: the `vllm serve` arguments, labels, node
and readiness. Pure.

Pods come as the JSON the API server returns (camelCase keys), so the same code reads a watched pod and
a pod template rendered by `specfleet.render.manifests`.
"""

import json
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from specfleet.api.vocabulary import LABEL_TRACK
from specfleet.render.argv import ITL_BUCKETS_FLAG
from specfleet.render.buckets import BucketsError, check_histogram_buckets

DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
SUFFIX_DEFAULT_DEPTH = 24
"""vLLM sets k to suffix_decoding_max_tree_depth (24) when a suffix config gives none."""
BUCKET_FAMILIES = ("inter_token_latency", "time_to_first_token", "request_latency")
"""The `--custom-histogram-buckets` families of the histograms the simulator exposes."""


@dataclass(frozen=True)
class PodIdentity:
    """What a scenario matches on, read from a pod."""

    model: str
    served_model_name: str
    drafter_model: str | None
    method: str | None
    """None when the pod has no speculative config."""
    track: str | None


class PodArgsError(ValueError):
    """The pod's vLLM arguments cannot be read (no model, bad JSON, ...)."""


@dataclass(frozen=True)
class SpeculativeArgs:
    """The parts of `--speculative-config` that shape the simulation."""

    method: str
    model: str | None
    k: int
    schedule: tuple[tuple[int, int, int], ...] = ()
    """`num_speculative_tokens_per_batch_size` rows (start, end, k), depths capped at k."""
    parallel_drafting: bool = False
    draft_tp: int | None = None


@dataclass(frozen=True)
class VllmArgs:
    """The `vllm serve` command line, as far as metrics depend on it."""

    model: str
    served_model_name: str
    tensor_parallel_size: int = 1
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    quantization: str | None = None
    speculative: SpeculativeArgs | None = None
    histogram_buckets: dict[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    """`--custom-histogram-buckets` per family (of BUCKET_FAMILIES); vLLM's defaults for the others."""

    def identity(self, track: str | None) -> PodIdentity:
        """What a scenario's pairs match on."""
        spec = self.speculative
        return PodIdentity(
            model=self.model,
            served_model_name=self.served_model_name,
            drafter_model=spec.model if spec else None,
            method=spec.method if spec else None,
            track=track,
        )


@dataclass(frozen=True)
class PodInfo:
    """One pod as the engines need it."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str] = field(hash=False)
    node_name: str | None
    pod_ip: str | None
    running: bool
    ready: bool
    args: VllmArgs

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def track(self) -> str | None:
        return self.labels.get(LABEL_TRACK)

    @property
    def identity(self) -> PodIdentity:
        return self.args.identity(self.track)


def _flags(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Positional arguments, and each `--flag`'s values (`--flag v`, `--flag=v`, or several after one flag)."""
    positional: list[str] = []
    flags: dict[str, list[str]] = {}
    current: list[str] | None = None
    for arg in argv:
        if arg.startswith("-") and not _is_number(arg):
            name, eq, value = arg.partition("=")
            current = flags.setdefault(name, [])
            if eq:
                current.append(value)
                current = None
        elif current is not None:
            current.append(arg)
        else:
            positional.append(arg)
    return positional, flags


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _one(flags: dict[str, list[str]], *names: str) -> str | None:
    for name in names:
        if flags.get(name):
            return flags[name][0]
    return None


def _infer_method(config: dict[str, Any]) -> str:
    """vLLM's inference when `method` is missing: ngram by name, eagle/eagle3 in the draft name, else draft_model."""
    model = str(config.get("model") or "")
    if model in ("ngram", "suffix"):
        return model
    lowered = model.lower()
    if "eagle3" in lowered:
        return "eagle3"
    if "eagle" in lowered:
        return "eagle"
    return "draft_model"


def parse_speculative_config(text: str) -> SpeculativeArgs:
    """`--speculative-config` JSON -> SpeculativeArgs."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise PodArgsError(f"--speculative-config is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise PodArgsError("--speculative-config is not a JSON object")
    method = str(config.get("method") or _infer_method(config))
    default_depth = int(config.get("suffix_decoding_max_tree_depth", SUFFIX_DEFAULT_DEPTH)) if method == "suffix" else 1
    k = int(config.get("num_speculative_tokens") or default_depth)
    schedule = parse_schedule(config.get("num_speculative_tokens_per_batch_size"), k)
    model = config.get("model")
    draft_tp = config.get("draft_tensor_parallel_size")
    return SpeculativeArgs(
        method=method,
        model=str(model) if model and model != method else None,
        k=k,
        schedule=schedule,
        parallel_drafting=bool(config.get("parallel_drafting")),
        draft_tp=int(draft_tp) if draft_tp else None,
    )


def parse_schedule(rows: Any, k: int) -> tuple[tuple[int, int, int], ...]:
    """`num_speculative_tokens_per_batch_size` -> sorted (start, end, depth) rows, depths capped at k.

    Checked as vLLM's scheduler checks it at start-up (`validate_and_normalize_dynamic_sd_schedule`,
    vllm/v1/spec_decode/dynamic/utils.py): positive inclusive ranges, non-overlapping, the first one
    starting at 1, depths >= 0. A pod with a schedule vLLM refuses would never serve.
    """
    if rows is None:
        return ()
    prefix = "--speculative-config: num_speculative_tokens_per_batch_size"
    if not isinstance(rows, list) or not rows:
        raise PodArgsError(f"{prefix} must be a non-empty list of [start, end, num_speculative_tokens]")
    parsed = []
    for row in rows:
        if not isinstance(row, list | tuple) or len(row) != 3:
            raise PodArgsError(f"{prefix}: each entry must be [start, end, num_speculative_tokens], not {row!r}")
        start, end, depth = (int(value) for value in row)
        if start <= 0 or end <= 0 or start > end or depth < 0:
            raise PodArgsError(f"{prefix}: {row!r} needs 1 <= start <= end and num_speculative_tokens >= 0")
        parsed.append((start, end, depth))
    parsed.sort()
    for (_, previous_end, _), (start, _, _) in pairwise(parsed):
        if start <= previous_end:
            raise PodArgsError(f"{prefix}: batch-size ranges overlap")
    if parsed[0][0] != 1:
        raise PodArgsError(f"{prefix}: the first batch-size range must start at 1")
    return tuple((start, end, min(k, depth)) for start, end, depth in parsed)


def parse_histogram_buckets(text: str) -> dict[str, tuple[float, ...]]:
    """`--custom-histogram-buckets` JSON -> bounds per family the simulator exposes, checked as vLLM checks them.

    Families vLLM knows but the simulator does not expose (iteration_tokens, ...) are checked, then ignored.
    """
    try:
        buckets = check_histogram_buckets(text)
    except BucketsError as error:
        raise PodArgsError(str(error)) from None
    return {family: bounds for family, bounds in buckets.items() if family in BUCKET_FAMILIES}


def parse_vllm_args(argv: list[str]) -> VllmArgs:
    """`[<model>, --flag, value, ...]` (the container's args after `vllm serve`) -> VllmArgs."""
    positional, flags = _flags(argv)
    model = positional[0] if positional else _one(flags, "--model")
    if not model:
        raise PodArgsError("no model argument")
    spec_text = _one(flags, "--speculative-config")
    buckets_text = _one(flags, ITL_BUCKETS_FLAG)
    max_model_len = _one(flags, "--max-model-len")
    try:
        return VllmArgs(
            model=model,
            served_model_name=_one(flags, "--served-model-name") or model,
            tensor_parallel_size=int(_one(flags, "--tensor-parallel-size", "-tp") or 1),
            max_num_seqs=int(_one(flags, "--max-num-seqs") or DEFAULT_MAX_NUM_SEQS),
            max_num_batched_tokens=int(_one(flags, "--max-num-batched-tokens") or DEFAULT_MAX_NUM_BATCHED_TOKENS),
            max_model_len=int(max_model_len) if max_model_len else None,
            gpu_memory_utilization=float(_one(flags, "--gpu-memory-utilization") or DEFAULT_GPU_MEMORY_UTILIZATION),
            quantization=_one(flags, "--quantization", "-q"),
            speculative=parse_speculative_config(spec_text) if spec_text else None,
            histogram_buckets=parse_histogram_buckets(buckets_text) if buckets_text else {},
        )
    except ValueError as error:
        if isinstance(error, PodArgsError):
            raise
        raise PodArgsError(f"bad number in the vLLM arguments: {error}") from None


def _find_vllm_container(pod: dict[str, Any]) -> dict[str, Any] | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if (container.get("command") or [])[:2] == ["vllm", "serve"]:
            return container
    for container in containers:
        if container.get("name") == "vllm":
            return container
    return None


def runs_vllm(pod: dict[str, Any]) -> bool:
    """Whether the pod has a vLLM container, whoever owns it (specfleet, an Argo Rollout, a Flagger canary)."""
    return _find_vllm_container(pod) is not None


def _vllm_container(pod: dict[str, Any]) -> dict[str, Any]:
    container = _find_vllm_container(pod)
    if container is None:
        raise PodArgsError("no container runs `vllm serve`")
    return container


def pod_argv(pod: dict[str, Any]) -> list[str]:
    """The arguments of the pod's `vllm serve`, without `vllm serve`."""
    container = _vllm_container(pod)
    command = list(container.get("command") or [])
    return (command[2:] if command[:2] == ["vllm", "serve"] else []) + list(container.get("args") or [])


def parse_pod(pod: dict[str, Any]) -> PodInfo:
    """A pod (API JSON) -> PodInfo; raises PodArgsError when its vLLM arguments cannot be read."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    argv = pod_argv(pod)
    conditions = status.get("conditions") or []
    return PodInfo(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        labels=dict(metadata.get("labels") or {}),
        node_name=(pod.get("spec") or {}).get("nodeName"),
        pod_ip=status.get("podIP"),
        running=status.get("phase") == "Running" and not metadata.get("deletionTimestamp"),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        args=parse_vllm_args(argv),
    )
