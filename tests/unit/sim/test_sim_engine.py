"""One simulated engine: counters against closed-form expectations, and the invariants vLLM's counters keep."""

import dataclasses
import json
from itertools import pairwise
from typing import Any

import pytest

from specfleet.hardware import MI300X, MI325X
from specfleet_workshop.fleetpods.pods import parse_vllm_args
from specfleet_workshop.sim import model
from specfleet_workshop.sim.engine import FINISH_REASONS, TIME_TO_FIRST_TOKEN_BUCKETS, Histogram, Metrics, configure
from specfleet_workshop.sim.scenario import load_scenario, resolve

from simkit import TARGET, engine


def spec_argv(k: int = 4, method: str = "eagle3", **extra: Any) -> list[str]:
    config = {"method": method, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": k, **extra}
    return [TARGET, "--served-model-name", "l8", "--speculative-config", json.dumps(config)]


SUFFIX_ARGV = [TARGET, "--speculative-config", json.dumps({"method": "suffix"})]
"""Suffix decoding with vLLM's default depth: k = suffix_decoding_max_tree_depth = 24."""


def run(argv: list[str], scenario: str = "", seconds: float = 60.0, **kwargs: Any) -> Metrics:
    simulated = engine(argv, scenario, **kwargs)
    simulated.advance_to(seconds)
    return simulated.metrics


def quantile(histogram: Histogram, q: float) -> float:
    """histogram_quantile's linear interpolation inside the bucket that holds the q-th observation."""
    target, below = q * histogram.count, 0
    for index, count in enumerate(histogram.counts):
        if count and below + count >= target:
            low = histogram.bounds[index - 1] if index else 0.0
            return low + (histogram.bounds[index] - low) * (target - below) / count
        below += count
    raise AssertionError("quantile beyond the last finite bucket")


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
        (spec_argv(1), 1, "defaults: {acceptance: 1.0, acceptance_spread: 0}"),
        (spec_argv(5), 5, "defaults: {acceptance: 0.0, acceptance_spread: 0}"),
        (spec_argv(6), 6, "defaults: {acceptance: 0.5, acceptance_spread: 0.45}"),
        (spec_argv(3), 3, "defaults: {acceptance: 0.8, error_rate: 0.1, abort_rate: 0.1, propose_rate: 0.5}"),
        ([TARGET], 0, ""),
    ],
)
def test_invariants(argv: list[str], k: int, scenario: str) -> None:
    metrics = run(argv, scenario, seconds=30.0)
    assert sum(metrics.finished.values()) > 50
    check_invariants(metrics, k)


def test_invariants_of_suffix_decoding() -> None:
    metrics = run(SUFFIX_ARGV, "defaults: {acceptance: 0.7, suffix_draft_tokens: 6}", seconds=30.0)
    assert sum(metrics.finished.values()) > 50
    check_invariants(metrics, 24, fixed_depth=False)


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
    """Every request alike (spread 0): the papers' closed form, per draft."""
    scenario = f"defaults: {{acceptance: {acceptance}, acceptance_spread: 0, decay: {decay}, load: 8}}"
    metrics = run(spec_argv(k), scenario, seconds=60.0)
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


@pytest.mark.parametrize("k", range(1, 9))
def test_position_zero_acceptance_stays_near_alpha_with_a_spread_across_requests(k: int) -> None:
    """Requests draw alpha ~ Beta(mean 0.8, sd 0.1): the counters' position-0 rate is a draft-weighted mean.

    Requests that accept more finish in fewer steps, so they contribute fewer drafts: the measured rate sits
    a little below alpha (0.794 at k = 1, 0.767 at k = 8), as the model's expectation says.
    """
    scenario = "defaults: {acceptance: 0.8, acceptance_spread: 0.1, load: 8}"
    simulated = engine(spec_argv(k), scenario)
    simulated.advance_to(120.0)
    metrics, expected = simulated.metrics, simulated.config.expectation
    assert expected is not None and metrics.num_drafts > 30_000
    position_zero = metrics.accepted_per_position[0] / metrics.num_drafts
    assert 0.8 - 0.045 < position_zero < 0.8 + 0.005
    assert position_zero == pytest.approx(expected.per_position[0], abs=0.012)
    assert expected.per_position[0] < 0.8 - 0.005 * (k > 1)  # the bias is real, and grows with k
    acceptance_rate = metrics.num_accepted_tokens / metrics.num_draft_tokens
    assert acceptance_rate == pytest.approx(expected.acceptance_rate, abs=0.015)


