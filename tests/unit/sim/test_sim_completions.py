"""The simulator's OpenAI completions endpoint: a client's request runs in the pod's engine (batch, drafts,
metrics) and streams at the times the engine emits its tokens."""

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specfleet.metrics import names
from specfleet_workshop.loadtest import LoadPlan, Target, run_load_test
from specfleet_workshop.sim import Simulator, load_scenario, model
from specfleet_workshop.sim.completions import CompletionError, count_prompt_tokens, parse_request
from specfleet_workshop.sim.engine import ClientRequest, Engine
from specfleet_workshop.sim.routes import openai_route

from simkit import BAD, GOOD, MI325X_NODE, PLAIN, SCENARIO, engine, vllm_pod


def simulated_per_token(client: ClientRequest) -> float:
    """(last token - first token) / (tokens - 1) from the engine's own emission times."""
    return (client.tokens[-1][0] - client.tokens[0][0]) / (client.generated - 1)


def closed_form_per_token(simulated: Engine, context: float) -> float:
    """The model's per-token latency of a lone request: one step's time / tokens per step (Leviathan et al.)."""
    config = simulated.config
    load = model.StepLoad(decode_requests=1, spec_tokens=config.k, prefill_tokens=0, context_tokens=round(context))
    step = config.step_seconds(load)
    return step / model.expected_tokens_per_step(config.acceptance, config.k)


# the engine: a client's request is one of its requests


def test_a_submitted_request_is_scheduled_decoded_and_counted_like_any_other() -> None:
    simulated = engine(GOOD, SCENARIO, track="stable")
    client = simulated.submit(1.0, prompt_tokens=100, max_tokens=64, ignore_eos=True)
    assert simulated.metrics.running == 1 and simulated.next_step_end is not None
    simulated.advance_to(10.0)
    metrics = simulated.metrics
    assert client.finish_reason == "length" and client.generated == 64
    assert client.tokens[0][1] == 1 and client.tokens[0][0] > 1.0  # the first token when prefill ends
    assert any(count > 1 for _, count in client.tokens)  # a good drafter: several tokens per step
    assert metrics.finished["length"] == 1 and metrics.generation_tokens == 64 and metrics.prompt_tokens == 100
    assert metrics.time_to_first_token.count == 1
    assert metrics.time_to_first_token.total == pytest.approx(client.tokens[0][0] - 1.0)
    assert metrics.inter_token_latency.count == len(client.tokens) - 1  # once per decode step
    assert metrics.time_per_output_token.total == pytest.approx(simulated_per_token(client))
    assert metrics.num_drafts == len(client.tokens) - 1  # every decode step drafted


def test_client_requests_share_the_batch_so_concurrency_slows_each_step() -> None:
    alone, crowded = engine(PLAIN, SCENARIO, track="stable"), engine(PLAIN, SCENARIO, track="stable")
    lone = alone.submit(0.0, 100, 128, ignore_eos=True)
    batch = [crowded.submit(0.0, 100, 128, ignore_eos=True) for _ in range(64)]
    assert (crowded.metrics.running, crowded.metrics.waiting) == (1, 63)  # the first one's step is in flight
    crowded.advance_to(crowded.next_step_end or 0.0)
    assert (crowded.metrics.running, crowded.metrics.waiting) == (64, 0)  # the others join at the next step
    alone.advance_to(10.0)
    crowded.advance_to(10.0)
    assert all(client.finish_reason == "length" for client in [lone, *batch])
    assert simulated_per_token(batch[0]) > simulated_per_token(lone)
    assert crowded.metrics.finished["length"] == 64


def test_without_ignore_eos_the_answer_may_stop_before_max_tokens() -> None:
    simulated = engine(PLAIN, "defaults: {load: 0, output_tokens: 20}", track="stable")
    clients = [simulated.submit(0.0, 10, 200) for _ in range(50)]
    simulated.advance_to(30.0)
    assert {client.finish_reason for client in clients} <= {"stop", "length"}
    assert any(client.finish_reason == "stop" and client.generated < 200 for client in clients)


def test_the_scenarios_error_rate_fails_client_requests_too() -> None:
    simulated = engine(PLAIN, "defaults: {load: 0, error_rate: 1}", track="stable")
    client = simulated.submit(0.0, 10, 64, ignore_eos=True)
    simulated.advance_to(10.0)
    assert client.finish_reason == "error" and simulated.metrics.finished["error"] == 1


def test_an_aborted_request_leaves_without_being_counted_at_finish() -> None:
    simulated = engine(PLAIN, SCENARIO, track="stable")
    running = simulated.submit(0.0, 10, 500, ignore_eos=True)
    simulated.advance_to(0.05)
    assert running.generated > 1
    simulated.abort(running)
    simulated.advance_to(10.0)
    assert running.finish_reason == "abort" and simulated.metrics.running == 0
    assert sum(simulated.metrics.finished.values()) == 0 and simulated.metrics.e2e_latency.count == 0
    assert simulated.metrics.time_to_first_token.count == 1  # recorded while it ran, as vLLM keeps it


