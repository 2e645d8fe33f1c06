"""`SpeculativeDeployment.spec`: what the user asks for.

Field docstrings become the CRD's descriptions (and the generated field reference), so they are
written for the person editing the YAML.
"""

import re
from enum import StrEnum
from itertools import pairwise
from typing import Annotated, Any

from pydantic import AfterValidator, Field, JsonValue, WithJsonSchema

from specfleet.api.base import ApiModel, Rule
from specfleet.api.custom_guardrails import CUSTOM_RULE, MAX_CUSTOM_GUARDRAILS, CustomGuardrail
from specfleet.api.durations import DURATION_PATTERN, LONGEST, bounded_duration, parse_duration
from specfleet.api.template import LocalObjectReference, Name, PodTemplate, ResourceRequirements
from specfleet.api.vocabulary import SERVING_FIELDS
from specfleet.hardware import GPU_RESOURCE

DEFAULT_NUM_SPECULATIVE_TOKENS = 5
"""k when the user sets none: the seeds' advice is to start at 4 or 5."""

DEEP_SPECULATION_WARNING = 8
"""Above this depth speculation rarely pays; `specfleet validate` warns."""

ARGV_VALUE_PATTERN = r"^[^-\r\n][^\r\n]*$"
"""A value that ends up as one argv element: no line breaks, and no leading `-` (it would read as a flag)."""

ArgvValue = Annotated[str, Field(min_length=1, max_length=512, pattern=ARGV_VALUE_PATTERN)]
Duration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        max_length=32,
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": f"duration(self) <= duration('{LONGEST}')", "message": f"must be at most {LONGEST}"}
            ]
        },
    ),
    AfterValidator(bounded_duration),
]
LabelValue = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
Fraction = Annotated[float, Field(ge=0, le=1)]
PERCENT_PATTERN = r"^(100|[1-9]?[0-9])%$"
INT_OR_PERCENT_MESSAGE = "must be a count of pods (0-10000) or a percentage of replicas such as '25%'"


def _int_or_percent(value: int | str) -> int | str:
    count = isinstance(value, int) and 0 <= value <= 10_000
    if count or (isinstance(value, str) and re.match(PERCENT_PATTERN, value)):
        return value
    raise ValueError(INT_OR_PERCENT_MESSAGE)


IntOrPercent = Annotated[
    int | str,
    AfterValidator(_int_or_percent),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-validations": [
                {
                    "rule": f"type(self) == string ? self.matches('{PERCENT_PATTERN}') : self >= 0 && self <= 10000",
                    "message": INT_OR_PERCENT_MESSAGE,
                }
            ],
        }
    ),
]
"""A count of pods or a percentage of `replicas` ("25%"), as a Deployment's `maxSurge` / `maxUnavailable`."""


