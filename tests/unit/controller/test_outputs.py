"""Output equivalence's shell: prompts in turn to one Ready pod of each track, token ids compared, counts kept in
status (never a prompt), the operator's requests bounded and marked."""

import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from specfleet.api.status import Analysis, OutputPairs, SpeculativeDeploymentStatus, Verdict
from specfleet.controller import outputs
from specfleet.controller.kube import ConfigMapError
from specfleet.controller.outputs import (
    BUILTIN_PROMPTS,
    PROBE_HEADER,
    PROBE_USER,
    Round,
    collect_pairs,
    compare_round,
    parse_prompts,
    pod_url,
    post_json,
    ready_pod,
    token_ids,
)
from specfleet_workshop.sim.answers import answer_token_ids

from speckit import sdep

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SECRET = "the customer's private prompt"
SDEP = sdep({"spec": {"rollout": {"guardrails": {"outputEquivalence": {"enabled": True, "pairsPerAnalysis": 5}}}}})
STATUS = SpeculativeDeploymentStatus(canary_revision="c1", stable_revision="s1")


def pod(name: str, track: str, revision: str, *, ready: bool = True, ip: str | None = "10.0.0.7") -> dict[str, Any]:
    labels = {"specfleet.io/name": "llama-eagle3", "specfleet.io/track": track, "specfleet.io/revision": revision}
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": {"name": name, "namespace": "default", "labels": labels}, "status": status}


PODS = [pod("llama-eagle3-canary-b", "canary", "c1"), pod("llama-eagle3-canary-a", "canary", "c1", ip="10.0.0.9")]
PODS += [pod("llama-eagle3-stable-a", "stable", "s1", ip="10.0.0.3"), pod("old", "canary", "c0")]


class Engines:
    """Both tracks' answers, as the simulator gives them: a lossy canary diverges on a share of prompts."""

    def __init__(self, canary_divergence: float = 0.0, failing: str | None = None) -> None:
        self.divergence, self.failing = canary_divergence, failing
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((url, body))
        if self.failing and self.failing in url:
            raise TimeoutError("timed out")
        divergence = self.divergence if "10.0.0.9" in url else 0.0
        ids = answer_token_ids(body["prompt"], body["seed"], body["max_tokens"], divergence)
        return {"choices": [{"index": 0, "text": "...", "token_ids": ids}]}


class ConfigMaps:
    def __init__(self, text: str | None = None, error: str | None = None) -> None:
        self.text, self.error = text, error

    def read_config_map(self, namespace: str, name: str, key: str) -> str:
        if self.error:
            raise ConfigMapError(self.error)
        assert self.text is not None
        return self.text


def test_prompts_are_a_json_list_or_lines() -> None:
    assert parse_prompts(json.dumps(["a\nb", "c"])) == ("a\nb", "c")
    assert parse_prompts("one\n\n two \n") == ("one", " two ")
    with pytest.raises(ValueError, match="no prompts"):
        parse_prompts("\n \n")
    with pytest.raises(ValueError, match="characters"):
        parse_prompts("x" * 20_000)


def test_token_ids_from_return_token_ids_or_from_logprobs_as_token_ids() -> None:
    assert token_ids({"choices": [{"token_ids": [3, 1, 4]}]}) == [3, 1, 4]
    older = {"choices": [{"token_ids": None, "logprobs": {"tokens": ["token_id:7", "token_id:0"]}}]}
    assert token_ids(older) == [7, 0]
    with pytest.raises(ValueError, match="no token ids"):
        token_ids({"choices": [{"text": "hi", "logprobs": None}]})


def test_the_request_is_greedy_bounded_and_marked_as_the_operators() -> None:
    settings = SDEP.spec.rollout.guardrails.output_equivalence
    body = outputs.request_body(settings, "hello")
    assert (body["temperature"], body["max_tokens"], body["seed"], body["user"]) == (0, 32, 0, PROBE_USER)
    assert body["ignore_eos"] and body["return_token_ids"] and not body["stream"]


def test_one_ready_pod_with_an_ip_at_the_revision_is_asked() -> None:
    chosen = ready_pod(PODS, "llama-eagle3", outputs.Track.CANARY, "c1")
    assert chosen is not None and chosen["metadata"]["name"] == "llama-eagle3-canary-a"
    assert ready_pod([pod("x", "canary", "c1", ready=False)], "llama-eagle3", outputs.Track.CANARY, "c1") is None
    assert ready_pod([pod("x", "canary", "c1", ip=None)], "llama-eagle3", outputs.Track.CANARY, "c1") is None
    assert pod_url("http://{ip}:{port}", chosen) == "http://10.0.0.9:8000/v1/completions"
    simulator = "http://127.0.0.1:18000/pods/{namespace}/{name}"
    no_ip = pod("x", "canary", "c1", ip=None)
    assert ready_pod([no_ip], "llama-eagle3", outputs.Track.CANARY, "c1", need_ip=False) is no_ip
    assert pod_url(simulator, chosen) == "http://127.0.0.1:18000/pods/default/llama-eagle3-canary-a/v1/completions"