@pytest.mark.parametrize("argv", [PLAIN, GOOD, BAD], ids=["no speculation", "good drafter", "bad drafter"])
def test_a_lone_requests_per_token_latency_is_the_models_closed_form(argv: list[str]) -> None:
    simulated = engine(argv, SCENARIO, track="stable")
    client = simulated.submit(0.0, prompt_tokens=20, max_tokens=2000, ignore_eos=True)
    simulated.advance_to(60.0)
    assert client.generated == 2000
    assert simulated_per_token(client) == pytest.approx(closed_form_per_token(simulated, 20 + 1000), rel=0.06)


# the protocol


@pytest.mark.parametrize(
    ("prompt", "tokens"), [("Hello, world!", 4), ("one", 1), ([1, 2, 3], 3), (["two words"], 2), ("", 1)]
)
def test_prompts_are_counted_in_words_and_marks_or_token_ids(prompt: Any, tokens: int) -> None:
    assert count_prompt_tokens(prompt) == tokens


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b"{}",
        b'{"prompt": "a", "max_tokens": 0}',
        b'{"prompt": ["a", "b"]}',
        b'{"prompt": "a", "n": 2}',
    ],
)
def test_bad_requests_are_refused_with_400(body: bytes) -> None:
    with pytest.raises(CompletionError) as refused:
        parse_request(body)
    assert refused.value.status == 400 and refused.value.body()["error"]["code"] == 400


def test_routes_address_one_pod_or_a_track() -> None:
    pod = openai_route("/pods/team/p1/v1/completions")
    track = openai_route("/tracks/team/llama/canary/v1/models")
    assert pod is not None and (pod.namespace, pod.pod, pod.endpoint) == ("team", "p1", "completions")
    assert track is not None and (track.sdep, track.track, track.endpoint) == ("llama", "canary", "models")
    assert openai_route("/pods/team/p1/metrics") is None and openai_route("/tracks/team/llama/v1/completions") is None


# the server


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(load_scenario(SCENARIO), listen=("127.0.0.1", 0), seed=2) as simulator:
        yield simulator


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def events(text: str) -> list[Any]:
    return [
        line.removeprefix("data: ") if line == "data: [DONE]" else json.loads(line.removeprefix("data: "))
        for line in text.split("\n\n")
        if line
    ]


def scrape(sim: Simulator, pod: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{sim.url}/pods/team/{pod}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in {"engine", "model_name"}}
            keys = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            samples[f"{sample.name}{{{keys}}}" if keys else sample.name] = sample.value
    return samples


def test_a_streamed_completion_has_openais_chunks_usage_and_done_and_shows_in_the_pods_metrics(
    sim: Simulator,
) -> None:
    sim.upsert_pod(vllm_pod("good-0", GOOD), MI325X_NODE)
    body = {"model": "llama", "prompt": "Hi there", "max_tokens": 40, "stream": True, "ignore_eos": True}
    status, text = post(
        f"{sim.url}/pods/team/good-0/v1/completions", {**body, "stream_options": {"include_usage": True}}
    )
    assert status == 200
    *chunks, usage, done = events(text)
    assert done == "[DONE]" and usage["choices"] == [] and usage["usage"]["completion_tokens"] == 40
    assert usage["usage"]["prompt_tokens"] == 2
    for chunk in chunks:
        assert {chunk["object"], chunk["model"]} == {"text_completion", "llama"} and chunk["id"].startswith("cmpl-")
        assert chunk["choices"][0]["index"] == 0 and chunk["choices"][0]["logprobs"] is None
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    assert len(chunks) < 40  # a good drafter streams several tokens per chunk
    metrics = scrape(sim, "good-0")
    assert metrics["vllm:request_success_total{finished_reason=length}"] == 1
    assert metrics["vllm:generation_tokens_total"] == 40
    assert metrics[names.NUM_DRAFTS] == len(chunks) - 1


def test_a_plain_completion_answers_the_whole_text_at_once(sim: Simulator) -> None:
    sim.upsert_pod(vllm_pod("plain-0", PLAIN), MI325X_NODE)
    status, text = post(
        f"{sim.url}/pods/team/plain-0/v1/completions", {"prompt": "Hi", "max_tokens": 5, "ignore_eos": True}
    )
    answer = json.loads(text)
    assert status == 200 and answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}
    assert len(answer["choices"][0]["text"].split()) == 5