def pod_count(value: int | str, replicas: int, *, round_up: bool) -> int:
    """An `IntOrPercent` as pods of `replicas`: a percentage rounds up for a surge, down for unavailability,
    as Kubernetes' Deployment controller rounds them."""
    if isinstance(value, int):
        return value
    share = replicas * int(value.removesuffix("%"))
    return -(-share // 100) if round_up else share // 100


def _is_zero(value: int | str | None) -> bool:
    return value in (0, "0%")


class SpeculativeMethod(StrEnum):
    """vLLM's `method` values (`vllm/config/speculative.py`); which exist depends on the vLLM version."""

    NONE = "none"
    DRAFT_MODEL = "draft_model"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MEDUSA = "medusa"
    MLP_SPECULATOR = "mlp_speculator"
    MTP = "mtp"
    NGRAM = "ngram"
    NGRAM_GPU = "ngram_gpu"
    SUFFIX = "suffix"
    DFLASH = "dflash"
    DSPARK = "dspark"


METHODS_WITH_DRAFT_MODEL = frozenset(
    {
        SpeculativeMethod.DRAFT_MODEL,
        SpeculativeMethod.EAGLE,
        SpeculativeMethod.EAGLE3,
        SpeculativeMethod.MEDUSA,
        SpeculativeMethod.MLP_SPECULATOR,
        SpeculativeMethod.DFLASH,
        SpeculativeMethod.DSPARK,
    }
)
"""Methods whose drafter is a separate model, named in `speculative.model`."""

MODEL_FREE_METHODS = frozenset(
    {SpeculativeMethod.NONE, SpeculativeMethod.NGRAM, SpeculativeMethod.NGRAM_GPU, SpeculativeMethod.SUFFIX}
)
"""Methods that draft without a model: a `speculative.model` there is a mistake."""

PROMPT_LOOKUP_METHODS = frozenset({SpeculativeMethod.NGRAM, SpeculativeMethod.NGRAM_GPU})


def _cel_list(values: frozenset[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in sorted(values)) + "]"


class DraftSampleMethod(StrEnum):
    GREEDY = "greedy"
    PROBABILISTIC = "probabilistic"


class ModelSpec(ApiModel):
    """The target model that vLLM serves."""

    name: ArgvValue
    """Hugging Face hub id (`meta-llama/Llama-3.1-70B-Instruct`) or a path inside the model cache."""
    revision: ArgvValue | None = None
    """Hub revision (branch, tag or commit) to pin; strongly advised, so a canary compares like with like."""
    served_model_name: LabelValue | None = None
    """Name clients and metrics use (`model_name` label); defaults to `name`."""
    size_gib: Annotated[float, Field(gt=0, le=4096)] | None = Field(default=None, alias="sizeGiB")
    """Size of the weights in GiB, a hint for start-up budgets and memory checks."""


class SuffixDecoding(ApiModel):
    """Knobs of suffix decoding (method `suffix`); unset ones keep vLLM's defaults."""

    max_tree_depth: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`suffix_decoding_max_tree_depth` (vLLM default 24)."""
    max_cached_requests: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    """`suffix_decoding_max_cached_requests` (vLLM default 10000)."""
    max_spec_factor: Annotated[float, Field(gt=0, le=100)] | None = None
    """`suffix_decoding_max_spec_factor` (vLLM default 1.0)."""
    min_token_prob: Fraction | None = None
    """`suffix_decoding_min_token_prob` (vLLM default 0.1)."""


class BatchSizeDepth(ApiModel):
    """One row of the batch-size schedule: batches of `start`..`end` requests speculate `numTokens` deep."""

    start: Annotated[int, Field(ge=1, le=1_000_000)]
    """Smallest batch size of the range (requests running at once on a replica); one range must start at 1."""
    end: Annotated[int, Field(ge=1, le=1_000_000)]
    """Largest batch size of the range, included."""
    num_tokens: Annotated[int, Field(ge=0, le=64)]
    """Depth for this range; 0 switches speculation off for large batches, where it costs more than it saves."""

    rules = (Rule(cel="self.start <= self.end", message="start must be <= end", holds=lambda s: s.start <= s.end),)


def _schedule_is_a_partition(rows: list[BatchSizeDepth]) -> bool:
    """What vLLM checks only once the model has loaded: ranges start at 1 and do not overlap."""
    if not rows:
        return True
    ordered = sorted(rows, key=lambda r: r.start)
    return ordered[0].start == 1 and all(a.end < b.start for a, b in pairwise(ordered))


RESERVED_SPECULATIVE_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "quantization",
    "max_model_len",
    "revision",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "num_speculative_tokens_per_batch_size",
    "draft_sample_method",
    "parallel_drafting",
    "tensor_parallel_size",
)
"""Keys `extra` may not set: typed fields own them (and vLLM rejects `tensor_parallel_size` here)."""


class SpeculativeSpec(ApiModel):
    """The speculative-decoding config: every change of it is canaried."""

    method: SpeculativeMethod
    """Drafting method; `none` serves without speculation (a baseline)."""
    model: ArgvValue | None = None
    """The drafter model (hub id or path); required by draft_model, eagle, eagle3, medusa, mlp_speculator,
    dflash and dspark."""
    revision: ArgvValue | None = None
    """Hub revision of the drafter model."""
    size_gib: Annotated[float, Field(gt=0, le=4096)] | None = Field(default=None, alias="sizeGiB")
    """Size of the drafter's weights in GiB, used to check that the drafter fits the memory budget."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=64)] | None = None
    """Depth k: tokens drafted per step. Default 5; above 8 rarely pays."""
    draft_tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = None
    """Tensor parallelism of the drafter: 1 or the target's tensorParallelSize."""
    quantization: ArgvValue | None = None
    """Quantization of the drafter only."""
    max_model_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Context length of the drafter."""
    draft_sample_method: DraftSampleMethod | None = None
    """`greedy` or `probabilistic` drafting (vLLM versions that support it)."""
    parallel_drafting: bool | None = None
    """Draft all positions in one pass (eagle, draft_model; always on for dflash and dspark)."""
    prompt_lookup_min: Annotated[int, Field(ge=1, le=64)] | None = None
    """Shortest n-gram matched in the prompt (ngram methods; vLLM default 5)."""
    prompt_lookup_max: Annotated[int, Field(ge=1, le=64)] | None = None
    """Longest n-gram matched in the prompt (ngram methods; vLLM default 5)."""
    suffix_decoding: SuffixDecoding | None = None
    """Suffix decoding knobs (method `suffix` only)."""
    num_speculative_tokens_per_batch_size: Annotated[list[BatchSizeDepth], Field(max_length=32)] | None = None
    """Batch-size schedule of the depth: speculate less, or not at all, when the batch is large."""
    extra: (
        Annotated[
            dict[str, JsonValue],
            Field(max_length=32),
            WithJsonSchema({"type": "object", "maxProperties": 32, "x-kubernetes-preserve-unknown-fields": True}),
        ]
        | None
    ) = None
    """Further `--speculative-config` keys, passed to vLLM as they are (snake_case), for keys newer than
    specfleet knows. Keys that a typed field above owns are refused."""

    rules = (
        Rule(
            cel=f"self.method in {_cel_list(METHODS_WITH_DRAFT_MODEL)} ? has(self.model) : true",
            message="model is required for methods draft_model, eagle, eagle3, medusa, mlp_speculator, "
            "dflash and dspark",
            field_path=".model",
            holds=lambda s: s.method not in METHODS_WITH_DRAFT_MODEL or s.model is not None,
        ),
        Rule(
            cel=f"self.method in {_cel_list(MODEL_FREE_METHODS)} ? !has(self.model) : true",
            message="model must not be set for methods none, ngram, ngram_gpu and suffix: they draft without a model",
            field_path=".model",
            holds=lambda s: s.method not in MODEL_FREE_METHODS or s.model is None,
        ),
        Rule(
            cel="has(self.promptLookupMin) && has(self.promptLookupMax) ? "
            "self.promptLookupMin <= self.promptLookupMax : true",
            message="promptLookupMin must be <= promptLookupMax",
            field_path=".promptLookupMin",
            holds=lambda s: (
                s.prompt_lookup_min is None or s.prompt_lookup_max is None or s.prompt_lookup_min <= s.prompt_lookup_max
            ),
        ),
        Rule(
            cel=f"has(self.promptLookupMin) || has(self.promptLookupMax) ? "
            f"self.method in {_cel_list(PROMPT_LOOKUP_METHODS)} : true",
            message="promptLookupMin and promptLookupMax apply only to methods ngram and ngram_gpu",
            field_path=".method",
            holds=lambda s: (
                (s.prompt_lookup_min is None and s.prompt_lookup_max is None) or s.method in PROMPT_LOOKUP_METHODS
            ),
        ),
        Rule(
            cel="has(self.suffixDecoding) ? self.method == 'suffix' : true",
            message="suffixDecoding applies only to method suffix",
            field_path=".suffixDecoding",
            holds=lambda s: s.suffix_decoding is None or s.method == SpeculativeMethod.SUFFIX,
        ),
        Rule(
            cel="has(self.numSpeculativeTokensPerBatchSize) ? "
            "self.numSpeculativeTokensPerBatchSize.exists(r, r.start == 1) && "
            "self.numSpeculativeTokensPerBatchSize.all(a, self.numSpeculativeTokensPerBatchSize.exists_one(b, "
            "!(a.end < b.start || b.end < a.start))) : true",
            message="numSpeculativeTokensPerBatchSize ranges must not overlap and one must start at batch size 1",
            field_path=".numSpeculativeTokensPerBatchSize",
            holds=lambda s: _schedule_is_a_partition(s.num_speculative_tokens_per_batch_size or []),
        ),
        Rule(
            cel=None,  # CEL cannot range over a map of untyped values: `specfleet validate` and the operator check it
            message="extra must not set keys that typed fields own (method, model, num_speculative_tokens, "
            "draft_tensor_parallel_size, prompt_lookup_*, suffix_decoding_*, ...) nor tensor_parallel_size",
            field_path=".extra",
            holds=lambda s: not set(s.extra or {}) & set(RESERVED_SPECULATIVE_KEYS),
        ),
    )


class Candidate(ApiModel):
    """One alternative speculative config an experiment tries.

    A candidate that names a `method` is a whole config (nothing is taken from `speculative`); one without
    a method is `speculative` with the fields it sets replaced, e.g. `{numSpeculativeTokens: 3}`.
    """

    method: SpeculativeMethod | None = None
    """Drafting method. Set: the candidate is a whole config, nothing is taken from `speculative`. Unset: the
    candidate is `speculative` with the fields it sets replaced."""
    model: ArgvValue | None = None
    """The drafter model (hub id or path), as `speculative.model`."""
    revision: ArgvValue | None = None
    """Hub revision of the drafter model, as `speculative.revision`."""
    size_gib: Annotated[float, Field(gt=0, le=4096)] | None = Field(default=None, alias="sizeGiB")
    """Size of the drafter's weights in GiB, as `speculative.sizeGiB`."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=64)] | None = None
    """Depth k: tokens drafted per step, as `speculative.numSpeculativeTokens`."""
    draft_tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = None
    """Tensor parallelism of the drafter (1 or `engine.tensorParallelSize`), as
    `speculative.draftTensorParallelSize`."""
    num_speculative_tokens_per_batch_size: Annotated[list[BatchSizeDepth], Field(max_length=32)] | None = None
    """Batch-size schedule of the depth, as `speculative.numSpeculativeTokensPerBatchSize`."""

    def applied_to(self, base: SpeculativeSpec) -> SpeculativeSpec:
        """The speculative config this candidate stands for (raises ValidationError if it is not valid)."""
        fields = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        inherited = {} if self.method is not None else base.model_dump(mode="json", by_alias=True, exclude_none=True)
        return SpeculativeSpec.model_validate({**inherited, **fields})


DEFAULT_MIN_IMPROVEMENT = 0.02


class AutoTuneSpec(ApiModel):
    """Find the best speculative config by measurement: an experiment over `candidates`, and a batch-size
    schedule of the depth fitted to what the fleet measures while it serves.

    A change that brings candidates starts an experiment. When the replicas permit, every candidate gets
    its own slice of the first step's share (`<name>-candidate-<i>`) beside stable at once and all are
    measured over the same window; otherwise (or with an HTTPRoute, or a new drafter to preflight) each in
    turn is canaried at the first step's weight and measured over that step. Every guardrail is judged.
    Then the candidate with the lowest mean per-token latency relative to stable in the same window (ties
    within 1%: the smaller k, unless another has 5% more output tokens/s per pod) is canaried through all
    the steps and promoted, if it beats stable by `minImprovement`. Otherwise stable stays.
    """

    candidates: Annotated[list[Candidate], Field(max_length=8)] = []
    """Alternatives to try: side by side when the replicas permit, else one after another (status.experiment.mode
    says which and why); none: only the load-aware depth."""
    min_improvement: Annotated[float, Field(ge=0, le=0.9)] = DEFAULT_MIN_IMPROVEMENT
    """How much lower (relative) the winner's mean per-token latency must be than stable's in the same
    window for it to be promoted (0.02 = 2% faster); below it, nothing is promoted."""
    apply: bool = False
    """Apply the proposed batch-size schedule of the depth (`status.autoTune.proposal`): the served config
    with that schedule is canaried like any change, and served once promoted (vLLM >= 0.24). False only
    shows the proposal. Turning it off again canaries the config without the schedule."""


MANAGED_ENGINE_FLAGS = (
    "--model",
    "--served-model-name",
    "--tensor-parallel-size",
    "-tp",
    "--speculative-config",
    "--port",
    "--host",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--dtype",
    "--quantization",
    "--revision",
    "--download-dir",
)
"""Flags specfleet renders itself: `extraArgs` may not set them a second time."""


class EnvVar(ApiModel):
    """A plain environment variable for the vLLM container (e.g. `VLLM_ROCM_USE_AITER=1`)."""

    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    """The variable's name."""
    value: Annotated[str, Field(max_length=4096, pattern=r"^[^\r\n]*$")] = ""
    """Its value, on one line; empty sets the variable to the empty string."""


class Dtype(StrEnum):
    AUTO = "auto"
    HALF = "half"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT = "float"
    FLOAT32 = "float32"


DEFAULT_VLLM_VERSION = "0.33.0"


class EngineSpec(ApiModel):
    """The vLLM engine: image, version and serving options."""

    image: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")] | None = None
    """Serving image; defaults to specfleet's ROCm vLLM image for `vllmVersion`."""
    vllm_version: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$", max_length=32)] = DEFAULT_VLLM_VERSION
    """vLLM version inside the image: decides which speculative methods and keys are valid."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = 1
    """GPUs the target model is split over (`--tensor-parallel-size`)."""
    max_model_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Context length (`--max-model-len`)."""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Fraction of each GPU's memory vLLM may use (`--gpu-memory-utilization`)."""
    max_num_seqs: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Largest batch (`--max-num-seqs`)."""
    dtype: Dtype = Dtype.AUTO
    """Weights and activations dtype (`--dtype`)."""
    quantization: ArgvValue | None = None
    """Quantization of the target model (`--quantization`, e.g. `fp8`)."""
    extra_args: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\r\n]*$")]],
        Field(max_length=64),
    ] = []
    """More `vllm serve` arguments, one list item per argv element (never a shell string)."""
    env: Annotated[list[EnvVar], Field(max_length=64)] = []
    """Extra environment variables."""
    startup_timeout_seconds: Annotated[int, Field(ge=60, le=86_400)] | None = None
    """How long the model may take to load before Kubernetes restarts it; by default sized from the model."""

    rules = (
        Rule(
            cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !{_cel_list(MANAGED_ENGINE_FLAGS)}.exists(f, "
            "a == f || a.startsWith(f + '=')))",
            message="extraArgs must not repeat flags that specfleet renders (--speculative-config, "
            "--tensor-parallel-size, --port, ...): use the typed fields",
            field_path=".extraArgs",
            holds=lambda e: (
                not any(
                    arg == flag or arg.startswith(flag + "=") for arg in e.extra_args for flag in MANAGED_ENGINE_FLAGS
                )
            ),
        ),
    )


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A Kubernetes toleration, for GPU nodes that carry taints."""

    key: Annotated[str, Field(max_length=316)] | None = None
    """The taint key tolerated; unset with operator `Exists` tolerates every taint."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    """`Equal`: the taint's value must be `value`. `Exists`: any value of the key."""
    value: Annotated[str, Field(max_length=63)] | None = None
    """The taint value tolerated, with operator `Equal`."""
    effect: TaintEffect | None = None
    """The taint effect tolerated (`NoSchedule`, `PreferNoSchedule`, `NoExecute`); unset tolerates all three."""
    toleration_seconds: int | None = None
    """With effect `NoExecute`: how long the pod stays on a node after the taint appears; unset, for ever."""


GPU_TOLERATION = Toleration(key=GPU_RESOURCE, operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE)


class AcceleratorSpec(ApiModel):
    """Where the pods run: AMD Instinct GPUs, by resource and product."""

    resource_name: Annotated[str, Field(max_length=253, pattern=r"^[a-z0-9.-]+/[a-z0-9_.-]+$")] = GPU_RESOURCE
    """Extended resource the device plugin advertises (`amd.com/gpu`; partitioned GPUs e.g. `amd.com/cpx_nps4`)."""
    count: Annotated[int, Field(ge=1, le=64)] | None = None
    """GPUs per replica; defaults to engine.tensorParallelSize."""
    product_names: Annotated[list[LabelValue], Field(max_length=16)] = []
    """Accepted `amd.com/gpu.product-name` values, e.g. `AMD_Instinct_MI300X_OAM`; empty accepts any."""
    require_node_feature_label: bool = False
    """Also require `feature.node.kubernetes.io/amd-gpu=true` (set by the AMD GPU Operator's NFD rules)."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = [GPU_TOLERATION]
    """Tolerations for GPU node taints; by default tolerates `amd.com/gpu:NoSchedule`."""
    supplemental_groups: Annotated[list[Annotated[int, Field(ge=0, le=2_147_483_647)]], Field(max_length=8)] = [44]
    """Groups that may open /dev/kfd and /dev/dri: video (44) and, on hosts that need it, the render group."""


class SecretKeyRef(ApiModel):
    """A key of a Secret in the SpeculativeDeployment's namespace."""

    name: ObjectName
    """The Secret's name."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = "token"
    """The key of the Secret's data that holds the token."""


class StorageSpec(ApiModel):
    """Model cache and hub credentials."""

    model_cache_claim: ObjectName | None = None
    """PersistentVolumeClaim holding the Hugging Face cache; without it each pod downloads into an emptyDir."""
    hf_token_secret: SecretKeyRef | None = None
    """Secret with a Hugging Face token, given to vLLM as HF_TOKEN."""
    shm_size_gib: Annotated[int, Field(ge=1, le=1024)] | None = Field(default=None, alias="shmSizeGiB")
    """Size of /dev/shm; by default 8 GiB, plus 2 GiB per extra tensor-parallel rank."""


class Pause(ApiModel):
    """How long a step holds. Without `duration` it waits for `kubectl specfleet promote`."""

    duration: Duration | None = None
    """How long the step holds once its canary replicas are all Ready, e.g. `5m` or `1h30m` (units `ms`, `s`,
    `m`, `h`); then it ends at its first passing analysis (at once without Prometheus). Unset (`pause: {}`):
    a manual gate, the step holds until `kubectl specfleet promote`."""


class Step(ApiModel):
    """One canary step: send `weight` percent of users' requests to the canary, or (a shadow step) copy `mirror`
    percent of stable's requests to it, then pause."""

    weight: Annotated[int, Field(ge=1, le=100)] | None = None
    """Canary share of users' requests in percent."""
    mirror: Annotated[int, Field(ge=1, le=99)] | None = None
    """A shadow step: percent of stable's requests copied to the canary (the HTTPRoute's `RequestMirror` filter;
    its answers are discarded), while every user is served by stable. The canary is judged on those real
    prompts, so a bad drafter is rolled back before any user meets it. Below 100: it measures a sample of
    stable's requests, with its pods sized to carry that share (as a step of the same `weight` would). Needs
    `trafficRouting.httpRoute`; shadow steps come before the steps that serve users."""
    pause: Pause | None = None
    """Hold after the weight (or mirror) is set; without it the step ends at its first passing analysis."""

    rules = (
        Rule(
            cel="has(self.weight) != has(self.mirror)",
            message="a step sets exactly one of weight (users served by the canary) and mirror (a shadow step)",
            holds=lambda s: (s.weight is None) != (s.mirror is None),
        ),
    )

    @property
    def share(self) -> int:
        """Percent of stable's requests the canary's pods see: the users' (`weight`) or the copies (`mirror`)."""
        return self.weight if self.weight is not None else self.mirror or 0

    @property
    def users(self) -> int:
        """Percent of users' requests the canary serves: 0 in a shadow step."""
        return self.weight or 0


DEFAULT_STEPS = [Step(weight=10, pause=Pause(duration="5m")), Step(weight=50, pause=Pause(duration="10m"))]


class FallbackAction(StrEnum):
    ROLLBACK = "Rollback"
    PAUSE = "Pause"


class Fallback(ApiModel):
    """What to do when the canary cannot be judged for a while. It is never promoted meanwhile."""

    after: Duration
    """How long the rollout holds before acting."""
    action: FallbackAction = FallbackAction.ROLLBACK
    """`Rollback` returns traffic to stable; `Pause` waits for a human."""


class ProviderErrorFallback(Fallback):
    """`onProviderError`: a Prometheus outage is no evidence against the canary, so `action` defaults to Pause
    even when only `after` is given (a model of its own: the nested default is what the API server fills in)."""

    action: FallbackAction = FallbackAction.PAUSE
    """`Pause` waits for a human; `Rollback` returns traffic to stable."""


SHORTEST_INTERVAL = "1s"
"""The floor of `analysis.interval`."""


class AnalysisSpec(ApiModel):
    """How often and over what window the canary is measured, and how sure a failure must be."""

    interval: Duration = "1m"
    """Time between two analyses while a canary is live; at least 1s. An analysis is some 80 PromQL queries,
    and one between two scrapes reads the samples the last one read: the floor keeps a fleet from asking
    Prometheus on every pass of its reconcile loop."""
    window: Duration = "5m"
    """A canary's analyses read all the evidence of its step (from the moment its replicas were all Ready,
    or the last counted failure), so bounds narrow as it grows. `window` is the trailing range of two other
    reads: a canary's guardrails are also checked on the last `window` alone, and that check can only fail
    (a canary that turns bad late in a long step is not hidden by its good start); and the Healthy fleet's
    looks (drift, holdback speed-up, load points) read the last `window`. No range reaches back to within one
    scrape of the first sample Prometheus has of a measured pod (a range holding a series' start reads a
    biased mean)."""
    confidence: Annotated[float, Field(ge=0.5, le=0.999999)] = 0.99
    """Chance that a canary as good as its guardrails is never failed, and that one past a guardrail is
    never promoted, over all of its analyses together. Each guardrail's bounds form a confidence sequence
    (valid at every look at once) at (1 - confidence) / (2 x steps x guardrails) a side; the other half of
    the false-failure budget goes to the trailing-window check, whose analysis n is tested at
    (1 - confidence) / (2 n (n + 1)) split over the guardrails."""
    failure_limit: Annotated[int, Field(ge=0, le=100)] = 0
    """Failed analyses tolerated per revision; one more rolls back. Each failure counts only evidence
    gathered after the previous one, so failures are independent."""
    on_no_data: Fallback = Fallback(after="30m", action=FallbackAction.ROLLBACK)
    """When results stay inconclusive (too few samples to show the canary within its guardrails, empty or NaN
    answers). 30 minutes by default: showing an error rate within 1 point of stable's takes ~1,700 canary
    requests, which one canary pod at 1 request/s gathers in 28 minutes."""
    on_provider_error: ProviderErrorFallback = ProviderErrorFallback(after="10m")
    """When Prometheus is unreachable or answers badly. Pauses unless `action` says otherwise (`{after: 5m}`
    pauses after 5 minutes)."""

    rules = (
        Rule(
            cel=f"!has(self.interval) || duration(self.interval) >= duration('{SHORTEST_INTERVAL}')",
            message=f"interval must be at least {SHORTEST_INTERVAL}",
            field_path=".interval",
            holds=lambda s: parse_duration(s.interval) >= parse_duration(SHORTEST_INTERVAL),
        ),
    )


class OutputEquivalence(ApiModel):
    """Speculative decoding is meant to be lossless: with greedy sampling a canary should return the tokens
    stable returns. When enabled, every analysis sends the same fixed prompts, greedy (temperature 0, `seed`,
    `maxTokens`), to one Ready canary pod and one Ready stable pod and compares the token ids: each pair is
    identical or diverges at a position. The share of identical pairs is judged like any guardrail, on its
    confidence bounds against `minIdentical`. Prompts are never logged, nor written to Events or status:
    only their count and a hash."""

    enabled: bool = False
    """Compare the canary's answers with stable's (extra requests from the operator to the pods)."""
    prompts_config_map: ObjectName | None = None
    """ConfigMap in this namespace whose key `prompts` holds the prompts: a JSON list of strings, or one
    prompt per line. Unset: a small built-in set of general prompts."""
    max_tokens: Annotated[int, Field(ge=1, le=512)] = 32
    """Tokens generated per prompt: longer answers diverge later, and catch more, at more cost."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Sampling seed sent with every request (greedy answers do not depend on it in vLLM)."""
    min_identical: Fraction = 0.98
    """Lowest share of prompt pairs whose token ids are identical. Fails when the share's upper bound is
    below it; passes only when its lower bound is at or above it, which at the default takes about 1,000
    pairs (a share bounded at 0.98 needs ~49 z^2 identical pairs)."""
    min_pairs: Annotated[int, Field(ge=1, le=1_000_000)] = 50
    """Prompt pairs compared before this guardrail is judged at all."""
    pairs_per_analysis: Annotated[int, Field(ge=1, le=256)] = 64
    """Prompts sent to each track per analysis, 4 at a time to one pod of each (the operator's extra load,
    each request bounded in time and size); the prompts are sent in turn, round after round. At the
    default interval of 1m a Pass at the default floor takes ~15 analyses."""

    rules = (
        Rule(
            cel="self.enabled || !has(self.promptsConfigMap)",
            message="promptsConfigMap is read only when outputEquivalence.enabled is true",
            holds=lambda s: s.enabled or s.prompts_config_map is None,
            field_path=".promptsConfigMap",
        ),
    )


class Guardrails(ApiModel):
    """Limits a canary must respect; set before the canary starts, never tuned during it.

    A guardrail fails when the confidence bound of its measurement is surely past the limit, and passes
    only when the bound shows it within (see `analysis.confidence`): noise alone neither rolls back a
    canary nor promotes one, and a canary with too little evidence waits (then `analysis.onNoData`).
    """

    min_acceptance_alpha: Fraction = 0.6
    """Lowest per-token acceptance alpha: the share of drafts whose first token the target accepts (the
    papers' alpha). Unlike accepted/drafted tokens it does not fall as numSpeculativeTokens grows."""
    max_token_latency_p95_regression: Annotated[float, Field(ge=0, le=10)] = 0.1
    """Largest relative increase of the p95 per-token latency (each request's decode time per output
    token, what a streaming user feels) over the stable track in the same window (0.1 = 10% slower)."""
    max_token_latency_mean_regression: Annotated[float, Field(ge=0, le=10)] = 0.05
    """Largest relative increase of the mean per-token latency over the stable track's (0.05 = 5% slower):
    the typical request, which the p95 misses. The p95 is set by the prompts the drafter guesses worst,
    which gain least from any k: a k=1 canary 56% slower on average than k=5 moved the p95 by 7%."""
    max_time_to_first_token_p95_regression: Annotated[float, Field(ge=0, le=10)] | None = None
    """Optional: largest relative increase of the p95 time to first token over the stable track's (0.2 = 20%
    slower; `vllm:time_to_first_token_seconds`). A draft model prefills every prompt too, which the per-token
    latency does not see. vLLM's default buckets are too coarse for it (1 s to 2.5 s is one): give both tracks
    finer `time_to_first_token` buckets in `--custom-histogram-buckets`, else it stays Inconclusive."""
    max_step_latency_p95_seconds: Annotated[float, Field(gt=0, le=3600)] | None = None
    """Optional absolute ceiling on the canary's p95 engine-step latency (vLLM's inter-token latency
    histogram, one observation per request per step): a stutter limit. A speculative step emits several
    tokens, so this is larger than the per-token latency even when speculation pays."""
    max_error_rate_increase: Fraction = 0.01
    """Largest increase of the share of requests that end in error over the stable track's
    (0.01 = one percentage point). Client aborts are not errors."""
    max_error_rate: Fraction | None = None
    """Optional absolute ceiling on the canary's error rate."""
    max_throughput_drop: Fraction | None = None
    """Optional: largest drop of the share of offered requests the canary completes, against stable's at
    comparable per-pod load (0.1 = the canary leaves 10% more of its requests waiting). Offered = finished
    + growth of vLLM's waiting queue: under the same per-pod load both tracks complete what arrives
    unless one cannot keep up, so this catches a config that lowers a pod's capacity (a drafter that
    eats the KV cache, a k too deep at high concurrency) even when the per-token latency of the requests
    it does serve looks fine (queue time is not in it). Unset by default until the judge benchmark
    measures its false-failure rate; 0.1 is a tolerant setting (an A/A canary completes the same share)."""
    max_queue_time_p95_seconds: Annotated[float, Field(gt=0, le=86400)] | None = None
    """Optional absolute ceiling on the canary's p95 queue time (`vllm:request_queue_time_seconds`, time
    a finished request waited before it was scheduled). vLLM's buckets start at 0.3 s, so ceilings below
    that cannot be resolved."""
    max_kv_cache_usage: Fraction | None = None
    """Optional ceiling on the canary's KV-cache usage (`vllm:kv_cache_usage_perc`, 1 = full), averaged
    over the range and its pods: sustained pressure, where preemptions begin. A level, not a sample: it
    fails when the average is above the ceiling."""
    custom: Annotated[list[CustomGuardrail], Field(max_length=MAX_CUSTOM_GUARDRAILS)] = []
    """User-defined guardrails on the application's own counters and histograms (a share of events, e.g.
    tool calls that parsed, or a quantile of a latency), judged canary against stable like the error rate
    and the per-token p95: each is the check `custom:<name>`. See docs/judge.md."""

    rules = (CUSTOM_RULE,)

    min_draft_tokens: Annotated[int, Field(ge=0, le=1_000_000_000)] = 500
    """Drafted tokens the evidence needs before the acceptance guardrail is judged."""
    min_requests: Annotated[int, Field(ge=0, le=1_000_000_000)] = 100
    """Finished requests each track needs before latency and errors are judged (0 counts as 1: a rate needs a
    request; more are needed to pass: bounding a p95 takes at least 19 z^2 requests, and showing an error rate
    within 1 point of stable's about 1,700)."""
    max_canary_restarts: Annotated[int, Field(ge=0, le=1000)] = 1
    """Most container restarts all the canary's pods may have (restartCount, read from the Kubernetes API,
    not Prometheus, so it holds without one): one more rolls the canary back. The default 1 forgives one
    transient crash (a node or driver hiccup) while a config that crashes vLLM does so again once
    restarted and fails at its second restart; 0 fails at the first. An OOM kill of a canary container
    fails the canary at once, whatever this limit. Stable's restarts are reported beside, never judged."""
    output_equivalence: OutputEquivalence = OutputEquivalence()
    """Optional: the canary must answer greedy prompts with stable's token ids (speculation is lossless)."""

    @property
    def requests_needed(self) -> int:
        """`minRequests`, but at least one: the schema admits 0, and no finished request is no evidence of a
        rate or a quantile (the judge divides by the count)."""
        return max(1, self.min_requests)


class DriftAction(StrEnum):
    ALERT = "Alert"
    ROLLBACK = "Rollback"


class DriftSpec(ApiModel):
    """Keep judging the fleet after promotion: is speculation still paying what it paid when promoted?

    While Healthy the stable track is measured every `analysis.window` and compared with what its canary
    measured when it was promoted: acceptance alpha, and p95 per-token latency at comparable per-pod load
    (within 25%; a larger shift of the load is recorded as a traffic shift instead). Each comparison uses
    the canary judge's bounds at `analysis.confidence` per look; `looks` agreeing looks in a row flip the
    `SpeculationPaying` condition either way (hysteresis), and never before `minDwell` after promotion.
    """

    max_acceptance_drop: Fraction = 0.1
    """Largest fall of acceptance alpha below its value at promotion (0.1 = ten points), by its upper bound."""
    max_token_latency_increase: Annotated[float, Field(gt=0, le=10)] = 0.2
    """Largest rise of the p95 per-token latency over its value at promotion (0.2 = 20% slower), by its
    lower bound, at comparable per-pod load."""
    looks: Annotated[int, Field(ge=1, le=20)] = 3
    """Consecutive looks that must agree before the condition flips (either way)."""
    min_dwell: Duration = "15m"
    """No drift verdict until the fleet has served its revision this long (warm caches, settled load)."""
    on_drift: DriftAction = DriftAction.ALERT
    """`Alert`: condition, event and the operator's `specfleet_speculation_paying` gauge (alert rule
    SpecfleetSpeculationNotPaying). `Rollback`: also canary the fleet back to what stable served before
    this revision was promoted (else no speculation) through the normal steps; it is then served while
    the spec is unchanged."""


class HoldbackReference(StrEnum):
    NO_SPECULATION = "NoSpeculation"
    PREVIOUS_STABLE = "PreviousStable"


class HoldbackSpec(ApiModel):
    """A live control group: a few replicas keep serving a reference config after promotion, beside stable.

    The holdback's pods (`<name>-holdback`) take their share of traffic like any replica (one Service, or
    their own backend of the HTTPRoute) and are measured with stable every `analysis.window` while Healthy:
    status.holdback.speedup is stable's per-token latency benefit over them, with its confidence bounds,
    at the same load and the same prompts. The cost: those replicas serve without what the current config
    buys (see docs/holdback.md). Enabling or disabling it rolls stable's pods once (a label), never a canary.
    """

    replicas: Annotated[int, Field(ge=1, le=1000)] = 1
    """Replicas kept on the reference, out of `replicas` (stable keeps at least one: with `replicas` not
    above this, no holdback runs and status says why)."""
    reference: HoldbackReference = HoldbackReference.NO_SPECULATION
    """`NoSpeculation`: stable's config without speculation (the speed-up speculation buys). `PreviousStable`:
    what stable served before its last promotion (the speed-up of the last change); no speculation until a
    promotion has happened."""


class HeaderMatch(ApiModel):
    """An HTTP header with an exact value, as a Gateway API `HTTPHeaderMatch` of type `Exact` matches it."""

    name: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")]
    """The header's name (an HTTP token, compared case-insensitively by gateways), e.g. `x-canary`."""
    value: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[ -~]+$")]
    """Its exact value: printable ASCII, as a gateway compares it."""


class HTTPRouteRef(ApiModel):
    """A Gateway API HTTPRoute whose backend weights specfleet sets."""

    name: ObjectName
    """The HTTPRoute's name."""
    namespace: ObjectName | None = None
    """Defaults to the SpeculativeDeployment's namespace. A route in another namespace is written only when a
    ReferenceGrant there lets SpeculativeDeployments of this namespace refer to HTTPRoutes (all, or this one);
    until then the fleet is held (SpecValid False)."""
    canary_header: HeaderMatch | None = None
    """Opt-in: requests carrying this header (internal testers', say) are answered by the canary at every step
    of a live canary, shadow steps included. Rendered as an HTTPRoute rule beside each rule that sends to the
    stable Service, with the same matches plus this header (more header matches win among a route's rules),
    named `<fleet>-canary-header-<n>`, and removed when the canary ends."""


class EndpointPickerFailureMode(StrEnum):
    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class EndpointPickerRef(ApiModel):
    """The endpoint pickers (Services in the fleet's namespace, and their port) the fleet's InferencePools name in
    their `spec.endpointPickerRef` (Gateway API Inference Extension v1). A picker serves one pool, so each track's
    pool names its own: `<name>-stable`, `<name>-canary`, `<name>-holdback`."""

    name: ObjectName
    """The pickers' Services' common prefix: the pool of track `t` names the Service `<name>-<t>`."""
    port: Annotated[int, Field(ge=1, le=65535)]
    """Its port (the extension's ext-proc port, e.g. 9002)."""
    failure_mode: EndpointPickerFailureMode = EndpointPickerFailureMode.FAIL_CLOSE
    """What the gateway does when the picker does not answer: `FailClose` refuses the request, `FailOpen` sends it
    to a pod of the pool the gateway picks itself."""


PICKER_FLAGS = ("pool-name", "pool-namespace", "pool-group", "grpc-port", "grpc-health-port", "metrics-port")
"""The endpoint picker's flags specfleet sets itself: which pool it serves, and the ports its Service and probes use."""
PICKER_FLAG_PATTERN = f"^--?({'|'.join(PICKER_FLAGS)})(=|$)"
PICKER_DEFAULT_PORT = 9002

PickerArg = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\r\n]*$")]


class EndpointPickerTemplate(ApiModel):
    """An endpoint picker the fleet runs for each of its pools, as the Inference Extension's `inferencepool` chart
    deploys one beside its pool: a Deployment and a Service `<name>-epp-<track>` (`<name>-epp-stable`,
    `-canary` while a canary runs, `-holdback`), owned by the fleet and deleted with the track, started with
    `--pool-name <name>-<track> --pool-namespace <namespace>`, one pod each. Its pods meet the Pod Security Standard
    `restricted` whatever is set here (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault
    seccomp); the environment is plain values, as the vLLM container's `engine.env`. Not part of the revision: a
    change is applied to every track's picker in place."""

    image: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")]
    """The picker's image, e.g. `registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0`."""
    args: Annotated[list[PickerArg], Field(max_length=64)] = []
    """Flags after specfleet's (e.g. `--config-file /config/plugins.yaml`, `-v 2`). The flags specfleet sets are
    refused: `--pool-name`, `--pool-namespace`, `--pool-group`, `--grpc-port`, `--grpc-health-port`,
    `--metrics-port`."""
    env: Annotated[list[EnvVar], Field(max_length=32)] = []
    """Plain environment variables of the picker container (`NAMESPACE` is specfleet's: the pod's namespace)."""
    port: Annotated[int, Field(ge=1, le=65535)] = PICKER_DEFAULT_PORT
    """Its ext-proc (gRPC) port (`--grpc-port`): the Service's port, and the pools' `endpointPickerRef.port`."""
    failure_mode: EndpointPickerFailureMode = EndpointPickerFailureMode.FAIL_CLOSE
    """What the gateway does when the picker does not answer (the pools' `endpointPickerRef.failureMode`)."""
    service_account_name: Name | None = None
    """The pickers' ServiceAccount: a picker watches its pool and the pool's pods, so it needs one bound to a Role
    that may get, list and watch `pods` and `inferencepools` (the extension's chart makes such a Role). Its token
    is mounted as that ServiceAccount's `automountServiceAccountToken` says, as for the vLLM pods. Unset: the
    namespace's `default`, with no token (a picker without one cannot watch its pool)."""
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=16)] = []
    """Secrets holding registry credentials for the picker's image."""
    config_map: LocalObjectReference | None = None
    """A ConfigMap mounted read-only at `/config` (the picker's plugins configuration: name the file with
    `--config-file /config/<key>` in `args`)."""
    resources: ResourceRequirements = ResourceRequirements()
    """The picker container's CPU and memory requests and limits."""

    rules = (
        Rule(
            cel=f"!has(self.args) || self.args.all(a, !a.matches('{PICKER_FLAG_PATTERN}'))",
            message="args must not set --pool-name, --pool-namespace, --pool-group, --grpc-port, --grpc-health-port "
            "or --metrics-port: specfleet sets them (each picker serves its track's pool, on the ports its Service "
            "and probes use)",
            field_path=".args",
            holds=lambda t: not [a for a in t.args if re.match(PICKER_FLAG_PATTERN, a)],
        ),
        Rule(
            cel="!has(self.env) || self.env.all(e, e.name != 'NAMESPACE')",
            message="env must not set NAMESPACE: specfleet sets it to the pod's namespace, where the picker's pool is",
            field_path=".env",
            holds=lambda t: "NAMESPACE" not in {e.name for e in t.env},
        ),
    )


