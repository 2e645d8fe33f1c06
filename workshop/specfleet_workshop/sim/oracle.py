"""What the simulator's engine converges to, in closed form: the per-token latency of a config at a load.

An experiment ranks candidates by measuring them; the oracle knows the answer from what a user has (the
target, its GPU, the drafter's acceptance and cost, k, the load), so a benchmark can tell how far the
measured choice is from the best one. Pure: it evaluates the engine's own model (`sim.model`) on the
engine's own configuration (`sim.engine.configure`), never constants of its own.

Why a queue model and not one step: the scenario's load is an *arrival rate*. A faster config finishes
each request in fewer steps, so fewer requests run at once and every step is cheaper; a deeper k makes
every step dearer, most past the roofline's knee. The decoding batch is the state of a symmetric queue
(every decoding request gains one step per engine step, whatever its length or acceptance), whose
stationary distribution depends on the work only through its mean (insensitivity):
pi(b) ~ prod over i <= b of (arrival rate x mean steps per request x step time at batch i) / i.
A request sees the step times of the batches it runs in, weighted by their size.

Modelled as the engine does: per-request acceptance (Beta spread, decay), draft lengths (propose rate,
suffix decoding), the last step cut at the request's length, context growing in the KV reads, prefill
chunks of the requests that arrived during the previous step (they make a step compute-bound), and
`--max-num-seqs`. Not modelled (refused): batch-size schedules, error and abort rates, `--max-model-len`;
ignored: the KV cache running out and the chunked-prefill budget (rare at the loads a pod can serve).
Within about 1% of the engine at moderate load; 2-4% low near the compute knee with frequent prefill steps,
which cluster (a long step collects the arrivals of the next) while the batch grows, beyond a 1-D queue.

It predicts the mean over requests. An experiment ranks by the median, which sits further below the mean
the deeper k is when requests' acceptance spreads (docs/autotune.md).
"""

import inspect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise
from statistics import NormalDist
from typing import Any

from specfleet.hardware import MI325X, GpuProduct
from specfleet_workshop.fleetpods.pods import VllmArgs, parse_vllm_args
from specfleet_workshop.sim import model
from specfleet_workshop.sim.engine import LENGTH_LIMIT, EngineConfig, configure
from specfleet_workshop.sim.scenario import parse_scenario, resolve

LENGTH_SIGMA: float = inspect.signature(model.lognormal_tokens).parameters["sigma"].default
"""The spread the engine draws prompt and output lengths with (`model.lognormal_tokens`' default)."""
EXACT_STEPS = 64
"""Output lengths up to which the steps a request needs are computed exactly; beyond, each further token
adds 1 / (mean tokens per step) (the renewal limit, reached within a few steps)."""
PROMPT_CELLS = 64
"""Equal-probability cells standing for the prompt-length distribution in a prefill step."""
NEGLIGIBLE = 1e-12
"""Batch sizes whose stationary probability falls below this share are not visited."""


@dataclass(frozen=True)
class Setup:
    """What a user has: a target on a GPU, a drafter, and the scenario knobs of their traffic and drafter.

    `knobs` are the scenario's (`acceptance`, `acceptance_spread`, `decay`, `draft_cost`, `load`, ...),
    so the oracle and a simulated pod resolve the same numbers.
    """

    target: str = "meta-llama/Llama-3.1-8B-Instruct"
    gpu: GpuProduct = MI325X
    method: str = "eagle3"
    drafter: str | None = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    knobs: Mapping[str, Any] = field(default_factory=dict)
    tensor_parallel_size: int = 1

    def pod(self, k: int, extra_args: Sequence[str] = ()) -> tuple[VllmArgs, EngineConfig]:
        """The `vllm serve` arguments and the engine configuration of a pod at depth k (0: no speculation)."""
        argv = [self.target, "--tensor-parallel-size", str(self.tensor_parallel_size)]
        if k:
            speculative: dict[str, Any] = {"method": self.method, "num_speculative_tokens": k}
            if self.drafter:
                speculative["model"] = self.drafter
            argv += ["--speculative-config", json.dumps(speculative)]
        args = parse_vllm_args([*argv, *extra_args])
        params = resolve(parse_scenario({"defaults": dict(self.knobs)}), args.identity(None))
        return args, configure(args, params, self.gpu)

    def config(self, k: int) -> EngineConfig:
        """The engine configuration alone: what the oracle needs."""
        return self.pod(k)[1]


