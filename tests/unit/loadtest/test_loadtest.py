"""`specfleet loadtest`: the statistics (pure, table-driven) and the command end to end against an in-process
simulator (its OpenAI completions endpoint, real clock)."""

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specfleet.cli.app import app
from specfleet_workshop.cli.loadtest import parse_levels, parse_targets
from specfleet_workshop.loadtest import LoadPlan, RequestSample, Target
from specfleet_workshop.loadtest.driving import event_error, excerpt, parse_event, request_body
from specfleet_workshop.loadtest.measurements import per_token_latency, percentile, summarize
from specfleet_workshop.sim import Simulator, load_scenario

from simkit import GOOD, MI325X_NODE, PLAIN, SCENARIO, vllm_pod

# statistics


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([3.0], 95, 3.0),
        ([1.0, 2.0], 50, 1.5),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # unsorted input
        ([1.0, 2.0, 3.0, 4.0, 5.0], 95, 4.8),  # numpy.percentile(..., 95) == 4.8
        ([float(i) for i in range(1, 101)], 95, 95.05),
        ([1.0, 2.0, 3.0], 0, 1.0),
        ([1.0, 2.0, 3.0], 100, 3.0),
    ],
)
def test_percentiles_interpolate_linearly_between_order_statistics(
    values: list[float], q: float, expected: float | None
) -> None:
    assert percentile(values, q) == (None if expected is None else pytest.approx(expected))


def test_a_percentile_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="101"):
        percentile([1.0], 101)


@pytest.mark.parametrize(
    ("first", "last", "tokens", "expected"),
    [
        (0.1, 0.5, 5, 0.1),  # 4 tokens after the first in 0.4 s
        (0.1, 0.1, 1, None),  # one token: no pace to speak of
        (None, None, 0, None),
        (0.2, 0.2, 9, 0.0),  # everything in one chunk (a non-streaming proxy)
    ],
)
def test_per_token_latency_is_the_time_after_the_first_token_over_the_tokens_after_it(
    first: float | None, last: float | None, tokens: int, expected: float | None
) -> None:
    assert per_token_latency(first, last, tokens) == (None if expected is None else pytest.approx(expected))


def test_a_level_summarizes_answered_requests_and_counts_the_rest_as_errors() -> None:
    samples = [
        RequestSample(sent=0.0, ended=1.0, first_token=0.1, last_token=1.0, output_tokens=10),
        RequestSample(sent=1.0, ended=1.5, first_token=1.2, last_token=1.5, output_tokens=4),
        RequestSample(sent=0.0, ended=0.1, error="HTTP 500: boom"),
        RequestSample(sent=0.0, ended=0.1, error="HTTP 500: boom"),
    ]
    result = summarize("canary", 2, samples, elapsed=2.0)
    assert (result.requests, result.errors, result.output_tokens) == (2, 2, 14)
    assert result.tokens_per_second == 7.0 and result.requests_per_second == 1.0 and result.error_rate == 0.5
    assert result.e2e.p50 == pytest.approx(0.75) and result.ttft.p50 == pytest.approx(0.15)
    assert result.per_token.p50 == pytest.approx((0.1 + 0.1) / 2)
    assert result.error_examples == ("HTTP 500: boom",)


def test_a_level_without_answers_has_no_latencies_and_no_rates() -> None:
    result = summarize("stable", 1, [RequestSample(sent=0.0, ended=0.1, error="refused")], elapsed=0.0)
    assert (result.e2e.p50, result.per_token.p95, result.tokens_per_second) == (None, None, 0.0)


# the protocol, as a client reads it


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'data: {"choices": []}\n', {"choices": []}),
        (b'data:{"a": 1}\r\n', {"a": 1}),
        (b"data: [DONE]\n", "[DONE]"),
        (b": keep-alive\n", None),
        (b"\n", None),
        (b"data: not json\n", None),
        (b"event: message\n", None),
    ],
)
def test_server_sent_event_lines_are_read_as_data_done_or_nothing(line: bytes, expected: object) -> None:
    assert parse_event(line) == expected


def test_error_events_are_recognised_in_both_of_vllms_shapes() -> None:
    assert event_error({"error": {"message": "boom", "code": 500}}) == "boom"
    assert event_error({"object": "error", "message": "old shape"}) == "old shape"
    assert event_error({"choices": [{"text": "x"}]}) is None


def test_the_api_root_gets_v1_unless_it_has_it_and_the_body_asks_for_usage() -> None:
    assert Target("a", "http://h:8000/").api == "http://h:8000/v1"
    assert Target("a", "http://h:8000/v1").api == "http://h:8000/v1"
    body = request_body(LoadPlan(max_tokens=7), "m")
    assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 7
    assert excerpt("a\n  b" + "c" * 300).startswith("a b") and len(excerpt("x" * 300)) == 200


