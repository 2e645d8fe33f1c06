"""The performance model of one vLLM engine with speculative decoding. Pure functions, no state, no I/O.

Everything the simulator reports comes from these equations (see docs/simulator.md):

- Decode is memory-bound at small batches: one forward pass streams every weight once, so it costs
  weight bytes / (HBM bandwidth x TP x efficiency). Past a compute-bound knee (tokens per pass at which
  compute time equals weight-streaming time) the pass grows with the number of tokens in it.
- A speculative step runs the drafter (k sequential passes, or one for parallel drafters) and then one
  target pass that verifies B x (k + 1) tokens: cheap at small B, ruinous past the knee.
- Each request has its own per-token acceptance a_r, drawn from a Beta distribution with the scenario's
  mean and spread (how well a drafter guesses depends on the prompt, and stays so for the request).
  Draft token i is accepted, given that tokens 0..i-1 were, with probability a_r x decay^i (Leviathan
  et al. 2023 is the case decay = 1); the first rejection ends the draft, and the target's own next
  token (the bonus token) is always emitted.
- Counters aggregate over drafts, not requests: a request that accepts more finishes in fewer steps,
  so it contributes fewer drafts, and the measured acceptance is a draft-weighted mean.
"""

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

GIB = 2**30
FALLBACK_PARAMS = 8e9
"""Parameters assumed when neither a size hint nor the model name says (a Llama-3.1-8B class model)."""

_PARAMS_IN_NAME = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")
_QUANTIZED_BYTES = (
    (("int4", "w4a16", "awq", "gptq", "mxfp4", "bitsandbytes"), 0.5),
    (("fp8", "int8", "w8a8"), 1.0),
)
SEQUENTIAL_DRAFTERS_COST = {"eagle": 0.05, "eagle3": 0.05, "draft_model": 0.1}
"""Cost of one drafter pass relative to one target decode pass when no size says otherwise.

EAGLE heads are about one decoder layer of the target; a standalone draft model without a size hint is
assumed to be a tenth of the target; MTP heads (any `*mtp` method) are one layer like EAGLE."""
PARALLEL_DRAFTERS = frozenset({"dflash", "dspark"})
PARALLEL_DRAFT_COST = 0.15
"""Block-diffusion drafters propose all k tokens in one pass of a few layers."""
FREE_DRAFTERS = frozenset({"ngram", "ngram_gpu", "suffix"})
"""Lookup drafters run on the host (or as a tiny kernel): no model pass to pay for."""
OTHER_DRAFTER_COST = 0.05


def params_from_name(model: str) -> float | None:
    """Parameter count from a name such as `meta-llama/Llama-3.1-70B-Instruct` (70e9), or None.

    The first standalone `<number>B` wins; `A3B` (MoE active parameters) and `8x7B` are not standalone.
    """
    match = _PARAMS_IN_NAME.search(model.rsplit("/", 1)[-1])
    return float(match.group(1)) * 1e9 if match else None


def bytes_per_param(model: str, quantization: str | None) -> float:
    """2 bytes (bf16/fp16) unless `--quantization` or the model name says 8-bit or 4-bit."""
    words = f"{quantization or ''} {model}".lower()
    for markers, size in _QUANTIZED_BYTES:
        if any(marker in words for marker in markers):
            return size
    return 2.0


def weight_bytes(model: str, size_gib: float | None, quantization: str | None = None) -> float:
    """Bytes read per forward pass: the size hint if given, else parameters from the name x bytes per param."""
    if size_gib is not None:
        return size_gib * GIB
    return (params_from_name(model) or FALLBACK_PARAMS) * bytes_per_param(model, quantization)


def kv_bytes_per_token(params: float) -> float:
    """KV-cache bytes per token of context, a rough fit for GQA transformers in bf16.

    Grows with the square root of the parameter count: Llama-3.1 8B holds 128 KiB per token, 70B 320 KiB,
    and 45 KiB x sqrt(billions of parameters) gives 124 and 376.
    """
    return 45 * 1024 * math.sqrt(params / 1e9)


