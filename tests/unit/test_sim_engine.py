"""One simulated engine: counters against closed-form expectations, and the invariants vLLM's counters keep."""

import dataclasses
import json
import random
from itertools import pairwise
from typing import Any

import pytest

from specfleet.hardware import MI300X, MI325X
from specfleet.sim import model
from specfleet.sim.engine import FINISH_REASONS, TIME_TO_FIRST_TOKEN_BUCKETS, Engine, Histogram, Metrics, configure
from specfleet.sim.pods import parse_vllm_args
from specfleet.sim.scenario import load_scenario, resolve

TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def spec_argv(k: int = 4, method: str = "eagle3", **extra: Any) -> list[str]:
    config = {"method": method, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": k, **extra}
    return [TARGET, "--served-model-name", "l8", "--speculative-config", json.dumps(config)]


def engine(argv: list[str], scenario: str = "", seed: int = 1, gpu: Any = MI325X) -> Engine:
    args = parse_vllm_args(argv)
    config = configure(args, resolve(load_scenario(scenario), args.identity("canary")), gpu)
    return Engine(config, args.histogram_buckets, random.Random(seed), start=0.0)


def run(argv: list[str], scenario: str = "", seconds: float = 60.0, **kwargs: Any) -> Metrics:
    simulated = engine(argv, scenario, **kwargs)
    simulated.advance_to(seconds)
    return simulated.metrics


def check_histogram(histogram: Histogram) -> None:
    """_count equals the bucket increments, and _sum lies within what the buckets allow."""
    assert histogram.count == sum(histogram.counts) == histogram.cumulative()[-1]
    assert histogram.cumulative() == sorted(histogram.cumulative())
    lower = upper = 0.0
    for index, count in enumerate(histogram.counts):
        if count:
            lower += count * (histogram.bounds[index - 1] if index else 0.0)
            upper += count * (histogram.bounds[index] if index < len(histogram.bounds) else float("inf"))
    assert lower <= histogram.total <= upper


def check_invariants(metrics: Metrics, k: int, fixed_depth: bool = True) -> None:
    assert metrics.num_accepted_tokens <= metrics.num_draft_tokens
    assert metrics.num_draft_tokens <= k * metrics.num_drafts
    if fixed_depth:
        assert metrics.num_draft_tokens == k * metrics.num_drafts
    per_position = metrics.accepted_per_position
    assert len(per_position) == k
    assert all(a >= b for a, b in pairwise(per_position))
    assert not per_position or per_position[0] <= metrics.num_drafts
    assert sum(per_position) == metrics.num_accepted_tokens
    histograms = [getattr(metrics, f.name) for f in dataclasses.fields(metrics) if f.type in (Histogram, "Histogram")]
    assert len(histograms) == 8
    for histogram in histograms:
        check_histogram(histogram)
    finished = sum(metrics.finished.values())
    request_histograms = (metrics.e2e_latency, metrics.queue_time, metrics.decode_time, metrics.time_per_output_token)
    assert all(h.count == finished for h in request_histograms)
    # every first token is one TTFT observation; every later step of a request one ITL observation that
    # emits 1 token plus at most the accepted draft tokens
    first_and_steps = metrics.time_to_first_token.count + metrics.inter_token_latency.count
    assert first_and_steps <= metrics.generation_tokens <= first_and_steps + metrics.num_accepted_tokens
    assert 0.0 <= metrics.kv_cache_usage <= 1.0


@pytest.mark.parametrize(
    ("argv", "k", "scenario"),
    [
        (spec_argv(4), 4, ""),
        (spec_argv(4), 4, "defaults: {acceptance: 0.9, decay: 0.7, noise: 0.3}"),
        (spec_argv(8, method="dflash"), 8, "defaults: {acceptance: 0.6, load: 20}"),
        (spec_argv(1), 1, "defaults: {acceptance: 1.0}"),
        (spec_argv(5), 5, "defaults: {acceptance: 0.0}"),
        (spec_argv(3), 3, "defaults: {acceptance: 0.8, error_rate: 0.1, abort_rate: 0.1, propose_rate: 0.5}"),
        ([TARGET], 0, ""),
    ],
)
def test_invariants(argv: list[str], k: int, scenario: str) -> None:
    metrics = run(argv, scenario, seconds=30.0)
    assert sum(metrics.finished.values()) > 50
    check_invariants(metrics, k)


def test_invariants_under_a_batch_size_schedule_and_overload() -> None:
    argv = spec_argv(6, num_speculative_tokens_per_batch_size=[[1, 8, 6], [9, 32, 2], [33, 1024, 0]])
    argv += ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
    simulated = engine(argv, "defaults: {load: 60, output_tokens: 128}")
    simulated.advance_to(20.0)
    metrics = simulated.metrics
    check_invariants(metrics, 6, fixed_depth=False)
    assert metrics.waiting > 0 and metrics.running == 64
    assert metrics.num_draft_tokens < 6 * metrics.num_drafts  # some steps drafted only 2


@pytest.mark.parametrize(("acceptance", "decay", "k"), [(0.8, 1.0, 4), (0.5, 1.0, 2), (0.9, 0.8, 6), (0.3, 1.0, 5)])
def test_acceptance_matches_the_closed_form(acceptance: float, decay: float, k: int) -> None:
    metrics = run(spec_argv(k), f"defaults: {{acceptance: {acceptance}, decay: {decay}, load: 8}}", seconds=60.0)
    rates = model.position_acceptance(acceptance, decay, k)
    assert metrics.num_drafts > 10_000
    measured = metrics.num_accepted_tokens / metrics.num_draft_tokens
    assert measured == pytest.approx(model.draft_acceptance_rate(rates), abs=0.01)
    reach = 1.0
    for position, rate in enumerate(rates):
        reach *= rate
        assert metrics.accepted_per_position[position] / metrics.num_drafts == pytest.approx(reach, abs=0.01)
    if decay == 1.0:
        mean_length = 1 + metrics.num_accepted_tokens / metrics.num_drafts
        assert mean_length == pytest.approx(model.expected_tokens_per_step(acceptance, k), rel=0.02)


def test_acceptance_rate_knob_is_what_the_counters_show() -> None:
    metrics = run(spec_argv(5), "defaults: {acceptance_rate: 0.45, decay: 0.9, load: 8}")
    assert metrics.num_accepted_tokens / metrics.num_draft_tokens == pytest.approx(0.45, abs=0.01)


def test_inter_token_latency_is_observed_once_per_step_not_per_token() -> None:
    """vLLM records one ITL sample per decoding request per engine step, however many tokens it emitted."""
    metrics = run(spec_argv(4), "defaults: {acceptance: 0.9}")
    assert metrics.inter_token_latency.count == metrics.num_drafts
    tokens_after_first = metrics.generation_tokens - metrics.time_to_first_token.count
    assert tokens_after_first > 3 * metrics.inter_token_latency.count


def test_step_time_from_bandwidth() -> None:
    """At a trickle of load every step decodes one request: ITL = weights / (bandwidth x efficiency) + overhead."""
    scenario = "defaults: {load: 0.5, noise: 0, prompt_tokens: 1, bandwidth_efficiency: 1, step_overhead_ms: 0}"
    metrics = run([TARGET, "--max-num-seqs", "1"], scenario, seconds=120.0)
    floor = 16e9 / 6.0e12
    mean = metrics.inter_token_latency.total / metrics.inter_token_latency.count
    assert mean == pytest.approx(floor, rel=0.05)  # KV reads of short contexts add little
    on_mi300x = run([TARGET, "--max-num-seqs", "1"], scenario, seconds=120.0, gpu=MI300X).inter_token_latency
    assert on_mi300x.total / on_mi300x.count == pytest.approx(mean * 6.0 / 5.3, rel=0.05)


def test_served_tokens_follow_the_offered_load() -> None:
    metrics = run([TARGET], "defaults: {load: 5, output_tokens: 200}", seconds=120.0)
    assert metrics.generation_tokens / 120 == pytest.approx(5 * 200, rel=0.1)
    assert sum(metrics.finished.values()) / 120 == pytest.approx(5, rel=0.1)


def test_a_good_drafter_speeds_requests_up_and_a_slow_one_slows_them_down() -> None:
    def e2e(argv: list[str], scenario: str) -> float:
        metrics = run(argv, scenario, seconds=60.0)
        return metrics.e2e_latency.total / metrics.e2e_latency.count

    plain = e2e([TARGET], "")
    assert e2e(spec_argv(4), "defaults: {acceptance: 0.8, draft_cost: 0.05}") < plain / 2
    assert e2e(spec_argv(4), "defaults: {acceptance: 0.2, draft_cost: 0.4}") > plain


def test_slow_drafter_raises_inter_token_latency() -> None:
    def itl(draft_cost: float) -> float:
        histogram = run(spec_argv(4), f"defaults: {{draft_cost: {draft_cost}}}").inter_token_latency
        return histogram.total / histogram.count

    assert itl(0.2) > 1.3 * itl(0.05)


def test_speculation_hurts_at_large_batches() -> None:
    """Saturated with requests, verifying B x (k + 1) tokens per step costs more than the drafts save."""
    scenario = "defaults: {load: 400, acceptance: 0.5, output_tokens: 64, prompt_tokens: 64}"
    saturated_spec = run([*spec_argv(4), "--max-num-seqs", "256"], scenario, seconds=8.0)
    saturated_plain = run([TARGET, "--max-num-seqs", "256"], scenario, seconds=8.0)
    assert saturated_spec.running == saturated_plain.running == 256
    assert saturated_spec.generation_tokens < 0.9 * saturated_plain.generation_tokens


def test_error_and_abort_rates() -> None:
    metrics = run(spec_argv(4), "defaults: {load: 20, output_tokens: 64, error_rate: 0.1, abort_rate: 0.05}")
    total = sum(metrics.finished.values())
    assert metrics.finished["error"] / total == pytest.approx(0.1, abs=0.02)
    assert metrics.finished["abort"] / total == pytest.approx(0.05, abs=0.015)
    assert set(metrics.finished) == set(FINISH_REASONS)


def test_long_outputs_end_with_length_and_max_model_len_caps_them() -> None:
    metrics = run([TARGET, "--max-model-len", "600"], "defaults: {load: 10, prompt_tokens: 400, output_tokens: 200}")
    assert metrics.finished["length"] > 0.1 * sum(metrics.finished.values())


def test_custom_histogram_buckets() -> None:
    buckets = [0.002, 0.004, 0.006, 0.008, 0.01]
    custom = {"inter_token_latency": buckets, "request_latency": [0.5, 5.0]}
    metrics = run([*spec_argv(4), "--custom-histogram-buckets", json.dumps(custom)], seconds=5.0)
    assert metrics.inter_token_latency.bounds == metrics.time_per_output_token.bounds == tuple(buckets)
    assert metrics.inter_token_latency.counts[1:4] != [0, 0, 0]
    assert metrics.e2e_latency.bounds == metrics.queue_time.bounds == (0.5, 5.0)
    assert metrics.time_to_first_token.bounds == TIME_TO_FIRST_TOKEN_BUCKETS


def test_same_seed_same_numbers_however_time_is_sliced() -> None:
    whole = engine(spec_argv(4), "defaults: {noise: 0.2}", seed=7)
    whole.advance_to(30.0)
    sliced = engine(spec_argv(4), "defaults: {noise: 0.2}", seed=7)
    t = 0.0
    while t < 30.0:
        t = min(30.0, t + 0.37)
        sliced.advance_to(t)
    assert sliced.metrics == whole.metrics
    other_seed = engine(spec_argv(4), "defaults: {noise: 0.2}", seed=8)
    other_seed.advance_to(30.0)
    assert other_seed.metrics != whole.metrics


def test_counters_never_decrease_and_a_new_scenario_applies_from_the_change_on() -> None:
    simulated = engine(spec_argv(4), "defaults: {acceptance: 0.9, load: 8}")
    simulated.advance_to(30.0)
    before = dataclasses.replace(simulated.metrics, accepted_per_position=list(simulated.metrics.accepted_per_position))
    args = parse_vllm_args(spec_argv(4))
    bad = configure(args, resolve(load_scenario("defaults: {acceptance: 0.2, load: 8}"), args.identity(None)), MI325X)
    simulated.reconfigure(bad, 30.0)
    simulated.advance_to(60.0)
    after = simulated.metrics
    assert after.num_drafts > before.num_drafts and after.num_accepted_tokens >= before.num_accepted_tokens
    assert all(a >= b for a, b in zip(after.accepted_per_position, before.accepted_per_position, strict=True))
    window = (after.num_accepted_tokens - before.num_accepted_tokens) / (
        after.num_draft_tokens - before.num_draft_tokens
    )
    assert window == pytest.approx(model.draft_acceptance_rate(model.position_acceptance(0.2, 1.0, 4)), abs=0.02)


def test_idle_engine_stays_at_zero_and_keeps_up_with_time() -> None:
    simulated = engine(spec_argv(4), "defaults: {load: 0}")
    simulated.advance_to(3600.0)
    assert simulated.clock == 3600.0
    assert simulated.metrics == Metrics(k=4)


def test_configure_draft_cost_from_sizes() -> None:
    draft_argv = [
        "meta-llama/Llama-3.1-70B-Instruct",
        "--tensor-parallel-size",
        "8",
        "--speculative-config",
        json.dumps({"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 5}),
    ]
    args = parse_vllm_args(draft_argv)
    identity = args.identity(None)
    config = configure(args, resolve(load_scenario(""), identity), MI300X)
    assert config.draft_cost == pytest.approx(1 / 70)  # draft TP defaults to the target's
    hinted = resolve(load_scenario("defaults: {drafter_size_gib: 4.0, target_size_gib: 128.0}"), identity)
    assert configure(args, hinted, MI300X).draft_cost == pytest.approx(4 / 128)
    assert configure(args, hinted, MI300X).weights == 128 * 2**30
