"""The /metrics text: vLLM's names, types, labels and buckets, read back with Prometheus' own text parser."""

import json
import random

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from specfleet.hardware import MI355X
from specfleet.metrics import names
from specfleet_workshop.fleetpods.pods import parse_vllm_args
from specfleet_workshop.sim.engine import INTER_TOKEN_LATENCY_BUCKETS, Engine, configure
from specfleet_workshop.sim.exposition import exposition
from specfleet_workshop.sim.scenario import load_scenario, resolve

SPEC = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
SPEC_DECODE = (names.NUM_DRAFTS, names.DRAFT_TOKENS, names.ACCEPTED_TOKENS, names.ACCEPTED_PER_POSITION)


def scrape(argv: list[str], seconds: float = 20.0, scenario: str = "") -> dict[str, tuple[str, list[Sample]]]:
    """Family name -> (type, samples), as Prometheus would ingest them."""
    args = parse_vllm_args(argv)
    config = configure(args, resolve(load_scenario(scenario), args.identity("stable")), MI355X)
    engine = Engine(config, args.histogram_buckets, random.Random(2), 0)
    engine.advance_to(seconds)
    speculative = args.speculative is not None
    text = exposition(engine.metrics, args.served_model_name, speculative, created=1700000000.0).decode()
    return {family.name: (family.type, family.samples) for family in text_string_to_metric_families(text)}


def family(scraped: dict[str, tuple[str, list[Sample]]], name: str) -> tuple[str, list[Sample]]:
    """A counter's family is named without `_total` by the parser."""
    return scraped[name.removesuffix("_total")]


def test_names_types_and_labels() -> None:
    scraped = scrape(["Qwen/Qwen3-Next-80B-A3B-Instruct", "--served-model-name", "qwen", "--speculative-config", SPEC])
    expected_types = {
        names.NUM_DRAFTS: "counter",
        names.DRAFT_TOKENS: "counter",
        names.ACCEPTED_TOKENS: "counter",
        names.ACCEPTED_PER_POSITION: "counter",
        names.PROMPT_TOKENS: "counter",
        names.GENERATION_TOKENS: "counter",
        names.REQUEST_SUCCESS: "counter",
        names.INTER_TOKEN_LATENCY: "histogram",
        names.TIME_TO_FIRST_TOKEN: "histogram",
        names.E2E_LATENCY: "histogram",
        names.REQUESTS_RUNNING: "gauge",
        names.REQUESTS_WAITING: "gauge",
        names.KV_CACHE_USAGE: "gauge",
    }
    for name, kind in expected_types.items():
        assert family(scraped, name)[0] == kind, name
    for _, samples in scraped.values():
        for sample in samples:
            assert sample.labels["model_name"] == "qwen" and sample.labels["engine"] == "0"
    assert [s.name for s in family(scraped, names.ACCEPTED_TOKENS)[1]] == [names.ACCEPTED_TOKENS]
    created_type, created = scraped["vllm:spec_decode_num_accepted_tokens_created"]  # as prometheus_client writes it
    assert created_type == "gauge" and created[0].value == 1700000000.0


def test_per_position_and_finish_reason_series_exist_from_the_start() -> None:
    scraped = scrape(["m", "--speculative-config", SPEC], seconds=0.0)
    per_position = [s for s in family(scraped, names.ACCEPTED_PER_POSITION)[1] if s.name.endswith("_total")]
    assert [s.labels["position"] for s in per_position] == ["0", "1", "2"]
    assert all(s.value == 0 for s in per_position)
    reasons = [
        s.labels["finished_reason"] for s in family(scraped, names.REQUEST_SUCCESS)[1] if s.name.endswith("_total")
    ]
    assert reasons == ["stop", "length", "abort", "error", "repetition"]


def test_histogram_buckets_are_vllms() -> None:
    scraped = scrape(["m", "--speculative-config", SPEC])
    samples = scraped[names.INTER_TOKEN_LATENCY][1]
    buckets = [s for s in samples if s.name.endswith("_bucket")]
    assert [float(s.labels["le"]) for s in buckets] == [*INTER_TOKEN_LATENCY_BUCKETS, float("inf")]
    assert [s.labels["le"] for s in buckets][:3] == ["0.01", "0.025", "0.05"]
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)
    count = next(s.value for s in samples if s.name.endswith("_count"))
    assert buckets[-1].value == count > 0
    assert len(scraped[names.TIME_TO_FIRST_TOKEN][1]) == 22 + 1 + 2  # buckets, +Inf, count, sum
    assert len(scraped[names.E2E_LATENCY][1]) == 21 + 1 + 2


def test_custom_buckets_reach_the_exposition() -> None:
    """The inter_token_latency family re-buckets request_time_per_output_token too, as in vLLM."""
    argv = ["m", "--speculative-config", SPEC, "--custom-histogram-buckets", '{"inter_token_latency": [0.005, 0.01]}']
    scraped = scrape(argv)
    for name in (names.INTER_TOKEN_LATENCY, names.TIME_PER_OUTPUT_TOKEN):
        buckets = [s.labels["le"] for s in scraped[name][1] if s.name.endswith("_bucket")]
        assert buckets == ["0.005", "0.01", "+Inf"], name


def test_time_per_output_token_is_per_request_and_inter_token_latency_per_step() -> None:
    scraped = scrape(["m", "--speculative-config", SPEC], seconds=30.0)

    def count(name: str) -> float:
        return next(s.value for s in scraped[name][1] if s.name.endswith("_count"))

    finished = sum(s.value for s in family(scraped, names.REQUEST_SUCCESS)[1] if s.name.endswith("_total"))
    drafts = family(scraped, names.NUM_DRAFTS)[1][0].value
    assert scraped[names.TIME_PER_OUTPUT_TOKEN][0] == "histogram"
    assert count(names.TIME_PER_OUTPUT_TOKEN) == finished > 0
    assert count(names.INTER_TOKEN_LATENCY) == drafts > 10 * finished  # every step of every request drafted


def test_client_aborts_leave_the_abort_series_at_zero() -> None:
    scraped = scrape(["m", "--speculative-config", SPEC], seconds=30.0, scenario="defaults: {abort_rate: 0.5}")
    finished = {
        s.labels["finished_reason"]: s.value
        for s in family(scraped, names.REQUEST_SUCCESS)[1]
        if s.name.endswith("_total")
    }
    assert finished["abort"] == 0 and finished["stop"] > 0


def test_no_spec_decode_series_without_a_speculative_config() -> None:
    scraped = scrape(["m"])
    assert not [name for name in SPEC_DECODE if name.removesuffix("_total") in scraped]
    assert names.INTER_TOKEN_LATENCY in scraped