@dataclass(frozen=True)
class Prediction:
    """What a pod's engine converges to at its load."""

    token_latency: float
    """Mean over finished requests of decode time / (output tokens - 1), seconds."""
    batch: float
    """Time-average number of decoding requests."""
    step_seconds: float
    """Mean engine step as a decoding request sees it (each step weighted by the requests in it)."""
    overloaded: bool
    """Arrivals outpace what `--max-num-seqs` requests can finish: the queue grows, the batch stays full."""
    prefill_tokens: float
    """Mean prompt tokens prefilled per step: a request enters as one finishes, so batch / steps per request
    prompts a step (what vLLM's prompt-token counter over its inter-token-latency count, times the batch, reads)."""


@dataclass(frozen=True)
class _Work:
    """Per request, from the output lengths and the per-request acceptance."""

    steps: float
    """Mean decode steps per request."""
    steps_per_token: float
    """Mean over requests with at least one decode token of steps / decode tokens."""


def predict(config: EngineConfig) -> Prediction:
    """The steady state of one engine at its configured load (see the module docstring for the model)."""
    if config.schedule or config.error_rate or config.abort_rate or config.max_model_len is not None:
        raise ValueError("the oracle does not model batch-size schedules, errors, aborts or --max-model-len")
    work = _work(config)
    decode_tokens = _output_moments(config.output_tokens)
    context = config.prompt_tokens + 1 + decode_tokens[1] / (2 * decode_tokens[0])
    lengths = model.draft_length_distribution(config.k, config.suffix_draft_tokens)
    drafted = config.propose_rate * sum(n * p for n, p in lengths) if config.k else 0.0
    prompts = _prompt_cells(config.prompt_tokens)

    def step(batch: int, prefill: float) -> float:
        return config.step_seconds(
            model.StepLoad(
                decode_requests=batch,
                spec_tokens=config.k,
                prefill_tokens=round(prefill),
                context_tokens=round(batch * context),
                draft_tokens=round(batch * drafted),
            )
        )

    def mean_step(batch: int) -> float:
        """Steps mix in the prompts admitted at their start: those that arrived during the step before
        (Poisson, load x step), or with the batch full those of the requests that take the finished ones' places."""
        plain = step(batch, 0)
        one = sum(step(batch, p) for p in prompts) / len(prompts)
        seconds = plain
        for _ in range(50):
            admitted = batch / work.steps if batch == config.max_num_seqs else config.load * seconds
            none, single = math.exp(-admitted), admitted * math.exp(-admitted)
            several = 1 - none - single  # two prompts or more: E[count | count >= 2] of them
            more = step(batch, (admitted - single) / several * config.prompt_tokens) if several > 1e-9 else 0.0
            previous, seconds = seconds, none * plain + single * one + several * more
            if abs(seconds - previous) <= 1e-12 * seconds:
                break
        return seconds

    prompt_per_step = config.prompt_tokens / work.steps
    """Prompt tokens a step prefills per running request: each takes `work.steps` steps to finish and is replaced."""
    work_rate = config.load * work.steps
    """Decode steps of work arriving per second."""
    term = total = 1.0  # batch 0
    busy = request_steps = seconds = growth = 0.0
    for batch in range(1, config.max_num_seqs + 1):
        seconds = mean_step(batch)
        growth = work_rate * seconds / batch
        term *= growth
        total += term
        busy += batch * term
        request_steps += batch * term / seconds
        if growth < 1 and term < NEGLIGIBLE * total:
            break
    else:
        if growth >= 1:
            prefill = config.max_num_seqs * prompt_per_step
            return Prediction(seconds * work.steps_per_token, config.max_num_seqs, seconds, True, prefill)
        tail = term * growth / (1 - growth)  # requests waiting beyond --max-num-seqs: the batch stays full
        total += tail
        busy += config.max_num_seqs * tail
        request_steps += config.max_num_seqs * tail / seconds
    seen, mean_batch = busy / request_steps, busy / total
    return Prediction(seen * work.steps_per_token, mean_batch, seen, False, mean_batch * prompt_per_step)


def token_latency(config: EngineConfig) -> float:
    """Mean per-token latency (decode time / (output tokens - 1)) a pod with this config converges to."""
    return predict(config).token_latency


def best_depth(candidates: Sequence[int], setup: Setup) -> int:
    """The k among `candidates` with the lowest mean per-token latency at the setup's load; ties go to the smaller k."""
    return min(sorted(candidates), key=lambda k: token_latency(setup.config(k)))


