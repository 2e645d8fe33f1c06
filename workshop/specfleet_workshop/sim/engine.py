"""One simulated vLLM engine: requests arrive, are scheduled in engine steps, draft, verify and finish.

Pure: time and randomness come from the caller (`advance_to(t)`, a seeded `random.Random`), so the same
seed gives the same counters however the caller slices time. Metrics are recorded the way vLLM's v1
engine records them (`vllm/v1/metrics/stats.py`, `loggers.py`, `spec_decode/metrics.py`, 0.33.0):

- inter-token latency: one observation per decoding request per engine step (the time since that
  request's previous tokens), however many tokens the step emitted for it;
- time to first token: when the request's prefill completes (arrival to end of that step);
- e2e, queue, prefill, decode, inference time and mean time per output token: when the request finishes;
- spec decode: per request per step that carried a draft, num_drafts += 1, num_draft_tokens += the
  draft's length (k; for suffix decoding what its tree proposed), num_accepted_tokens += n,
  accepted_per_pos[i] += 1 for i < n;
- prompt tokens at the end of prefill, generation tokens for every emitted token.

A request the client aborts is dropped the way `AsyncLLM.abort` drops it (`OutputProcessor.abort_requests`
pops its state without `update_from_finished_request`): no `request_success_total` increment and none of
the histograms observed at finish, while its tokens, TTFT and ITL observations up to the abort stay.

Besides the scenario's Poisson arrivals, a client can `submit` a request of its own (the simulator's
`/v1/completions` endpoint): it joins the same queue and batch, drafts and is verified like the others,
is counted in the same metrics, and records when its tokens were emitted (`ClientRequest.tokens`), so
the server can stream them at those times.
"""

import math
import random
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from specfleet.hardware import GpuProduct
from specfleet_workshop.fleetpods.pods import VllmArgs
from specfleet_workshop.sim import model
from specfleet_workshop.sim.scenario import Params

INTER_TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
TIME_TO_FIRST_TOKEN_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip
"""vLLM 0.33.0 defaults (`vllm/v1/metrics/buckets.py`)."""
DEFAULT_BUCKETS = {
    "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
    "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
    "request_latency": REQUEST_LATENCY_BUCKETS,
}

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
"""vLLM's FinishReason values, in its order; every one is exposed from the start, at zero. `abort` stays
at zero for client aborts, which vLLM drops without counting."""
LENGTH_LIMIT = 4
"""Clients ask for max_tokens = 4x the mean output; longer outputs end with finished_reason=length."""
MAX_WAITING = 10_000
"""Arrivals beyond this many waiting requests are dropped (the client gave up), so overload stays bounded."""


@dataclass
class Histogram:
    """Bucket counts (not cumulative; the last slot is +Inf), sum and count, as Prometheus exposes them."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """`le` buckets: a value equal to a bound belongs to that bound's bucket."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def observe_all(self, values: list[float]) -> None:
        """`observe` each value in order (the same sum to the last bit), in one call for a whole engine step."""
        counts, bounds, total = self.counts, self.bounds, self.total
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.total = total
        self.count += len(values)

    def cumulative(self) -> list[int]:
        running, out = 0, []
        for count in self.counts:
            running += count
            out.append(running)
        return out


@dataclass
class Metrics:
    """Everything the exposition shows for one engine."""

    k: int
    buckets: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """`--custom-histogram-buckets` per family; vLLM's defaults for the rest."""
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    tool_calls: int | None = None
    """Tool calls made (one per finished request), None while the scenario does not ask for them."""
    tool_calls_parsed: int = 0
    time_to_first_token: Histogram = field(init=False)
    inter_token_latency: Histogram = field(init=False)
    time_per_output_token: Histogram = field(init=False)
    e2e_latency: Histogram = field(init=False)
    queue_time: Histogram = field(init=False)
    prefill_time: Histogram = field(init=False)
    decode_time: Histogram = field(init=False)
    inference_time: Histogram = field(init=False)

    def __post_init__(self) -> None:
        def histogram(family: str) -> Histogram:
            return Histogram(self.buckets.get(family) or DEFAULT_BUCKETS[family])

        self.time_to_first_token = histogram("time_to_first_token")
        self.inter_token_latency = histogram("inter_token_latency")
        self.time_per_output_token = histogram("inter_token_latency")
        self.e2e_latency = histogram("request_latency")
        self.queue_time = histogram("request_latency")
        self.prefill_time = histogram("request_latency")
        self.decode_time = histogram("request_latency")
        self.inference_time = histogram("request_latency")
        self.accepted_per_position = self.accepted_per_position or [0] * self.k