def kv_capacity_tokens(vram_gib: float, tp: int, memory_utilization: float, weights: float, kv_per_token: float) -> int:
    """Tokens the KV cache holds: what vLLM's memory budget leaves after the weights (at least one long request)."""
    free = vram_gib * GIB * tp * memory_utilization - weights
    return max(32768, int(free / kv_per_token))


def position_acceptance(acceptance: float, decay: float, k: int) -> tuple[float, ...]:
    """a_i = acceptance x decay^i for draft positions i = 0..k-1: acceptance of token i given 0..i-1 were accepted.

    Later positions are accepted less often because a drafter's guesses compound; decay = 1 is the
    geometric model of the papers.
    """
    return tuple(min(1.0, acceptance * decay**i) for i in range(k))


def spread_limit(mean: float) -> float:
    """The widest spread (standard deviation) a Beta distribution with this mean can have: sqrt(m (1 - m))."""
    return math.sqrt(max(0.0, mean * (1 - mean)))


def beta_shape(mean: float, spread: float) -> tuple[float, float] | None:
    """Beta(a, b) with this mean and standard deviation, or None when every request is the same (spread 0).

    Mean m and variance s^2 give a + b = m (1 - m) / s^2 - 1, which must be positive: s < sqrt(m (1 - m)).
    """
    if spread == 0:
        return None
    total = mean * (1 - mean) / (spread * spread) - 1
    if total <= 0:
        raise ValueError(f"spread {spread} is too wide for mean {mean}: it must be below {spread_limit(mean):.4g}")
    return mean * total, (1 - mean) * total


def draw_acceptance(rng: random.Random, mean: float, spread: float) -> float:
    """One request's per-token acceptance: a Beta draw around the drafter's mean (the mean itself at spread 0)."""
    shape = beta_shape(mean, spread)
    return mean if shape is None else rng.betavariate(*shape)


def acceptance_grid(mean: float, spread: float, cells: int = 256) -> tuple[tuple[float, float], ...]:
    """(acceptance, probability) pairs that stand for the Beta distribution of requests' acceptance.

    Cell masses integrate the singular factor x^(a-1) (below 1/2) or (1-x)^(b-1) (above) exactly and take
    the other factor at the cell's middle, so shapes below 1 (a density that is infinite at 0 or 1) stay
    accurate without a special function library.
    """
    shape = beta_shape(mean, spread)
    if shape is None:
        return ((mean, 1.0),)
    a, b = shape
    masses = []
    for cell in range(cells):
        low, high = cell / cells, (cell + 1) / cells
        middle = (low + high) / 2
        if middle < 0.5:
            mass = (high**a - low**a) / a * (1 - middle) ** (b - 1)
        else:
            mass = ((1 - low) ** b - (1 - high) ** b) / b * middle ** (a - 1)
        masses.append((middle, mass))
    total = sum(mass for _, mass in masses)
    return tuple((value, mass / total) for value, mass in masses)


def draft_length_distribution(k: int, mean_tokens: float | None) -> tuple[tuple[int, float], ...]:
    """(draft length, probability) for one draft: always k, or 1 + a geometric count with this mean, capped at k.

    The geometric case models suffix decoding, which proposes only as far as its suffix tree continues
    the current match: each further token with probability 1 - 1 / mean_tokens.
    """
    if mean_tokens is None or k <= 1:
        return ((k, 1.0),)
    more = 1 - 1 / mean_tokens
    lengths = [(n, (1 - more) * more ** (n - 1)) for n in range(1, k)]
    return (*lengths, (k, more ** (k - 1)))


def draw_draft_length(rng: random.Random, k: int, mean_tokens: float | None) -> int:
    """One draft's length, from `draft_length_distribution`."""
    if mean_tokens is None:
        return k
    more, length = 1 - 1 / mean_tokens, 1
    while length < k and rng.random() < more:
        length += 1
    return length


def expected_accepted(rates: Sequence[float]) -> float:
    """E[accepted draft tokens per draft] = sum over i of P(tokens 0..i all accepted)."""
    total, reach = 0.0, 1.0
    for rate in rates:
        reach *= rate
        total += reach
    return total


