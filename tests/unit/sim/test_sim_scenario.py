"""Scenario documents: defaults, glob matching on target and drafter, first match wins, errors naming fields."""

import pytest

from specfleet_workshop.fleetpods.pods import PodIdentity
from specfleet_workshop.sim.scenario import ScenarioError, dump_scenario, load_scenario, resolve, scrape_fault

from repokit import EXAMPLES

EXAMPLE = EXAMPLES / "sim" / "scenario.yaml"

EAGLE_8B = PodIdentity(
    model="meta-llama/Llama-3.1-8B-Instruct",
    served_model_name="llama-3.1-8b",
    drafter_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    method="eagle3",
    track="canary",
)
NGRAM_CODER = PodIdentity("Qwen/Qwen2.5-Coder-32B-Instruct", "Qwen/Qwen2.5-Coder-32B-Instruct", None, "ngram", "stable")
PLAIN_70B = PodIdentity("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b", None, None, "stable")


def test_empty_document_gives_the_defaults() -> None:
    params = resolve(load_scenario(""), EAGLE_8B)
    assert params.matched is None
    assert (params.acceptance, params.acceptance_spread, params.decay, params.load) == (0.7, 0.1, 1.0, 4.0)
    assert (params.draft_pass_overhead_ms, params.suffix_draft_tokens) == (0.2, 6.0)


def test_pair_overrides_only_what_it_sets() -> None:
    scenario = load_scenario(
        """
        defaults: {acceptance: 0.6, load: 2, noise: 0.1}
        pairs:
          - {target: "meta-llama/*", drafter: "yuhuili/EAGLE3-*", acceptance: 0.85, draft_cost: 0.2}
        """
    )
    params = resolve(scenario, EAGLE_8B)
    assert (params.matched, params.acceptance, params.draft_cost, params.load, params.noise) == (0, 0.85, 0.2, 2, 0.1)


def test_first_match_wins() -> None:
    scenario = load_scenario(
        """
        pairs:
          - {target: "*8B*", acceptance: 0.1}
          - {target: "*", acceptance: 0.9}
        """
    )
    assert resolve(scenario, EAGLE_8B).acceptance == 0.1
    assert resolve(scenario, PLAIN_70B).acceptance == 0.9


@pytest.mark.parametrize(
    ("pair", "pod", "expected"),
    [
        ("{target: llama-3.1-8b}", EAGLE_8B, True),  # served model name
        ("{target: META-LLAMA/llama-3.1-8B-instruct}", EAGLE_8B, True),  # case-insensitive
        ("{target: '*70B*'}", EAGLE_8B, False),
        ("{target: '*', drafter: eagle3}", EAGLE_8B, True),  # by method
        ("{target: '*', drafter: 'yuhuili/*'}", EAGLE_8B, True),  # by draft model
        ("{target: '*', drafter: ngram}", NGRAM_CODER, True),  # a drafter without a model
        ("{target: '*', drafter: ngram}", EAGLE_8B, False),
        ("{target: '*', drafter: none}", PLAIN_70B, True),  # no speculative config
        ("{target: '*', drafter: none}", EAGLE_8B, False),
        ("{target: '*'}", PLAIN_70B, True),  # drafter defaults to '*'
        ("{target: '*', track: canary}", EAGLE_8B, True),
        ("{target: '*', track: stable}", EAGLE_8B, False),
    ],
)
def test_matching(pair: str, pod: PodIdentity, expected: bool) -> None:
    scenario = load_scenario(f"pairs: [{pair}]")
    assert (resolve(scenario, pod).matched == 0) is expected


def test_acceptance_rate_is_refused_with_what_to_state_instead() -> None:
    """Scenarios state the drafter's alpha, never the accepted/drafted number Prometheus should show."""
    for text in ("defaults: {acceptance_rate: 0.55}", "pairs: [{target: '*', acceptance_rate: 0.4}]"):
        with pytest.raises(ScenarioError, match="acceptance_rate is not a knob: state the drafter's per-token"):
            load_scenario(text)


def test_a_spread_too_wide_for_the_acceptance_is_refused_naming_the_field() -> None:
    """A Beta distribution with mean m has a standard deviation below sqrt(m (1 - m))."""
    assert resolve(load_scenario("defaults: {acceptance: 0.9, acceptance_spread: 0.29}"), EAGLE_8B)
    with pytest.raises(ScenarioError, match=r"^defaults.acceptance_spread: 0.3 is too wide for acceptance 0.9"):
        load_scenario("defaults: {acceptance: 0.9, acceptance_spread: 0.3}")
    # the default spread (0.1) with a pair's acceptance of 0.99: sqrt(0.99 x 0.01) = 0.0995
    with pytest.raises(ScenarioError, match=r"pairs\[1\].acceptance_spread: 0.1 is too wide .* < 0.0995"):
        load_scenario("pairs: [{target: a, acceptance: 0.9}, {target: b, acceptance: 0.99}]")
    perfect = load_scenario("pairs: [{target: '*', acceptance: 1.0, acceptance_spread: 0}]")
    assert resolve(perfect, EAGLE_8B).acceptance_spread == 0.0
    with pytest.raises(ScenarioError, match=r"pairs\[0\].acceptance_spread: 0.1 is too wide for acceptance 0.0"):
        load_scenario("defaults: {acceptance_spread: 0.1}\npairs: [{target: '*', acceptance: 0.0}]")