@dataclass(frozen=True)
class EngineConfig:
    """The model's inputs for one pod: its arguments, its GPU and its scenario knobs, resolved to numbers."""

    hardware: model.Hardware
    weights: float
    kv_per_token: float
    kv_capacity: int
    draft_cost: float
    parallel_drafting: bool
    draft_pass_overhead: float
    """Seconds of fixed cost per drafter pass (0 for lookup drafters)."""
    k: int
    schedule: tuple[tuple[int, int, int], ...]
    acceptance: float
    """Mean per-token acceptance over requests (alpha)."""
    acceptance_spread: float
    """Standard deviation of a request's acceptance around `acceptance` (Beta distributed)."""
    decay: float
    suffix_draft_tokens: float | None
    """Mean draft length of a suffix-tree match; None for drafters that always propose k tokens."""
    expectation: model.DraftExpectation | None
    """What the spec-decode counters converge to per draft at the configured k (None without speculation);
    steps that a batch-size schedule runs at a lower k are not in it."""
    propose_rate: float
    load: float
    prompt_tokens: int
    output_tokens: int
    error_rate: float
    abort_rate: float
    noise: float
    tool_calls_parsed: float | None
    """Share of finished requests whose tool call parses; None: no tool-call counters."""
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None

    def step_seconds(self, load: model.StepLoad) -> float:
        """How long one engine step with `load` takes on this pod (its GPU, weights, KV cache and drafter)."""
        return model.step_seconds(
            self.hardware,
            self.weights,
            self.kv_per_token,
            self.draft_cost,
            self.parallel_drafting,
            load,
            self.draft_pass_overhead,
        )

    @property
    def rates(self) -> tuple[float, ...]:
        """Per-position conditional acceptance of a request with the mean acceptance (empty without speculation)."""
        return model.position_acceptance(self.acceptance, self.decay, self.k)

    @property
    def expected_acceptance_rate(self) -> float:
        """accepted / drafted as vLLM's counters will show it (NaN without speculation)."""
        return self.expectation.acceptance_rate if self.expectation else math.nan

    @property
    def expected_tokens_per_draft(self) -> float:
        """Mean accepted length incl. the bonus token, as vLLM's dashboard computes it."""
        return self.expectation.mean_acceptance_length if self.expectation else 1.0


def configure(args: VllmArgs, params: Params, gpu: GpuProduct) -> EngineConfig:
    """Resolve sizes, costs and per-position acceptance for one pod (see docs/simulator.md for the equations)."""
    weights = model.weight_bytes(args.model, params.target_size_gib, args.quantization)
    params_count = weights / model.bytes_per_param(args.model, args.quantization)
    kv_per_token = model.kv_bytes_per_token(params_count)
    spec = args.speculative
    tp = args.tensor_parallel_size
    drafter_weights: float | None = None
    draft_cost = draft_pass_overhead = 0.0
    suffix_draft_tokens: float | None = None
    expectation: model.DraftExpectation | None = None
    if spec is not None:
        if params.drafter_size_gib is not None:
            drafter_weights = params.drafter_size_gib * model.GIB
        elif spec.method == "draft_model" and spec.model and model.params_from_name(spec.model):
            drafter_weights = model.weight_bytes(spec.model, None, args.quantization)
        draft_cost = (
            params.draft_cost
            if params.draft_cost is not None
            else model.default_draft_cost(spec.method, weights, drafter_weights, tp, spec.draft_tp or tp)
        )
        if spec.method not in model.FREE_DRAFTERS:
            draft_pass_overhead = params.draft_pass_overhead_ms / 1000
        if spec.method == "suffix":
            suffix_draft_tokens = params.suffix_draft_tokens
        expectation = model.expected_drafts(
            params.acceptance,
            params.acceptance_spread,
            params.decay,
            spec.k,
            model.draft_length_distribution(spec.k, suffix_draft_tokens),
            params.propose_rate,
        )
    return EngineConfig(
        hardware=model.Hardware(
            hbm_tbps=gpu.hbm_tbps,
            tp=tp,
            bandwidth_efficiency=params.bandwidth_efficiency,
            knee_tokens=params.knee_tokens,
            overhead_seconds=params.step_overhead_ms / 1000,
        ),
        weights=weights,
        kv_per_token=kv_per_token,
        kv_capacity=model.kv_capacity_tokens(
            gpu.vram_gib, tp, args.gpu_memory_utilization, weights + (drafter_weights or 0.0), kv_per_token
        ),
        draft_cost=draft_cost,
        parallel_drafting=spec is not None and (spec.parallel_drafting or spec.method in model.PARALLEL_DRAFTERS),
        draft_pass_overhead=draft_pass_overhead,
        k=spec.k if spec else 0,
        schedule=spec.schedule if spec else (),
        acceptance=params.acceptance,
        acceptance_spread=params.acceptance_spread,
        decay=params.decay,
        suffix_draft_tokens=suffix_draft_tokens,
        expectation=expectation,
        propose_rate=params.propose_rate,
        load=params.load,
        prompt_tokens=params.prompt_tokens,
        output_tokens=params.output_tokens,
        error_rate=params.error_rate,
        abort_rate=params.abort_rate,
        noise=params.noise,
        tool_calls_parsed=params.tool_calls_parsed,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
    )