class InferencePoolRouting(ApiModel):
    """The route's backends are InferencePools (group `inference.networking.k8s.io`, v1), one per track, made and
    owned by the fleet and named like the track Services (`<name>-stable`, `-canary`, `-holdback`): each selects
    its track's pods by the track label on the serving port, so a canary's pods never join stable's pool. Each
    pool names its own endpoint picker: pickers you run (`endpointPickerRef`) or pickers the fleet renders
    from `endpointPickerTemplate`, exactly one of the two."""

    endpoint_picker_ref: EndpointPickerRef | None = None
    """The endpoint pickers you run, one per track's pool: Services in the fleet's namespace, the pool of track `t`
    naming `<endpointPickerRef.name>-<t>`."""
    endpoint_picker_template: EndpointPickerTemplate | None = None
    """An endpoint picker the fleet runs for each of its pools, `<name>-epp-<track>`, rendered from this template."""

    rules = (
        Rule(
            cel="has(self.endpointPickerRef) != has(self.endpointPickerTemplate)",
            message="inferencePool needs exactly one of endpointPickerRef (the pickers you run) and "
            "endpointPickerTemplate (a picker the fleet runs per pool)",
            holds=lambda r: (r.endpoint_picker_ref is None) != (r.endpoint_picker_template is None),
        ),
    )

    def picker(self, fleet: str) -> EndpointPickerRef:
        """What the pools name: the user's pickers, or the fleet's own (`<fleet>-epp`, each pool `-<track>`)."""
        if self.endpoint_picker_ref is not None:
            return self.endpoint_picker_ref
        template = self.endpoint_picker_template
        if template is None:  # the rule refuses a spec naming neither
            raise ValueError("trafficRouting.inferencePool names no endpoint picker")
        return EndpointPickerRef(name=f"{fleet}-epp", port=template.port, failure_mode=template.failure_mode)