def test_a_spread_across_requests_widens_the_time_per_output_token_distribution() -> None:
    """Same engine, same seed: with alpha varying per request, fast and slow requests separate."""
    fine = [round(0.0005 * i, 4) for i in range(1, 81)]  # 0.5 ms buckets up to 40 ms, for both ITL and TPOT
    argv = [*spec_argv(4), "--custom-histogram-buckets", json.dumps({"inter_token_latency": fine})]

    def spread_of_tpot(spread: float, argv: list[str] = argv) -> tuple[float, Metrics]:
        scenario = f"defaults: {{acceptance: 0.8, acceptance_spread: {spread}, load: 4, noise: 0}}"
        metrics = run(argv, scenario, seconds=120.0)
        tpot = metrics.time_per_output_token
        assert tpot.count > 300
        return quantile(tpot, 0.95) - quantile(tpot, 0.05), metrics

    alike, _ = spread_of_tpot(0.0)
    varied, _ = spread_of_tpot(0.15)
    assert varied > 1.5 * alike
    plain = [TARGET, "--custom-histogram-buckets", json.dumps({"inter_token_latency": fine})]
    assert spread_of_tpot(0.0, plain)[1] == spread_of_tpot(0.15, plain)[1]  # no drafter: the spread changes nothing


def test_suffix_decoding_drafts_what_its_tree_matches_and_the_counters_record_that() -> None:
    """Suffix decoding (k = 24) proposes 1 + geometric tokens with mean 6 (less the cap): draft tokens count those."""
    simulated = engine(SUFFIX_ARGV, "defaults: {acceptance: 0.7, suffix_draft_tokens: 6, load: 8}")
    simulated.advance_to(60.0)
    metrics, expected = simulated.metrics, simulated.config.expectation
    assert expected is not None and simulated.config.k == 24 and metrics.num_drafts > 10_000
    more = 1 - 1 / 6
    assert expected.draft_tokens == pytest.approx((1 - more**24) / (1 - more))
    assert metrics.num_draft_tokens / metrics.num_drafts == pytest.approx(expected.draft_tokens, rel=0.03)
    assert metrics.num_accepted_tokens / metrics.num_draft_tokens == pytest.approx(expected.acceptance_rate, abs=0.02)
    assert metrics.accepted_per_position[12] > 0 and simulated.config.draft_pass_overhead == 0.0
    fixed = engine(spec_argv(24, method="ngram"), "defaults: {acceptance: 0.7, load: 8}")
    fixed.advance_to(20.0)
    assert fixed.metrics.num_draft_tokens == 24 * fixed.metrics.num_drafts  # a lookup match proposes all k