@dataclass(eq=False)
class ClientRequest:
    """A request a client sent (the completions endpoint), followed token by token while it runs in the engine."""

    arrival: float
    prompt_tokens: int
    max_tokens: int
    tokens: list[tuple[float, int]] = field(default_factory=list)
    """(simulated time, tokens emitted then): the first token when prefill completes, then one entry per step."""
    finish_reason: str | None = None
    """`stop`, `length` or `error` once the request left the engine; `abort` once the client gave up."""

    @property
    def generated(self) -> int:
        return sum(count for _, count in self.tokens)


@dataclass(eq=False)
class _Request:
    arrival: float
    prompt: int
    output: int
    """Tokens this request generates before it finishes (for error/abort: before it fails)."""
    reason: str
    prefill_left: int
    rates: tuple[float, ...] = ()
    """This request's per-position acceptance (its own alpha x decay^i), positions 0..k-1."""
    scheduled: float = 0.0
    first_token: float = 0.0
    last_token: float = 0.0
    generated: int = 0
    client: ClientRequest | None = None
    """Set for a request a client submitted: where its tokens are recorded."""


@dataclass
class _Step:
    end: float
    decoding: list[tuple[_Request, int]]
    """Each decoding request with the length of the draft it verifies (0: no draft this step)."""
    prefill: list[tuple[_Request, int]]