class TrafficRouting(ApiModel):
    """How traffic is split. Without it, by ready replicas behind one Service."""

    http_route: HTTPRouteRef | None = None
    inference_pool: InferencePoolRouting | None = None
    """With `httpRoute`: its rules send to the InferencePool `<name>-stable` instead of the Service, and the
    operator weights (and in shadow steps mirrors to) the fleet's InferencePools there."""

    rules = (
        Rule(
            cel="!has(self.inferencePool) || has(self.httpRoute)",
            message="trafficRouting.inferencePool needs trafficRouting.httpRoute: the pools are the route's backends",
            field_path=".inferencePool",
            holds=lambda t: t.inference_pool is None or t.http_route is not None,
        ),
    )


class RolloutSpec(ApiModel):
    """How a change of the serving config is canaried and judged."""

    steps: Annotated[list[Step], Field(min_length=1, max_length=20)] = DEFAULT_STEPS
    """Canary steps; weights strictly increasing. After the last one the canary is promoted."""
    analysis: AnalysisSpec = AnalysisSpec()
    guardrails: Guardrails = Guardrails()
    progress_deadline: Duration = "30m"
    """How long the canary's pods may take to become Ready (model loading included) before it is aborted."""
    auto_rollback: bool = True
    """Roll back by itself when a guardrail fails; false pauses for a human instead."""
    unguarded: bool = False
    """True: canary steps advance on their pauses and manual gates alone, with no analysis and no Prometheus (a
    test cluster, a config nothing can measure). False (the default): every canary is judged, and one that
    cannot be (no Prometheus configured, unreachable, its auth Secret missing) holds at its step while
    `analysis.onProviderError` applies; it is never promoted unjudged. Fixed when a canary starts: a canary
    started judged stays judged when this is set later (abort it, or promote it by hand)."""
    traffic_routing: TrafficRouting | None = None
    history_limit: Annotated[int, Field(ge=1, le=50)] = 10
    """Revisions kept in status.history."""
    drift: DriftSpec | None = None
    """Optional: keep measuring after promotion and flag (or roll back) a config that stopped paying."""
    holdback: HoldbackSpec | None = None
    """Optional: keep a control group on a reference config after promotion and measure the speed-up live."""
    max_surge: IntOrPercent | None = None
    """Pods (or a percentage of `replicas`, rounded up) a rollout may run on top of `replicas`. Unset: each step
    adds its canary pods next to stable (a step of 25% asks for 25% more GPUs). `0` swaps instead: stable gives
    up pods (at most `maxUnavailable` at a time) before their canary replacements are created, for a fleet on
    a full GPU pool. Promotion, rollback and abort move the same way."""
    max_unavailable: IntOrPercent = 0
    """Ready pods (or a percentage of `replicas`, rounded down) the fleet may be short of `replicas` while a
    rollout moves pods between stable and canary. Must be at least 1 when `maxSurge` is 0."""

    rules = (
        Rule(
            cel="!has(self.maxSurge) || !(self.maxSurge == 0 || self.maxSurge == '0%') || "
            "!has(self.maxUnavailable) || !(self.maxUnavailable == 0 || self.maxUnavailable == '0%')",
            message="rollout.maxSurge and rollout.maxUnavailable cannot both be 0: a rollout could not move "
            "any pod (set maxUnavailable to at least 1 to swap pods on a full GPU pool)",
            field_path=".maxUnavailable",
            holds=lambda r: not (_is_zero(r.max_surge) and _is_zero(r.max_unavailable)),
        ),
        Rule(
            cel="!has(self.steps) || self.steps.filter(s, has(s.weight)).map(s, s.weight).isSorted() && "
            "self.steps.filter(s, has(s.weight)).all(s, "
            "self.steps.exists_one(t, has(t.weight) && t.weight == s.weight))",
            message="steps[].weight must be strictly increasing",
            field_path=".steps",
            holds=lambda r: all(a < b for a, b in pairwise(s.weight for s in r.steps if s.weight is not None)),
        ),
        Rule(
            cel="!has(self.steps) || self.steps.map(s, has(s.weight) ? 1 : 0).isSorted()",
            message="steps[].mirror: shadow steps come before the steps that serve users (weight)",
            field_path=".steps",
            holds=lambda r: all(a.mirror is not None or b.mirror is None for a, b in pairwise(r.steps)),
        ),
        Rule(
            cel="!has(self.steps) || !self.steps.exists(s, has(s.mirror)) || "
            "has(self.trafficRouting) && has(self.trafficRouting.httpRoute)",
            message="steps[].mirror needs trafficRouting.httpRoute: a shadow step copies requests with the route's "
            "RequestMirror filter, and replica-ratio splitting (one Service over both tracks) cannot copy a request",
            field_path=".steps",
            holds=lambda r: (
                all(s.mirror is None for s in r.steps)
                or (r.traffic_routing is not None and r.traffic_routing.http_route is not None)
            ),
        ),
        Rule(
            cel="!has(self.steps) || !self.steps.exists(s, has(s.mirror)) || !has(self.maxSurge)",
            message="steps[].mirror cannot be used with maxSurge: a shadow step's canary pods serve no user, so "
            "they cannot take the place of stable's pods (leave maxSurge unset: they run on top of replicas)",
            field_path=".steps",
            holds=lambda r: all(s.mirror is None for s in r.steps) or r.max_surge is None,
        ),
    )