def draft_acceptance_rate(rates: Sequence[float]) -> float:
    """What vLLM's counters show: accepted / drafted tokens = E[accepted] / k (not the per-token acceptance)."""
    return expected_accepted(rates) / len(rates) if rates else math.nan


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """Tokens one request gains per verification step in the geometric case: (1 - a^(k+1)) / (1 - a).

    The k accepted-prefix terms plus the bonus token; equals 1 + expected_accepted of k equal rates.
    """
    if acceptance >= 1.0:
        return k + 1.0
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


@dataclass(frozen=True)
class DraftExpectation:
    """What a pod's spec-decode counters converge to, per draft (the way vLLM aggregates them)."""

    per_position: tuple[float, ...]
    """accepted_per_pos[i] / num_drafts."""
    draft_tokens: float
    """num_draft_tokens / num_drafts: k, or less for drafters that propose fewer tokens."""

    @property
    def accepted(self) -> float:
        """num_accepted_tokens / num_drafts."""
        return sum(self.per_position)

    @property
    def acceptance_rate(self) -> float:
        """num_accepted_tokens / num_draft_tokens, the dashboard's acceptance rate."""
        return self.accepted / self.draft_tokens if self.draft_tokens else math.nan

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted per draft (the bonus token included), as vLLM's dashboard computes it."""
        return 1 + self.accepted


def expected_drafts(
    acceptance: float,
    spread: float,
    decay: float,
    k: int,
    lengths: Sequence[tuple[int, float]],
    propose_rate: float = 1.0,
) -> DraftExpectation:
    """The counters' per-draft means over requests whose acceptance is Beta(acceptance, spread).

    Each request is weighted by its drafts per generated token, 1 / (1 + propose_rate x E[accepted]):
    a request that accepts more needs fewer steps, so it contributes fewer drafts, and the counters'
    position-0 rate falls below the mean acceptance when the spread is not 0. Ignores that the last
    step of a request is cut at its length (a few tokens per request).
    """
    survive = [sum(p for n, p in lengths if n > position) for position in range(k)]
    per_position = [0.0] * k
    total_weight = 0.0
    for value, probability in acceptance_grid(acceptance, spread):
        reach, accepted, at = 1.0, 0.0, []
        for position, rate in enumerate(position_acceptance(value, decay, k)):
            reach *= rate
            at.append(reach * survive[position])
            accepted += at[-1]
        weight = probability / (1 + propose_rate * accepted)
        total_weight += weight
        for position, share in enumerate(at):
            per_position[position] += weight * share
    return DraftExpectation(
        per_position=tuple(share / total_weight for share in per_position),
        draft_tokens=sum(n * p for n, p in lengths),
    )


def default_draft_cost(
    method: str,
    target_bytes: float,
    drafter_bytes: float | None,
    tp: int,
    draft_tp: int,
) -> float:
    """Cost of one drafter pass relative to one target decode pass (both memory-bound).

    With a known drafter size it is the ratio of bytes each GPU streams: a 1B drafter on one GPU next to
    a 70B target on eight costs 8x more than its size ratio suggests. Otherwise a per-method figure.
    """
    if method in FREE_DRAFTERS:
        return 0.0
    if drafter_bytes is not None:
        return (drafter_bytes / draft_tp) / (target_bytes / tp)
    if method in PARALLEL_DRAFTERS:
        return PARALLEL_DRAFT_COST
    return SEQUENTIAL_DRAFTERS_COST.get(method, OTHER_DRAFTER_COST)


def spec_tokens_for_batch(k: int, schedule: Sequence[tuple[int, int, int]], batch: int) -> int:
    """Speculation depth for a step of `batch` requests under `num_speculative_tokens_per_batch_size`.

    As vLLM's `build_dynamic_sd_schedule_lookup` (vllm/v1/spec_decode/dynamic/utils.py) fills its table:
    rows `(start, end, depth)` are inclusive ranges; a batch in a gap between ranges or past the last one
    keeps the depth of the range before it; every depth is capped at the configured k. vLLM refuses a
    schedule whose first range does not start at 1, so only batch 0 is below it, and an empty step
    keeps k there too.
    """
    depth = k
    for start, end, scheduled in sorted(schedule):
        if batch < start:
            break
        depth = scheduled
        if batch <= end:
            break
    return min(k, depth)