def test_each_drafter_pass_costs_its_overhead() -> None:
    """One request at a time, no noise: every step grows by k passes x the overhead, or by nothing for lookups."""
    base = "load: 0.5, noise: 0, prompt_tokens: 1, output_tokens: 64"

    def itl(argv: list[str], overhead_ms: float) -> float:
        scenario = f"defaults: {{{base}, draft_pass_overhead_ms: {overhead_ms}}}"
        histogram = run([*argv, "--max-num-seqs", "1"], scenario, seconds=60.0).inter_token_latency
        return histogram.total / histogram.count

    assert itl(spec_argv(4), 2.0) - itl(spec_argv(4), 0.0) == pytest.approx(4 * 0.002, rel=0.02)
    assert itl(spec_argv(4, method="dflash"), 2.0) - itl(spec_argv(4, method="dflash"), 0.0) == pytest.approx(
        0.002, rel=0.02
    )
    assert itl(spec_argv(4, method="ngram"), 2.0) == itl(spec_argv(4, method="ngram"), 0.0)


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
    """Errors are counted at finish; client aborts are not (vLLM's AsyncLLM.abort drops the request)."""
    metrics = run(spec_argv(4), "defaults: {load: 20, output_tokens: 64, error_rate: 0.1, abort_rate: 0.05}")
    total = sum(metrics.finished.values())
    assert metrics.finished["error"] / total == pytest.approx(0.1 / 0.95, abs=0.02)
    assert metrics.finished["abort"] == 0
    assert total / 60 == pytest.approx(20 * 0.95, rel=0.05)
    assert set(metrics.finished) == set(FINISH_REASONS)


def test_aborted_requests_keep_their_tokens_and_latencies_but_are_not_finished() -> None:
    """Everything observed while the request ran stays; nothing observed at finish happens."""
    metrics = run(spec_argv(4), "defaults: {load: 10, output_tokens: 64, abort_rate: 1.0}", seconds=30.0)
    assert metrics.finished == dict.fromkeys(FINISH_REASONS, 0)
    at_finish = (
        metrics.e2e_latency,
        metrics.queue_time,
        metrics.prefill_time,
        metrics.decode_time,
        metrics.inference_time,
        metrics.time_per_output_token,
    )
    assert all(histogram.count == 0 for histogram in at_finish)
    assert metrics.time_to_first_token.count > 200 and metrics.inter_token_latency.count > 1000
    assert metrics.prompt_tokens > 0 and metrics.generation_tokens > metrics.time_to_first_token.count
    assert metrics.num_drafts > 0
    assert metrics.running < 10 and metrics.kv_cache_usage < 0.5  # aborted requests free their KV cache
    check_invariants(metrics, 4)


def test_long_outputs_end_with_length_and_max_model_len_caps_them() -> None:
    metrics = run([TARGET, "--max-model-len", "600"], "defaults: {load: 10, prompt_tokens: 400, output_tokens: 200}")
    assert metrics.finished["length"] > 0.1 * sum(metrics.finished.values())


def test_custom_histogram_buckets() -> None:
    buckets = [0.002, 0.004, 0.006, 0.008, 0.01]
    custom = {"inter_token_latency": buckets, "request_latency": [0.5, 5.0]}
    metrics = run([*spec_argv(4), "--custom-histogram-buckets", json.dumps(custom)], seconds=5.0)
    assert metrics.inter_token_latency.bounds == metrics.time_per_output_token.bounds == tuple(buckets)
    assert metrics.inter_token_latency.counts[1:4] != [0, 0, 0]
    assert sum(metrics.time_per_output_token.counts[:5]) > 0.9 * metrics.time_per_output_token.count  # 2-10 ms
    assert metrics.e2e_latency.bounds == metrics.queue_time.bounds == (0.5, 5.0)
    assert metrics.time_to_first_token.bounds == TIME_TO_FIRST_TOKEN_BUCKETS


def test_a_steps_observations_at_once_are_the_same_as_one_by_one() -> None:
    values = [0.1 + 0.7 * ((i * 0.618) % 1) ** 3 for i in range(500)] + [0.1, 0.0, 100.0]
    one_by_one, at_once = Histogram((0.05, 0.1, 0.2, 0.5)), Histogram((0.05, 0.1, 0.2, 0.5))
    for value in values:
        one_by_one.observe(value)
    at_once.observe_all(values[:7])
    at_once.observe_all(values[7:])
    assert at_once == one_by_one  # the sum too, to the last bit


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
    assert window == pytest.approx(bad.expected_acceptance_rate, abs=0.02)
    assert bad.expected_acceptance_rate == pytest.approx(
        model.draft_acceptance_rate(model.position_acceptance(0.2, 1.0, 4)), abs=0.01
    )


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
