"""The simulator's pure model: sizes from names, acceptance per position, tokens per step, step-time roofline."""

import random
import statistics

import pytest

from specfleet_workshop.sim import model

HW = model.Hardware(hbm_tbps=5.3, tp=1, bandwidth_efficiency=1.0, knee_tokens=200, overhead_seconds=0.0)
LLAMA_8B = 16e9


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", 70e9),
        ("meta-llama/Llama-3.1-8B-Instruct", 8e9),
        ("meta-llama/Llama-3.2-1B-Instruct", 1e9),
        ("Qwen/Qwen2.5-0.5B-Instruct", 0.5e9),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", 80e9),  # total, not the 3B active
        ("openai/gpt-oss-120b", 120e9),
        ("mistralai/Mixtral-8x7B-v0.1", None),  # 8x7B is not a plain count
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 8e9),
        ("some/model", None),
    ],
)
def test_parameter_count_from_name(name: str, params: float | None) -> None:
    assert model.params_from_name(name) == params


def test_weight_bytes_from_hint_name_quantization_or_fallback() -> None:
    assert model.weight_bytes("meta-llama/Llama-3.1-70B-Instruct", None) == 140e9
    assert model.weight_bytes("meta-llama/Llama-3.1-70B-Instruct", 35.0) == 35 * 2**30
    assert model.weight_bytes("meta-llama/Llama-3.1-70B-Instruct", None, "fp8") == 70e9
    assert model.weight_bytes("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", None) == 35e9
    assert model.weight_bytes("some/model", None) == model.FALLBACK_PARAMS * 2


def test_per_position_acceptance_decays_geometrically() -> None:
    assert model.position_acceptance(0.8, 1.0, 3) == (0.8, 0.8, 0.8)
    assert model.position_acceptance(0.8, 0.5, 3) == pytest.approx((0.8, 0.4, 0.2))


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.6, 0.9, 0.99])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_tokens_per_step_closed_form_equals_bonus_plus_expected_accepted(acceptance: float, k: int) -> None:
    rates = model.position_acceptance(acceptance, 1.0, k)
    assert model.expected_tokens_per_step(acceptance, k) == pytest.approx(1 + model.expected_accepted(rates))
    assert model.expected_tokens_per_step(1.0, k) == k + 1


def test_sampled_accepted_length_matches_the_expectation() -> None:
    rng = random.Random(3)
    rates = model.position_acceptance(0.8, 0.9, 5)
    samples = [model.accepted_count(rng, rates) for _ in range(100_000)]
    assert sum(samples) / len(samples) == pytest.approx(model.expected_accepted(rates), rel=0.01)
    assert max(samples) == 5 and min(samples) == 0


def test_vllm_acceptance_rate_is_lower_than_per_token_acceptance_for_k_above_one() -> None:
    """accepted / drafted = E[accepted] / k: with a = 0.8 and k = 4 vLLM shows 0.59, not 0.8."""
    rates = model.position_acceptance(0.8, 1.0, 4)
    assert model.draft_acceptance_rate(rates) == pytest.approx((0.8 + 0.64 + 0.512 + 0.4096) / 4)
    assert model.draft_acceptance_rate(model.position_acceptance(0.8, 1.0, 1)) == pytest.approx(0.8)


@pytest.mark.parametrize(("mean", "spread"), [(0.8, 0.1), (0.3, 0.1), (0.05, 0.1), (0.97, 0.15), (0.5, 0.45)])
def test_request_acceptance_is_beta_with_the_stated_mean_and_spread(mean: float, spread: float) -> None:
    rng = random.Random(11)
    draws = [model.draw_acceptance(rng, mean, spread) for _ in range(50_000)]
    assert statistics.fmean(draws) == pytest.approx(mean, abs=0.005)
    assert statistics.pstdev(draws) == pytest.approx(spread, abs=0.005)
    assert all(0.0 <= draw <= 1.0 for draw in draws)
    grid = model.acceptance_grid(mean, spread)
    grid_mean = sum(value * p for value, p in grid)
    assert sum(p for _, p in grid) == pytest.approx(1.0)
    assert grid_mean == pytest.approx(mean, abs=0.002)  # also when the density is infinite at 0 or 1
    assert sum((value - grid_mean) ** 2 * p for value, p in grid) ** 0.5 == pytest.approx(spread, abs=0.002)