def test_a_track_route_serves_its_ready_pods_in_turn_and_lists_the_model(sim: Simulator) -> None:
    sim.upsert_pod(vllm_pod("stable-0", PLAIN), MI325X_NODE)
    sim.upsert_pod(vllm_pod("stable-1", PLAIN), MI325X_NODE)
    sim.upsert_pod(vllm_pod("stable-2", PLAIN, ready=False), MI325X_NODE)
    sim.upsert_pod(vllm_pod("canary-0", GOOD, track="canary"), MI325X_NODE)
    for _ in range(4):
        assert post(f"{sim.url}/tracks/team/llama/stable/v1/completions", {"prompt": "a", "max_tokens": 2})[0] == 200
    served = {pod: scrape(sim, pod) for pod in ("stable-0", "stable-1", "canary-0")}
    finished = {pod: metrics["vllm:request_success_total{finished_reason=length}"] for pod, metrics in served.items()}
    assert finished == {"stable-0": 2, "stable-1": 2, "canary-0": 0}
    with urllib.request.urlopen(f"{sim.url}/tracks/team/llama/canary/v1/models", timeout=10) as response:
        assert json.loads(response.read())["data"][0]["id"] == "llama"


def test_errors_are_openais_documents_with_vllms_statuses(sim: Simulator) -> None:
    sim.upsert_pod(vllm_pod("p", PLAIN), MI325X_NODE)
    sim.upsert_pod(vllm_pod("loading", PLAIN, ready=False), MI325X_NODE)
    cases = {
        "/pods/team/nope/v1/completions": ({"prompt": "a"}, 404),
        "/pods/team/loading/v1/completions": ({"prompt": "a"}, 503),
        "/tracks/team/llama/canary/v1/completions": ({"prompt": "a"}, 404),
        "/pods/team/p/v1/completions": ({"prompt": "a", "model": "gpt-5"}, 404),
    }
    for path, (body, expected) in cases.items():
        status, text = post(sim.url + path, body)
        assert (path, status) == (path, expected)
        assert json.loads(text)["error"]["code"] == expected


def test_a_request_that_fails_in_the_engine_ends_its_stream_with_an_error_event(sim: Simulator) -> None:
    sim.set_scenario(load_scenario("defaults: {load: 0, error_rate: 1}"))
    sim.upsert_pod(vllm_pod("p", PLAIN), MI325X_NODE)
    status, text = post(f"{sim.url}/pods/team/p/v1/completions", {"prompt": "a", "max_tokens": 30, "stream": True})
    assert status == 200
    *_, error, done = events(text)
    assert error["error"]["code"] == 500 and done == "[DONE]"
    assert post(f"{sim.url}/pods/team/p/v1/completions", {"prompt": "a", "max_tokens": 30})[0] == 500


def test_completions_beyond_the_bound_are_refused_while_other_routes_answer() -> None:
    with Simulator(load_scenario(SCENARIO), listen=("127.0.0.1", 0), max_completions=1) as sim:
        sim.upsert_pod(vllm_pod("p", PLAIN), MI325X_NODE)
        streaming = urllib.request.urlopen(
            urllib.request.Request(
                f"{sim.url}/pods/team/p/v1/completions",
                data=json.dumps({"prompt": "a", "max_tokens": 100_000, "stream": True, "ignore_eos": True}).encode(),
            ),
            timeout=30,
        )
        try:
            assert streaming.readline().startswith(b"data: ")  # the first request holds the only slot
            status, text = post(f"{sim.url}/pods/team/p/v1/completions", {"prompt": "a"})
            assert status == 503 and "at most 1" in json.loads(text)["error"]["message"]
            with urllib.request.urlopen(f"{sim.url}/healthz", timeout=5) as health:
                assert health.status == 200
        finally:
            streaming.close()
        # the server notices the closed connection at its next chunk, aborts the request and frees the slot
        deadline = time.monotonic() + 20
        while post(f"{sim.url}/pods/team/p/v1/completions", {"prompt": "a", "max_tokens": 2})[0] != 200:
            assert time.monotonic() < deadline, "the slot was never freed"
            time.sleep(0.05)


# the load test against simulated pods


def test_the_load_test_sees_a_good_drafter_stream_faster_and_a_bad_one_slower_than_no_speculation(
    sim: Simulator,
) -> None:
    pods = {"none": ("plain-0", PLAIN), "good": ("good-0", GOOD), "bad": ("bad-0", BAD)}
    for name, argv in pods.values():
        sim.upsert_pod(vllm_pod(name, argv), MI325X_NODE)
    targets = [Target(label, f"{sim.url}/pods/team/{pod}") for label, (pod, _) in pods.items()]
    results = run_load_test(targets, LoadPlan(levels=(1,), requests=3, max_tokens=96, prompt="Hello"))
    per_token = {result.target: result.per_token.p50 for result in results}
    assert all(result.errors == 0 and result.requests == 3 for result in results)
    # Only the order: what the client measures is paced by wall time, which a busy machine delays by
    # milliseconds, the size of a step. The timing itself is checked on the engine's own token times above.
    assert per_token["good"] < per_token["none"] < per_token["bad"], per_token