class PrometheusSpec(ApiModel):
    """The Prometheus that scrapes the vLLM pods; without it the operator's default is used."""

    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://[^\s]+$")] | None = None
    """Base URL, e.g. `http://prometheus-operated.monitoring:9090`, without userinfo, query or fragment. The
    operator asks it only when it is under the operator's allow-list (its own `--prometheus-url` and each
    `--allow-prometheus-url`); otherwise the canary's analyses are Error verdicts and nothing is sent."""
    auth_secret: SecretKeyRef | None = None
    """Secret holding a bearer token for Prometheus, sent only to a URL the allow-list admits."""

    rules = (
        Rule(
            cel="!has(self.url) || !(self.url.contains('@') || self.url.contains('?') || self.url.contains('#'))",
            message="prometheus.url takes a plain base URL, with no userinfo (user:password@), query (?) or "
            "fragment (#): a token goes in prometheus.authSecret",
            field_path=".url",
            holds=lambda p: p.url is None or not any(c in p.url for c in "@?#"),
        ),
    )


class SpeculativeDeploymentSpec(ApiModel):
    """A vLLM fleet with a speculative-decoding config that is canaried on every change."""

    replicas: Annotated[int, Field(ge=0, le=10_000)] = 1
    """vLLM replicas serving the model (each holds accelerator.count GPUs)."""
    model: ModelSpec
    speculative: SpeculativeSpec
    engine: EngineSpec = EngineSpec()
    accelerator: AcceleratorSpec = AcceleratorSpec()
    storage: StorageSpec = StorageSpec()
    rollout: RolloutSpec = RolloutSpec()
    prometheus: PrometheusSpec = PrometheusSpec()
    paused: bool = False
    """Freeze the rollout (`kubectl specfleet pause`): no canary starts, no step advances, no analysis runs or
    counts, no rollback on a guardrail, and traffic stays as it is; `kubectl specfleet abort` still works. A
    promotion already under way completes. On resume the step in progress starts over. Not part of the revision."""
    template: PodTemplate | None = None
    """Optional: how the vLLM pods fit the cluster (labels, annotations, service account, pull secrets,
    priority, node selection, volumes, sidecars, CPU and memory). A change is a new revision, canaried, except
    a change of `template.metadata.labels` alone, which rolls the pods in place."""
    auto_tune: AutoTuneSpec | None = None
    """Optional: measure alternative speculative configs (`candidates`) against stable and promote the best
    one, and fit a batch-size schedule of the depth to what the fleet measures while it serves."""

    rules = (
        Rule(
            cel="has(self.speculative.model) ? self.speculative.model != self.model.name : true",
            message="speculative.model must not be the target model itself",
            field_path=".speculative.model",
            holds=lambda s: s.speculative.model != s.model.name,
        ),
        Rule(
            cel="has(self.speculative.draftTensorParallelSize) ? self.speculative.draftTensorParallelSize == 1 "
            "|| self.speculative.draftTensorParallelSize == self.engine.tensorParallelSize : true",
            message="speculative.draftTensorParallelSize must be 1 or engine.tensorParallelSize",
            field_path=".speculative.draftTensorParallelSize",
            holds=lambda s: s.speculative.draft_tensor_parallel_size in (None, 1, s.engine.tensor_parallel_size),
        ),
        Rule(
            cel="has(self.accelerator.count) ? self.accelerator.count >= self.engine.tensorParallelSize : true",
            message="accelerator.count must be >= engine.tensorParallelSize",
            field_path=".accelerator.count",
            holds=lambda s: s.accelerator.count is None or s.accelerator.count >= s.engine.tensor_parallel_size,
        ),
        Rule(
            cel="!has(self.template) || !has(self.template.vllm) || !has(self.template.vllm.resources) || "
            "[self.template.vllm.resources.?requests.orValue({}), self.template.vllm.resources.?limits.orValue({})]"
            ".all(r, !(self.accelerator.?resourceName.orValue('amd.com/gpu') in r))",
            message="template.vllm.resources must not set the GPU resource: it comes from accelerator.count",
            field_path=".template.vllm.resources",
            holds=lambda s: (
                s.template is None
                or s.accelerator.resource_name
                not in {*s.template.vllm.resources.requests, *s.template.vllm.resources.limits}
            ),
        ),
        Rule(
            cel="!(self.?rollout.?unguarded.orValue(false)) || size(self.?autoTune.?candidates.orValue([])) == 0",
            message="rollout.unguarded cannot go with autoTune.candidates: an experiment's candidates are "
            "measured from Prometheus, which an unguarded rollout does without",
            field_path=".rollout.unguarded",
            holds=lambda s: not (s.rollout.unguarded and s.candidates),
        ),
    )

    @property
    def gpus_per_replica(self) -> int:
        return self.accelerator.count or self.engine.tensor_parallel_size

    def serving(self) -> dict[str, Any]:
        """The part of the spec that decides what the pods run (and so the revision)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(SERVING_FIELDS))

    def with_serving(self, serving: dict[str, Any]) -> "SpeculativeDeploymentSpec":
        """This spec, serving what `serving` describes (how the stable track is rendered during a canary)."""
        current = self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=set(SERVING_FIELDS))
        return SpeculativeDeploymentSpec.model_validate({**current, **serving})

    @property
    def holdback_replicas(self) -> int:
        """Replicas on the holdback's reference config: `rollout.holdback.replicas` while stable keeps one."""
        holdback = self.rollout.holdback
        return holdback.replicas if holdback is not None and self.replicas > holdback.replicas else 0

    def move_limits(self) -> tuple[int, int] | None:
        """(`rollout.maxSurge`, `rollout.maxUnavailable`) as pods of `main_replicas`; None when maxSurge is unset
        (a step's canary pods go on top of `replicas`).

        Both rounding to 0 (small percentages of few replicas) would let nothing move: one pod may then be
        unavailable, as a Deployment's rolling update does.
        """
        rollout, total = self.rollout, self.main_replicas
        if rollout.max_surge is None:
            return None
        surge = pod_count(rollout.max_surge, total, round_up=True)
        unavailable = pod_count(rollout.max_unavailable, total, round_up=False)
        return surge, unavailable if surge or unavailable else 1

    @property
    def main_replicas(self) -> int:
        """Replicas that serve the fleet's own config (stable, and the canary's share of them)."""
        return self.replicas - self.holdback_replicas

    @property
    def candidates(self) -> list[Candidate]:
        """The experiment's candidates (none without `autoTune`)."""
        return self.auto_tune.candidates if self.auto_tune else []

    def candidate_spec(self, index: int) -> "SpeculativeDeploymentSpec":
        """This spec serving candidate `index` of `autoTune.candidates` (without candidates: what its pods render)."""
        assert self.auto_tune is not None
        speculative = self.auto_tune.candidates[index].applied_to(self.speculative)
        return self.model_copy(update={"speculative": speculative, "auto_tune": None})

    def summary(self) -> str:
        """The speculative config in a few words, for history and events."""
        spec = self.speculative
        if spec.method is SpeculativeMethod.NONE:
            return "no speculation"
        depth = spec.num_speculative_tokens or DEFAULT_NUM_SPECULATIVE_TOKENS
        return " ".join(part for part in (spec.method.value, f"k={depth}", spec.model) if part)