@dataclass(frozen=True)
class Hardware:
    """What one engine runs on, and how well it uses it."""

    hbm_tbps: float
    tp: int
    bandwidth_efficiency: float
    knee_tokens: float
    """Tokens per pass at which compute time equals weight-streaming time (the roofline's ridge)."""
    overhead_seconds: float
    """Scheduling, sampling and launch cost paid once per engine step."""

    def stream_seconds(self, num_bytes: float) -> float:
        """Time to read `num_bytes` from HBM across the TP group."""
        return num_bytes / (self.hbm_tbps * 1e12 * self.tp * self.bandwidth_efficiency)


@dataclass(frozen=True)
class StepLoad:
    """What one engine step does."""

    decode_requests: int
    spec_tokens: int
    """Speculation depth of the step (k from the schedule, or 0 without speculation): what the drafter runs."""
    prefill_tokens: int
    context_tokens: int
    """Context (prompt + generated) of the decoding requests: the KV cache the attention reads."""
    draft_tokens: int | None = None
    """Draft tokens the target verifies, when requests' drafts differ in length (a lookup found nothing, or
    suffix decoding proposed fewer than k); None: every decoding request drafted spec_tokens."""

    @property
    def verified_tokens(self) -> int:
        """Tokens in the target pass: one per decoding request, its draft tokens, and the prefill chunks."""
        drafts = self.decode_requests * self.spec_tokens if self.draft_tokens is None else self.draft_tokens
        return self.decode_requests + drafts + self.prefill_tokens


def target_pass_seconds(hw: Hardware, weights: float, kv_per_token: float, load: StepLoad) -> float:
    """Roofline of the verifying target pass: max(weights + KV read from HBM, tokens x compute per token).

    Compute per token is the weight-streaming time / knee, so the pass stays memory-bound until
    B x (k + 1) + prefill tokens reach the knee, and grows linearly after it.
    """
    tokens = load.verified_tokens
    memory = hw.stream_seconds(weights + load.context_tokens * kv_per_token)
    compute = tokens * hw.stream_seconds(weights) / hw.knee_tokens
    return max(memory, compute)


def draft_seconds(
    hw: Hardware, weights: float, draft_cost: float, parallel: bool, load: StepLoad, pass_overhead: float = 0.0
) -> float:
    """Drafting for the batch: k sequential passes of B tokens, or one pass of B x k tokens for parallel drafters.

    Each pass costs draft_cost x a target weight stream, with the same roofline knee, plus a fixed
    `pass_overhead` (kernel launches, the drafter's sampling) that bytes do not account for.
    """
    if load.spec_tokens == 0 or load.decode_requests == 0 or (draft_cost == 0 and pass_overhead == 0):
        return 0.0
    passes, tokens_per_pass = (
        (1, load.decode_requests * load.spec_tokens) if parallel else (load.spec_tokens, load.decode_requests)
    )
    streaming = draft_cost * hw.stream_seconds(weights) * max(1.0, tokens_per_pass / hw.knee_tokens)
    return passes * (streaming + pass_overhead)


def step_seconds(
    hw: Hardware,
    weights: float,
    kv_per_token: float,
    draft_cost: float,
    parallel: bool,
    load: StepLoad,
    pass_overhead: float = 0.0,
) -> float:
    """Wall time of one engine step before noise: draft + verify + fixed overhead."""
    return (
        target_pass_seconds(hw, weights, kv_per_token, load)
        + draft_seconds(hw, weights, draft_cost, parallel, load, pass_overhead)
        + hw.overhead_seconds
    )


def noise_factor(rng: random.Random, sigma: float) -> float:
    """Log-normal multiplier with mean 1: step times vary (kernels, host jitter) but never go negative."""
    return math.exp(rng.gauss(0.0, sigma) - sigma * sigma / 2) if sigma > 0 else 1.0


def accepted_count(rng: random.Random, rates: Sequence[float]) -> int:
    """Sample one draft's accepted tokens: walk the positions until the first rejection."""
    for position, rate in enumerate(rates):
        if rng.random() >= rate:
            return position
    return len(rates)


def lognormal_tokens(rng: random.Random, mean: float, sigma: float = 0.8) -> int:
    """A token count with the given mean and a long right tail, as request lengths have; at least 1."""
    return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))