def test_beta_shape_from_mean_and_spread() -> None:
    """Beta(12, 3) has mean 0.8 and variance 0.8 x 0.2 / 16 = 0.01."""
    assert model.beta_shape(0.8, 0.1) == pytest.approx((12.0, 3.0))
    assert model.beta_shape(0.8, 0.0) is None
    assert model.draw_acceptance(random.Random(1), 0.8, 0.0) == 0.8
    assert model.spread_limit(0.9) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="too wide"):
        model.beta_shape(0.9, 0.3)
    with pytest.raises(ValueError, match="too wide"):
        model.beta_shape(1.0, 0.01)


def test_draft_lengths_fixed_or_geometric_capped_at_k() -> None:
    assert model.draft_length_distribution(5, None) == ((5, 1.0),)
    assert model.draw_draft_length(random.Random(1), 5, None) == 5
    # mean 2: each further token with probability 1/2; at k = 3: P(1) = 1/2, P(2) = 1/4, P(3) = 1/4
    assert model.draft_length_distribution(3, 2.0) == ((1, 0.5), (2, 0.25), (3, 0.25))
    lengths = model.draft_length_distribution(24, 6.0)
    assert sum(p for _, p in lengths) == pytest.approx(1.0)
    expected = sum(n * p for n, p in lengths)
    more = 1 - 1 / 6
    assert expected == pytest.approx((1 - more**24) / (1 - more))  # 6, less the cap's share
    rng = random.Random(4)
    draws = [model.draw_draft_length(rng, 24, 6.0) for _ in range(50_000)]
    assert statistics.fmean(draws) == pytest.approx(expected, rel=0.02)
    assert min(draws) == 1 and max(draws) == 24


def test_expected_drafts_without_spread_is_the_closed_form() -> None:
    rates = model.position_acceptance(0.8, 0.9, 5)
    expectation = model.expected_drafts(0.8, 0.0, 0.9, 5, ((5, 1.0),))
    reach = [0.8, 0.8 * 0.72, 0.8 * 0.72 * 0.648]
    assert expectation.per_position[:3] == pytest.approx(reach)
    assert expectation.acceptance_rate == pytest.approx(model.draft_acceptance_rate(rates))
    assert expectation.mean_acceptance_length == pytest.approx(1 + model.expected_accepted(rates))
    # drafts cut at length 3 of 5 half the time: positions 3 and 4 are drafted (and accepted) half as often
    short = model.expected_drafts(0.8, 0.0, 1.0, 5, ((3, 0.5), (5, 0.5)))
    assert short.per_position == pytest.approx((0.8, 0.64, 0.512, 0.4096 / 2, 0.32768 / 2))
    assert short.draft_tokens == 4.0


def test_expected_drafts_weight_requests_by_their_drafts() -> None:
    """Two kinds of request at k = 1, a = 0.6 and a = 1.0: each drafts 1 / (1 + a) times per token.

    Drafts per token 1/1.6 and 1/2, so position 0 shows (0.6/1.6 + 1/2) / (1/1.6 + 1/2) = 0.7778, not 0.8.
    """
    weights = (1 / 1.6, 1 / 2)
    assert (0.6 * weights[0] + 1.0 * weights[1]) / sum(weights) == pytest.approx(0.7778, abs=1e-4)
    for k in (1, 4, 8):
        spread = model.expected_drafts(0.8, 0.1, 1.0, k, ((k, 1.0),))
        alike = model.expected_drafts(0.8, 0.0, 1.0, k, ((k, 1.0),))
        assert 0.76 < spread.per_position[0] < 0.8 == pytest.approx(alike.per_position[0])
    one = model.expected_drafts(0.8, 0.1, 1.0, 1, ((1, 1.0),)).per_position[0]
    eight = model.expected_drafts(0.8, 0.1, 1.0, 8, ((8, 1.0),)).per_position[0]
    assert eight < one  # deeper drafts separate fast and slow requests more