def test_new_knobs_resolve_per_pair() -> None:
    scenario = load_scenario(
        """
        pairs:
          - {target: "*", drafter: suffix, suffix_draft_tokens: 3, acceptance_spread: 0.05}
          - {target: "*", draft_pass_overhead_ms: 0.5}
        """
    )
    suffix = PodIdentity("m", "m", None, "suffix", None)
    params = resolve(scenario, suffix)
    assert (params.suffix_draft_tokens, params.acceptance_spread, params.draft_pass_overhead_ms) == (3.0, 0.05, 0.2)
    assert resolve(scenario, EAGLE_8B).draft_pass_overhead_ms == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pairs: [{target: x, acceptence: 0.5}]", "pairs[0].acceptence: unknown field"),
        ("pairs: [{drafter: x}]", "pairs[0].target: Field required"),
        ("pairs: [{target: x, acceptance: 1.5}]", "pairs[0].acceptance: Input should be less than or equal to 1"),
        ("pairs: [{target: x}, {target: y, decay: 0}]", "pairs[1].decay: Input should be greater than 0"),
        ("pairs: [{target: x, load: -1}]", "pairs[0].load: Input should be greater than or equal to 0"),
        ("pairs: [{target: x, track: blue}]", "pairs[0].track: String should match pattern"),
        ("pairs: [{target: x, acceptance: 0.5, acceptance_rate: 0.5}]", "pairs[0]: acceptance_rate is not a knob"),
        ("pairs: [{target: x, acceptance_spread: 0.5}]", "pairs[0].acceptance_spread: Input should be less than 0.5"),
        ("pairs: [{target: x, suffix_draft_tokens: 0.5}]", "pairs[0].suffix_draft_tokens: Input should be greater"),
        ("defaults: {draft_pass_overhead_ms: -1}", "defaults.draft_pass_overhead_ms: Input should be greater than"),
        ("defaults: {error_rate: 0.6, abort_rate: 0.6}", "defaults: error_rate + abort_rate is more than 1"),
        ("defaults: {error_rate: 0.6}\npairs: [{target: x, abort_rate: 0.5}]", "pairs[0]: error_rate + abort_rate"),
        ("defaults: {output_tokens: 0}", "defaults.output_tokens: Input should be greater than or equal to 1"),
        ("pairs: {target: x}", "pairs: Input should be a valid list"),
        ("colour: red", "colour: unknown field"),
        ("scrape_faults: [{pod: 'a/*', answer: timeout}]", "scrape_faults[0].answer: Input should be 'error' or"),
        ("scrape_faults: [{answer: error}]", "scrape_faults[0].pod: Field required"),
        ("- a list", "document: Input should be a valid dictionary"),
        ("pairs: [", "document: not valid YAML"),
    ],
)
def test_validation_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario(text)
    assert message in str(error.value)


def test_several_errors_are_reported_together() -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario("pairs: [{target: x, acceptance: 2, decay: 3}]")
    assert "pairs[0].acceptance" in str(error.value) and "pairs[0].decay" in str(error.value)


def test_the_first_scrape_fault_matching_namespace_and_pod_wins() -> None:
    scenario = load_scenario(
        "scrape_faults: [{pod: 'shop/web-canary-*', answer: error}, {pod: '*/web-*', answer: garbage}]"
    )
    assert scrape_fault(scenario, "shop", "web-canary-7d9-x") == "error"
    assert scrape_fault(scenario, "shop", "web-stable-5c4-y") == "garbage"
    assert scrape_fault(scenario, "shop", "api-stable-5c4-y") is None
    assert scrape_fault(load_scenario("{}"), "shop", "web-canary-7d9-x") is None
    assert resolve(scenario, EAGLE_8B) == resolve(load_scenario("{}"), EAGLE_8B)  # the engines are untouched


def test_dump_round_trips() -> None:
    scenario = load_scenario("pairs: [{target: '*', drafter: ngram, acceptance: 0.5, track: canary}]")
    assert load_scenario(dump_scenario(scenario)) == scenario
    assert "null" not in dump_scenario(scenario)


def test_json_is_accepted() -> None:
    assert resolve(load_scenario('{"pairs": [{"target": "*", "acceptance": 0.2}]}'), EAGLE_8B).acceptance == 0.2


def test_the_example_scenario_is_valid_and_matches_the_examples() -> None:
    scenario = load_scenario(EXAMPLE.read_text())
    assert resolve(scenario, EAGLE_8B).matched is not None
    assert resolve(scenario, NGRAM_CODER).matched is not None