class Engine:
    """The state of one engine; `advance_to` moves simulated time forward, `metrics` is what it exposes."""

    def __init__(
        self, config: EngineConfig, buckets: dict[str, tuple[float, ...]], rng: random.Random, start: float
    ) -> None:
        self.config = config
        self.rng = rng
        self.clock = start
        self._metrics = Metrics(k=config.k, buckets=buckets)
        self._count_tool_calls()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._kv_used = 0
        self._step: _Step | None = None
        self._next_arrival = start + self._interarrival()

    def reconfigure(self, config: EngineConfig, now: float) -> None:
        """Take new knobs from `now` on (call after `advance_to(now)`); arrivals restart at the new rate.

        A new acceptance applies to requests already in flight too (they draw their own acceptance again),
        so the counters follow a scenario change from its moment on.
        """
        old = self.config
        self.config = config
        self._count_tool_calls()
        if config.load != old.load:
            self._next_arrival = now + self._interarrival(config.load)
        acceptance = (config.k, config.acceptance, config.acceptance_spread, config.decay)
        if acceptance != (old.k, old.acceptance, old.acceptance_spread, old.decay):
            for request in (*self._running, *self._waiting):
                request.rates = self._request_rates()

    def _count_tool_calls(self) -> None:
        """Tool-call counters exist from the moment a scenario asks for them (counters never go away)."""
        if self.config.tool_calls_parsed is not None and self._metrics.tool_calls is None:
            self._metrics.tool_calls = 0

    def advance_to(self, t: float) -> None:
        """Run every engine step that ends by `t`; a step in flight at `t` finishes in a later call."""
        while True:
            if self._step is None:
                self._enqueue_arrivals(self.clock)
                if not self._running and not self._waiting:
                    if self._next_arrival > t:
                        self.clock = max(self.clock, t)
                        return
                    self.clock = self._next_arrival
                    continue
                self._step = self._plan(self.clock)
            if self._step.end > t:
                return
            step, self._step = self._step, None
            self._finish(step)
            self.clock = step.end

    def submit(self, now: float, prompt_tokens: int, max_tokens: int, ignore_eos: bool = False) -> ClientRequest:
        """A client's request arrives at `now`: it waits, is scheduled, decoded and counted like the scenario's own.

        Its output is `max_tokens` long with `ignore_eos` (finish reason `length`); otherwise its length is drawn
        as the scenario's requests' are, cut at `max_tokens`. The scenario's `error_rate` applies to it too
        (`abort_rate` does not: only the client aborts it, with `abort`). Runs the engine to `now` first.
        """
        self.advance_to(now)
        self._enqueue_arrivals(now)  # the scenario's requests that arrived before it queue before it
        config, rng = self.config, self.rng
        output, reason = max_tokens, "length"
        if config.max_model_len is not None:
            prompt_tokens = max(1, min(prompt_tokens, config.max_model_len - 1))
            output = max(1, min(output, config.max_model_len - prompt_tokens))
        if not ignore_eos:
            drawn = model.lognormal_tokens(rng, config.output_tokens)
            if drawn < output:
                output, reason = drawn, "stop"
        if rng.random() < config.error_rate:
            output, reason = rng.randint(1, output), "error"
        client = ClientRequest(arrival=now, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
        self._waiting.append(
            _Request(
                arrival=now,
                prompt=prompt_tokens,
                output=output,
                reason=reason,
                prefill_left=prompt_tokens,
                rates=self._request_rates(),
                client=client,
            )
        )
        self.advance_to(now)  # an idle engine plans its next step now
        return client

    def arrive(self, now: float) -> None:
        """A request like the scenario's own arrives at `now` from outside (the stand-in gateway routed it here)."""
        self.advance_to(now)
        self._enqueue_arrivals(now)
        if len(self._waiting) < MAX_WAITING:
            self._waiting.append(self._new_request(now))
        self.advance_to(now)

    def abort(self, client: ClientRequest) -> None:
        """The client went away: a waiting request is dropped, a running one ends with the step in flight.

        Either way it is not counted at finish, as vLLM's `AsyncLLM.abort` does (see the module docstring).
        """
        if client.finish_reason is not None:
            return
        client.finish_reason = "abort"
        for request in self._waiting:
            if request.client is client:
                self._waiting.remove(request)
                return
        for request in self._running:
            if request.client is client:
                request.reason = "abort"
                request.output = max(1, request.generated)

    @property
    def next_step_end(self) -> float | None:
        """When the step in flight ends (the next time tokens are emitted), or None when the engine is idle."""
        return self._step.end if self._step is not None else None

    def _interarrival(self, load: float | None = None) -> float:
        rate = self.config.load if load is None else load
        return self.rng.expovariate(rate) if rate > 0 else math.inf

    def _enqueue_arrivals(self, until: float) -> None:
        while self._next_arrival <= until:
            if len(self._waiting) < MAX_WAITING:
                self._waiting.append(self._new_request(self._next_arrival))
            self._next_arrival += self._interarrival()

    def _new_request(self, arrival: float) -> _Request:
        config, rng = self.config, self.rng
        prompt = model.lognormal_tokens(rng, config.prompt_tokens)
        output = model.lognormal_tokens(rng, config.output_tokens)
        reason = "stop"
        max_tokens = LENGTH_LIMIT * config.output_tokens
        if config.max_model_len is not None:
            prompt = max(1, min(prompt, config.max_model_len - 1))
            max_tokens = max(1, min(max_tokens, config.max_model_len - prompt))
        if output >= max_tokens:
            output, reason = max_tokens, "length"
        draw = rng.random()
        if draw < config.error_rate + config.abort_rate:
            reason = "error" if draw < config.error_rate else "abort"
            output = rng.randint(1, output)
        return _Request(
            arrival=arrival,
            prompt=prompt,
            output=output,
            reason=reason,
            prefill_left=prompt,
            rates=self._request_rates(),
        )

    def _request_rates(self) -> tuple[float, ...]:
        """A request's own per-position acceptance: its alpha drawn around the drafter's mean, then the decay."""
        config = self.config
        if not config.k:
            return ()
        alpha = model.draw_acceptance(self.rng, config.acceptance, config.acceptance_spread)
        return model.position_acceptance(alpha, config.decay, config.k)

    def _plan(self, start: float) -> _Step:
        """Schedule one step at `start` as vLLM's scheduler would: admit, decode everyone, prefill in the budget."""
        config = self.config
        while self._waiting and len(self._running) < config.max_num_seqs:
            request = self._waiting[0]
            if self._running and self._kv_used + request.prompt > config.kv_capacity:
                break
            self._waiting.popleft()
            request.scheduled = start
            self._running.append(request)
            self._kv_used += request.prompt
        k = model.spec_tokens_for_batch(config.k, config.schedule, len(self._running)) if config.k else 0
        decoding, context_tokens, draft_tokens = [], 0, 0
        for request in self._running:
            if request.prefill_left == 0:
                length = self._draft_length(k)
                decoding.append((request, length))
                context_tokens += request.prompt + request.generated
                draft_tokens += length
        budget = config.max_num_batched_tokens - len(decoding) * (1 + k)
        prefill, prefill_tokens = [], 0
        for request in self._running:
            if request.prefill_left and budget > 0:
                chunk = min(request.prefill_left, budget)
                prefill.append((request, chunk))
                prefill_tokens += chunk
                budget -= chunk
        load = model.StepLoad(
            decode_requests=len(decoding),
            spec_tokens=k,
            prefill_tokens=prefill_tokens,
            context_tokens=context_tokens,
            draft_tokens=draft_tokens,
        )
        seconds = config.step_seconds(load)
        return _Step(
            end=start + seconds * model.noise_factor(self.rng, config.noise), decoding=decoding, prefill=prefill
        )

    def _draft_length(self, k: int) -> int:
        """Tokens one request's draft proposes this step: 0 when the drafter finds nothing (propose_rate), else
        k, or for suffix decoding as far as its tree continues the match."""
        if k == 0 or self.rng.random() >= self.config.propose_rate:
            return 0
        return model.draw_draft_length(self.rng, k, self.config.suffix_draft_tokens)

    def _finish(self, step: _Step) -> None:
        """Apply a step's outcome at its end: first tokens, drafts verified, tokens emitted, requests done."""
        metrics, end = self._metrics, step.end
        for request, chunk in step.prefill:
            request.prefill_left -= chunk
            if request.prefill_left == 0:
                request.first_token = request.last_token = end
                request.generated = 1
                self._kv_used += 1
                metrics.prompt_tokens += request.prompt
                metrics.generation_tokens += 1
                metrics.time_to_first_token.observe(end - request.arrival)
                if request.client is not None:
                    request.client.tokens.append((end, 1))
        rng, per_position = self.rng, metrics.accepted_per_position
        drafts = draft_tokens = accepted_tokens = emitted_tokens = 0
        gaps = []
        for request, length in step.decoding:
            emitted = 1
            if length:
                accepted = model.accepted_count(rng, request.rates[:length])
                drafts += 1
                draft_tokens += length
                accepted_tokens += accepted
                for position in range(accepted):
                    per_position[position] += 1
                emitted += accepted
            emitted = min(emitted, request.output - request.generated)
            gaps.append(end - request.last_token)
            request.generated += emitted
            request.last_token = end
            if request.client is not None and emitted:  # none for a request aborted mid-step
                request.client.tokens.append((end, emitted))
            emitted_tokens += emitted
        metrics.inter_token_latency.observe_all(gaps)
        metrics.num_drafts += drafts
        metrics.num_draft_tokens += draft_tokens
        metrics.num_accepted_tokens += accepted_tokens
        metrics.generation_tokens += emitted_tokens
        self._kv_used += emitted_tokens
        still_running = []
        for request in self._running:
            if request.generated and request.generated >= request.output:
                self._complete(request)
            else:
                still_running.append(request)
        self._running = still_running

    def _complete(self, request: _Request) -> None:
        """A request leaves the engine; all but client aborts are counted and observed as vLLM does at finish."""
        self._kv_used -= request.prompt + request.generated
        if request.client is not None and request.client.finish_reason is None:
            request.client.finish_reason = request.reason
        if request.reason == "abort":
            return
        metrics = self._metrics
        metrics.finished[request.reason] += 1
        metrics.e2e_latency.observe(request.last_token - request.arrival)
        metrics.queue_time.observe(request.scheduled - request.arrival)
        metrics.prefill_time.observe(request.first_token - request.scheduled)
        metrics.decode_time.observe(request.last_token - request.first_token)
        metrics.inference_time.observe(request.last_token - request.scheduled)
        tokens_after_first = request.generated - 1
        mean = (request.last_token - request.first_token) / tokens_after_first if tokens_after_first > 0 else 0.0
        metrics.time_per_output_token.observe(mean)
        if self.config.tool_calls_parsed is not None and metrics.tool_calls is not None:
            metrics.tool_calls += 1
            metrics.tool_calls_parsed += self.rng.random() < self.config.tool_calls_parsed

    @property
    def metrics(self) -> Metrics:
        """What the engine exposes; its gauges (running, waiting, KV cache usage) are read at this moment, as
        vLLM's scheduler state is between steps, rather than kept up to date on every change."""
        metrics = self._metrics
        metrics.running = len(self._running)
        metrics.waiting = len(self._waiting)
        metrics.kv_cache_usage = min(1.0, self._kv_used / self.config.kv_capacity)
        return metrics