def test_decode_floor_is_weights_over_bandwidth() -> None:
    """70B in bf16 on one MI300X-class stream: 140 GB / 5.3 TB/s = 26.4 ms per pass."""
    single = model.StepLoad(decode_requests=1, spec_tokens=0, prefill_tokens=0, context_tokens=0)
    assert model.target_pass_seconds(HW, 140e9, 0, single) == pytest.approx(140e9 / 5.3e12)
    tp8 = model.Hardware(hbm_tbps=5.3, tp=8, bandwidth_efficiency=0.5, knee_tokens=200, overhead_seconds=0.0)
    assert model.target_pass_seconds(tp8, 140e9, 0, single) == pytest.approx(140e9 / (5.3e12 * 8 * 0.5))


def test_verification_is_free_below_the_knee_and_linear_above_it() -> None:
    def verify(batch: int, k: int) -> float:
        return model.target_pass_seconds(HW, LLAMA_8B, 0, model.StepLoad(batch, k, 0, 0))

    floor = LLAMA_8B / 5.3e12
    assert verify(1, 4) == pytest.approx(floor)
    assert verify(40, 4) == pytest.approx(floor)  # 200 tokens: exactly at the knee
    assert verify(80, 4) == pytest.approx(2 * floor)
    assert verify(80, 0) == pytest.approx(floor)


def test_speculation_helps_at_small_batches_and_hurts_at_large_ones() -> None:
    """Tokens per second of a batch, with and without an a = 0.7, k = 4 EAGLE-like drafter."""
    rates = model.position_acceptance(0.7, 1.0, 4)

    def throughput(batch: int, k: int) -> float:
        load = model.StepLoad(decode_requests=batch, spec_tokens=k, prefill_tokens=0, context_tokens=0)
        seconds = model.step_seconds(HW, LLAMA_8B, 0, 0.05, False, load)
        per_request = 1 + model.expected_accepted(rates[:k])
        return batch * per_request / seconds

    assert throughput(1, 4) > 2 * throughput(1, 0)
    assert throughput(256, 4) < throughput(256, 0)


def test_kv_reads_make_long_contexts_slower() -> None:
    short = model.StepLoad(decode_requests=32, spec_tokens=0, prefill_tokens=0, context_tokens=32 * 100)
    long = model.StepLoad(decode_requests=32, spec_tokens=0, prefill_tokens=0, context_tokens=32 * 8000)
    kv = model.kv_bytes_per_token(8e9)
    assert model.target_pass_seconds(HW, LLAMA_8B, kv, long) > 1.5 * model.target_pass_seconds(HW, LLAMA_8B, kv, short)


def test_draft_time_sequential_vs_parallel() -> None:
    load = model.StepLoad(decode_requests=1, spec_tokens=8, prefill_tokens=0, context_tokens=0)
    floor = LLAMA_8B / 5.3e12
    assert model.draft_seconds(HW, LLAMA_8B, 0.1, False, load) == pytest.approx(8 * 0.1 * floor)
    assert model.draft_seconds(HW, LLAMA_8B, 0.1, True, load) == pytest.approx(0.1 * floor)
    assert model.draft_seconds(HW, LLAMA_8B, 0.1, False, model.StepLoad(1, 0, 0, 0)) == 0.0


def test_each_draft_pass_pays_a_fixed_overhead() -> None:
    """k sequential passes pay it k times, a parallel drafter once; a lookup drafter (no cost, no overhead) never."""
    load = model.StepLoad(decode_requests=4, spec_tokens=5, prefill_tokens=0, context_tokens=0)
    floor = LLAMA_8B / 5.3e12
    sequential = model.draft_seconds(HW, LLAMA_8B, 0.05, False, load, pass_overhead=0.0003)
    assert sequential == pytest.approx(5 * (0.05 * floor + 0.0003))
    assert model.draft_seconds(HW, LLAMA_8B, 0.05, True, load, 0.0003) == pytest.approx(0.05 * floor + 0.0003)
    assert model.draft_seconds(HW, LLAMA_8B, 0.0, False, load, 0.0) == 0.0
    assert model.draft_seconds(HW, LLAMA_8B, 0.0, False, load, 0.0003) == pytest.approx(5 * 0.0003)
    plain = model.step_seconds(HW, LLAMA_8B, 0, 0.05, False, load)
    assert model.step_seconds(HW, LLAMA_8B, 0, 0.05, False, load, 0.0003) == pytest.approx(plain + 5 * 0.0003)