@pytest.mark.parametrize("kwargs", [{"levels": ()}, {"levels": (0, 4)}, {"requests": 0}, {"max_tokens": 0}])
def test_a_plan_that_cannot_run_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LoadPlan(**kwargs)  # type: ignore[arg-type]


def test_levels_and_targets_are_read_from_the_options() -> None:
    assert parse_levels("1, 4,16") == (1, 4, 16)
    for bad in ("", "a,b", "0,4"):
        with pytest.raises(typer.BadParameter):
            parse_levels(bad)
    assert parse_targets(["http://a"], ["canary=http://b/v1"]) == [("target", "http://a"), ("canary", "http://b/v1")]
    for urls, targets in (([], []), ([], ["canary"]), ([], ["x=ftp://b"]), ([], ["a=http://x", "a=http://y"])):
        with pytest.raises(typer.BadParameter):
            parse_targets(urls, targets)


# the command against the simulator


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(load_scenario(SCENARIO), listen=("127.0.0.1", 0), seed=4) as simulator:
        simulator.upsert_pod(vllm_pod("llama-stable-0", PLAIN, track="stable"), MI325X_NODE)
        simulator.upsert_pod(vllm_pod("llama-canary-0", GOOD, track="canary"), MI325X_NODE)
        yield simulator


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["loadtest", *args])
    return result.exit_code, result.stdout, result.stderr


def tracks(sim: Simulator) -> list[str]:
    return [
        "--target",
        f"stable={sim.url}/tracks/team/llama/stable",
        "--target",
        f"canary={sim.url}/tracks/team/llama/canary",
    ]


def test_the_command_reports_every_level_of_every_target_as_json(sim: Simulator) -> None:
    code, out, _ = invoke(*tracks(sim), "--levels", "1,2", "--requests", "2", "--max-tokens", "24", "--json")
    assert code == 0
    levels = json.loads(out)["levels"]
    assert [(level["concurrency"], level["target"]) for level in levels] == [
        (1, "stable"), (1, "canary"), (2, "stable"), (2, "canary"),
    ]  # fmt: skip
    for level in levels:
        assert level["requests"] == 2 and level["errors"] == 0 and level["output_tokens"] == 48
        assert 0 < level["ttft_seconds"]["p50"] <= level["e2e_seconds"]["p50"]
        assert level["per_token_seconds"]["p50"] <= level["per_token_seconds"]["p95"]
        assert math.isclose(level["tokens_per_second"], 48 / level["elapsed_seconds"])
    stable, canary = levels[0], levels[1]
    assert canary["per_token_seconds"]["p50"] < stable["per_token_seconds"]["p50"]  # alpha 0.8, k = 4


def test_the_command_prints_a_table_and_writes_the_plot(sim: Simulator, tmp_path: Path) -> None:
    plot = tmp_path / "loadtest.png"
    code, out, err = invoke(
        *tracks(sim), "--levels", "1,2", "--requests", "1", "--max-tokens", "8", "--plot", str(plot)
    )
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[:4] == ["CONC", "TARGET", "OK", "ERR"] and "TOKENS/S" in header
    assert sum(line.split()[1] in {"stable", "canary"} for line in out.splitlines()[1:]) == 4
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", plot.read_bytes()[16:24])
    assert width > height > 0


def test_an_unreachable_target_is_one_clear_line_and_exit_1(sim: Simulator) -> None:
    sim.stop()
    code, _, err = invoke("--url", sim.url, "--requests", "1")
    assert code == 1 and "cannot reach" in err and f"{sim.url}/v1/models" in err


def test_http_errors_are_counted_with_an_excerpt_of_the_body(sim: Simulator) -> None:
    url = f"{sim.url}/pods/team/llama-stable-0"
    code, out, err = invoke("--url", url, "--model", "gpt-5", "--levels", "1", "--requests", "2")
    assert code == 1
    assert "HTTP 404" in err and "The model `gpt-5` does not exist" in err and "no request was answered" in err
    assert out.splitlines()[1].split()[2:4] == ["0", "2"]  # OK 0, ERR 2


def test_a_target_that_lists_no_model_needs_model() -> None:
    with Simulator(load_scenario(SCENARIO), listen=("127.0.0.1", 0)) as sim:
        code, _, err = invoke("--url", f"{sim.url}/pods/team/nope", "--requests", "1")
    assert code == 1 and "HTTP 404" in err and "pass --model" in err


def test_bad_options_exit_2() -> None:
    assert invoke("--levels", "1,x", "--url", "http://127.0.0.1:1")[0] == 2
    assert invoke("--levels", "1")[0] == 2  # no target
