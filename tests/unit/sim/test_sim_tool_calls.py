"""The scenario knob `tool_calls_parsed`: what a user's application has (this drafter parses 80% of tool calls,
that one 99%), exported by each pod as two counters of its own, never a number for Prometheus to show."""

import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specfleet.hardware import MI325X
from specfleet.metrics import names
from specfleet_workshop.fleetpods.pods import parse_vllm_args
from specfleet_workshop.sim import ScenarioError, load_scenario
from specfleet_workshop.sim.engine import Engine, configure
from specfleet_workshop.sim.exposition import TOOL_CALLS, TOOL_CALLS_PARSED, exposition
from specfleet_workshop.sim.scenario import resolve

EAGLE = ["meta-llama/Llama-3.1-8B-Instruct", "--speculative-config"]
GOOD = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4}'
SLOPPY = '{"method": "eagle3", "model": "acme/eagle3-sloppy", "num_speculative_tokens": 4}'
SCENARIO = """
defaults: {load: 8, tool_calls_parsed: 0.99}
pairs:
  - {target: "*", drafter: "acme/*", tool_calls_parsed: 0.8}
"""


def counters(argv: list[str], scenario: str, seconds: float = 300.0) -> dict[str, float]:
    """Each counter's value, summed over its labels, after `seconds` of the scenario's load."""
    args = parse_vllm_args(argv)
    config = configure(args, resolve(load_scenario(scenario), args.identity("canary")), MI325X)
    engine = Engine(config, args.histogram_buckets, random.Random(5), 0)
    engine.advance_to(seconds)
    text = exposition(engine.metrics, args.served_model_name, True, created=1.0).decode()
    summed: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.type == "counter" and sample.name.endswith("_total"):
                summed[sample.name] = summed.get(sample.name, 0.0) + sample.value
    return summed


def test_each_drafter_parses_its_share_of_one_tool_call_per_finished_request() -> None:
    for drafter, share in ((GOOD, 0.99), (SLOPPY, 0.8)):
        found = counters([*EAGLE, drafter], SCENARIO)
        finished = found[TOOL_CALLS]
        assert finished > 1000
        assert found[TOOL_CALLS_PARSED] / finished == pytest.approx(share, abs=0.03)
        assert finished == found[names.REQUEST_SUCCESS]  # one tool call per request vLLM counts as finished


def test_without_the_knob_no_tool_call_counter_is_exported() -> None:
    found = counters([*EAGLE, GOOD], "defaults: {load: 8}")
    assert TOOL_CALLS not in found and TOOL_CALLS_PARSED not in found


def test_the_knob_is_a_share() -> None:
    with pytest.raises(ScenarioError, match="tool_calls_parsed"):
        load_scenario("defaults: {tool_calls_parsed: 1.5}")