def test_verified_tokens_count_the_drafts_actually_proposed() -> None:
    full = model.StepLoad(decode_requests=100, spec_tokens=4, prefill_tokens=20, context_tokens=0)
    assert full.verified_tokens == 100 * 5 + 20
    partial = model.StepLoad(decode_requests=100, spec_tokens=4, prefill_tokens=20, context_tokens=0, draft_tokens=150)
    assert partial.verified_tokens == 100 + 150 + 20
    assert model.target_pass_seconds(HW, LLAMA_8B, 0, partial) < model.target_pass_seconds(HW, LLAMA_8B, 0, full)


def test_default_draft_cost() -> None:
    # a 2.5 GB drafter on 1 GPU beside a 140 GB target on 8: 8x its size ratio
    assert model.default_draft_cost("draft_model", 140e9, 2.5e9, 8, 1) == pytest.approx(2.5 / 140 * 8)
    assert model.default_draft_cost("draft_model", 140e9, 2.5e9, 8, 8) == pytest.approx(2.5 / 140)
    assert model.default_draft_cost("ngram", 140e9, None, 8, 8) == 0.0
    assert model.default_draft_cost("suffix", 140e9, 1e9, 8, 8) == 0.0
    assert model.default_draft_cost("eagle3", 140e9, None, 8, 8) == 0.05
    assert model.default_draft_cost("dflash", 140e9, None, 8, 8) == model.PARALLEL_DRAFT_COST
    assert model.default_draft_cost("deepseek_mtp", 140e9, None, 8, 8) == model.OTHER_DRAFTER_COST


def test_batch_size_schedule() -> None:
    """As vLLM's build_dynamic_sd_schedule_lookup fills its table: past the last range the last depth holds."""
    schedule = ((1, 16, 6), (17, 64, 3), (65, 1024, 0))
    assert [model.spec_tokens_for_batch(6, schedule, b) for b in (1, 16, 17, 64, 65, 2000)] == [6, 6, 3, 3, 0, 0]
    assert model.spec_tokens_for_batch(4, (), 100) == 4


def test_batch_size_schedule_carries_the_previous_depth_through_gaps() -> None:
    """vLLM's own example: [(1, 16, 3), (32, 128, 2)] maps batch sizes 17-31 to 3, and 129 on to 2."""
    schedule = ((1, 16, 3), (32, 128, 2))
    batches = (1, 16, 17, 31, 32, 128, 129, 512)
    assert [model.spec_tokens_for_batch(4, schedule, b) for b in batches] == [3, 3, 3, 3, 2, 2, 2, 2]
    assert [model.spec_tokens_for_batch(4, tuple(reversed(schedule)), b) for b in batches] == [3, 3, 3, 3, 2, 2, 2, 2]
    gaps = ((1, 2, 0), (5, 6, 7), (10, 10, 1))  # k = 5 caps the 7
    assert [model.spec_tokens_for_batch(5, gaps, b) for b in range(1, 13)] == [0, 0, 0, 0, 5, 5, 5, 5, 5, 1, 1, 1]
    assert model.spec_tokens_for_batch(5, gaps, 0) == 5  # an empty step: vLLM keeps k (it never looks 0 up)


def test_noise_has_mean_one_and_is_seeded() -> None:
    draws = [model.noise_factor(random.Random(seed), 0.2) for seed in range(20_000)]
    assert sum(draws) / len(draws) == pytest.approx(1.0, abs=0.01)
    assert min(draws) > 0
    assert model.noise_factor(random.Random(1), 0.2) == model.noise_factor(random.Random(1), 0.2)
    assert model.noise_factor(random.Random(1), 0.0) == 1.0


def test_lognormal_tokens_mean() -> None:
    rng = random.Random(5)
    draws = [model.lognormal_tokens(rng, 256) for _ in range(50_000)]
    assert sum(draws) / len(draws) == pytest.approx(256, rel=0.03)
    assert min(draws) >= 1