@cache
def _output_lengths(mean: int) -> tuple[tuple[int, float], ...]:
    """(decode tokens m = output - 1, probability) as the engine draws outputs: log-normal, rounded, at least
    1, cut at LENGTH_LIMIT x the mean."""
    cap = LENGTH_LIMIT * mean
    log = NormalDist(math.log(mean) - LENGTH_SIGMA**2 / 2, LENGTH_SIGMA)

    def below(x: float) -> float:
        return log.cdf(math.log(x))

    lengths = [(0, below(1.5))]
    lengths += [(n - 1, below(n + 0.5) - below(n - 0.5)) for n in range(2, cap)]
    lengths.append((cap - 1, 1 - below(cap - 0.5)))
    return tuple(lengths)


@cache
def _output_moments(mean: int) -> tuple[float, float]:
    """E[m] and E[m^2] of the decode tokens per request."""
    lengths = _output_lengths(mean)
    return sum(m * p for m, p in lengths), sum(m * m * p for m, p in lengths)


@cache
def _prompt_cells(mean: int) -> tuple[float, ...]:
    """Prompt lengths standing for the log-normal: each equal-probability cell's conditional mean (so the
    mean prompt, which sets the prefill work, is exact)."""
    unit = NormalDist()
    edges = [-math.inf, *(unit.inv_cdf(i / PROMPT_CELLS) for i in range(1, PROMPT_CELLS)), math.inf]
    return tuple(
        mean * PROMPT_CELLS * (unit.cdf(high - LENGTH_SIGMA) - unit.cdf(low - LENGTH_SIGMA))
        for low, high in pairwise(edges)
    )


def _emitted(rates: Sequence[float], lengths: Sequence[tuple[int, float]], propose_rate: float) -> list[float]:
    """P(a step emits x tokens for a request), x = 0..k+1 (0 never): the bonus token plus the accepted prefix
    of its draft, when it got one."""
    emitted = [0.0] * (len(rates) + 2)
    emitted[1] = 1 - propose_rate
    for length, probability in lengths:
        reach = propose_rate * probability
        for accepted in range(length):
            emitted[1 + accepted] += reach * (1 - rates[accepted])
            reach *= rates[accepted]
        emitted[1 + length] += reach
    return emitted


def _steps_needed(emitted: Sequence[float]) -> list[float]:
    """E[steps to emit at least m tokens], m = 0..EXACT_STEPS (the last step is cut at the request's length)."""
    needed = [0.0]
    for m in range(1, EXACT_STEPS + 1):
        needed.append(1 + sum(p * needed[max(0, m - x)] for x, p in enumerate(emitted) if p))
    return needed


def _work(config: EngineConfig) -> _Work:
    """Steps per request and per decode token, over output lengths and the Beta spread of acceptance."""
    lengths = _output_lengths(config.output_tokens)
    head = [(m, p) for m, p in lengths if m <= EXACT_STEPS]
    tail = [(m, p) for m, p in lengths if m > EXACT_STEPS]
    tail_mass, tail_tokens = sum(p for _, p in tail), sum(m * p for m, p in tail)
    tail_inverse = sum(p / m for m, p in tail)
    decoding = 1 - sum(p for m, p in lengths if m == 0)
    if config.k:
        draft_lengths = model.draft_length_distribution(config.k, config.suffix_draft_tokens)
        grid = model.acceptance_grid(config.acceptance, config.acceptance_spread)
    else:
        draft_lengths, grid = (), ((0.0, 1.0),)
    steps = per_token = 0.0
    for acceptance, weight in grid:
        rates = model.position_acceptance(acceptance, config.decay, config.k)
        emitted = _emitted(rates, draft_lengths, config.propose_rate) if config.k else [0.0, 1.0]
        mean_tokens = sum(x * p for x, p in enumerate(emitted))
        needed = _steps_needed(emitted)
        last = needed[EXACT_STEPS]
        steps += weight * (
            sum(needed[m] * p for m, p in head)
            + tail_mass * last
            + (tail_tokens - EXACT_STEPS * tail_mass) / mean_tokens
        )
        per_token += weight * (
            sum(needed[m] / m * p for m, p in head if m)
            + (last - EXACT_STEPS / mean_tokens) * tail_inverse
            + tail_mass / mean_tokens
        )
    return _Work(steps=steps, steps_per_token=per_token / decoding)