def test_prompts_go_in_turn_and_the_counts_accumulate_across_analyses() -> None:
    engines = Engines()
    turn = Round(SDEP.spec.rollout.guardrails.output_equivalence, ("p0", "p1", "p2"), "http://c", "http://s")
    first = compare_round(turn, None, NOW, engines)
    second = compare_round(turn, first, NOW + timedelta(seconds=30), engines)
    sent = Counter(body["prompt"] for url, body in engines.sent if url == "http://c")  # in turn, 4 at a time
    assert (
        sent == Counter({"p0": 4, "p1": 3, "p2": 3}) == Counter(b["prompt"] for u, b in engines.sent if u == "http://s")
    )
    assert (second.pairs, second.identical, second.next_prompt, second.since) == (10, 10, 1, NOW)
    changed = compare_round(Round(turn.settings, ("q",), "http://c", "http://s"), second, NOW, engines)
    assert (changed.pairs, changed.prompts) == (5, 1)  # another prompt set starts over


def test_a_lossy_canary_is_counted_with_where_it_diverged_and_status_never_holds_a_prompt() -> None:
    engines = Engines(canary_divergence=1.0)
    found = collect_pairs(ConfigMaps(json.dumps([SECRET, "b"])), with_config_map(), STATUS, PODS, NOW, post=engines)
    assert found is not None and (found.pairs, found.identical, len(found.first_divergences)) == (5, 0, 5)
    assert all(0 <= p < 32 for p in found.first_divergences)
    assert SECRET not in found.model_dump_json() and "private" not in found.model_dump_json()


def test_a_pod_that_does_not_answer_counts_failed_requests_not_pairs() -> None:
    found = collect_pairs(ConfigMaps(), SDEP, STATUS, PODS, NOW, post=Engines(failing="10.0.0.3"))
    assert found is not None and (found.pairs, found.failed_requests) == (0, 5)
    assert found.last_error == "stable pod: TimeoutError"


def test_what_cannot_be_done_keeps_the_counts_and_says_why() -> None:
    previous = OutputPairs(prompts=32, prompts_hash="x", pairs=40, identical=40, since=NOW)
    last = Analysis(time=NOW, revision="c1", step=0, verdict=Verdict.INCONCLUSIVE, output_pairs=previous)
    status = STATUS.model_copy(update={"last_analysis": last})
    no_stable = [p for p in PODS if p["metadata"]["labels"]["specfleet.io/track"] != "stable"]
    kept = collect_pairs(ConfigMaps(), SDEP, status, no_stable, NOW, post=Engines())
    assert kept is not None and kept.pairs == 40 and kept.last_error == "no Ready stable pod with an IP to ask"
    missing = collect_pairs(ConfigMaps(error="ConfigMap default/p: not found"), with_config_map(), status, PODS, NOW)
    assert missing is not None and missing.pairs == 40 and missing.last_error == "ConfigMap default/p: not found"
    other_revision = status.model_copy(update={"canary_revision": "c2"})
    assert collect_pairs(ConfigMaps(), SDEP, other_revision, [], NOW, post=Engines()) is None


def test_the_builtin_prompts_are_used_without_a_config_map() -> None:
    engines = Engines()
    collect_pairs(ConfigMaps(), SDEP, STATUS, PODS, NOW, post=engines)
    assert sorted(body["prompt"] for url, body in engines.sent if "10.0.0.9" in url) == sorted(BUILTIN_PROMPTS[:5])


def with_config_map():  # type: ignore[no-untyped-def]
    settings = {"enabled": True, "pairsPerAnalysis": 5, "promptsConfigMap": "p"}
    return sdep({"spec": {"rollout": {"guardrails": {"outputEquivalence": settings}}}})


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            seen.append(dict(self.headers))
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"{" + b'"x": "' + b"a" * (2 << 20) + b'"}' if self.path == "/big" else b'{"choices": []}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()


def test_requests_carry_the_operators_header_and_large_answers_are_refused(server: Any) -> None:
    url, seen = server
    assert post_json(url + "/v1/completions", {"prompt": "a"}) == {"choices": []}
    assert seen[0][PROBE_HEADER] == "output-equivalence"
    with pytest.raises(ValueError, match="larger than"):
        post_json(url + "/big", {"prompt": "a"})
