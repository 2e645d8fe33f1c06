"""Whatever an HTTP server at the Prometheus URL answers, an analysis ends in a verdict, never an exception.

A real HTTP server on loopback answers every query with a body hypothesis draws: well-formed vectors with
odd values (NaN, Inf, text, many series), wrong JSON shapes, HTML error pages, error statuses, and
answers slower than the client's timeout. The Prometheus provider and the analysis are the real ones.
"""

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus, Verdict
from specfleet.controller.analysis import analyze
from specfleet.metrics.prometheus import Prometheus

from bad_specs import BASE

pytestmark = pytest.mark.xdist_group("prometheus_answers")  # its module-scoped fixture is built once, on one worker

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STATUS = SpeculativeDeploymentStatus(
    stable_revision="s1", canary_revision="c1", current_step=0, analyses=2, evidence_since=NOW - timedelta(minutes=5)
)
TIMEOUT = 0.3
SAMPLE_VALUES = st.sampled_from(["1", "0", "NaN", "+Inf", "-Inf", "1e400", "abc", "", "-3"]) | st.floats().map(str)
ODD_DIGITS = ["²", "٣", "9" * 5000]
"""Label values `str.isdigit` takes for digits that `int` refuses or reads as another number (a superscript,
an Arabic-Indic three, more digits than Python converts)."""
LABEL_VALUES = SAMPLE_VALUES | st.sampled_from(ODD_DIGITS)
ODD_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def vector(draw: st.DrawFn) -> str:
    """A query result in Prometheus' shape, with any number of series and any values in it."""
    series = [
        {"metric": draw(st.dictionaries(st.sampled_from(["le", "position", "pod", "x"]), LABEL_VALUES, max_size=2)),
         "value": draw(st.sampled_from([[1.0, draw(SAMPLE_VALUES)], [1.0], "1", None, [1.0, 2.0]]))}
        for _ in range(draw(st.integers(min_value=0, max_value=40)))
    ]  # fmt: skip
    result_type = draw(st.sampled_from(["vector", "scalar", "matrix", "string"]))
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": series}})


ANSWERS = st.one_of(
    vector(),
    ODD_JSON.map(lambda value: json.dumps({"status": "success", "data": value})),
    ODD_JSON.map(json.dumps),
    st.just("<html><body>502 Bad Gateway</body></html>"),
    st.text(max_size=50),
)


class Script:
    """What the server answers: one body (and status) for every query, sometimes after a delay."""

    body = "{}"
    status = 200
    delay = 0.0
    by_query: Callable[[str], str] | None = None
    """When set, the body for each query (its PromQL), instead of `body`."""


class Handler(BaseHTTPRequestHandler):
    script = Script()

    def do_GET(self) -> None:
        if self.script.delay:
            time.sleep(self.script.delay)  # an answer slower than the client's timeout, not an assertion
        query = parse_qs(urlsplit(self.path).query).get("query", [""])[0]
        body = self.script.body if self.script.by_query is None else self.script.by_query(query)
        payload = body.encode("utf-8", "replace")
        self.send_response(self.script.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=ANSWERS, status=st.sampled_from([200, 200, 200, 400, 500, 503]))
def test_every_answer_becomes_a_verdict(server: str, body: str, status: int) -> None:
    Handler.script.body, Handler.script.status, Handler.script.delay = body, status, 0.0
    analysis = analyze(
        Prometheus(server, timeout_seconds=TIMEOUT), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW
    )
    assert analysis.verdict in Verdict
    if analysis.verdict is Verdict.PASS:  # never promoted on evidence that is not a well-formed vector
        assert analysis.canary.requests > 0 and analysis.stable.requests > 0


def test_an_answer_slower_than_the_timeout_is_an_error_verdict(server: str) -> None:
    Handler.script.body, Handler.script.status, Handler.script.delay = "{}", 200, TIMEOUT * 4
    try:
        analysis = analyze(
            Prometheus(server, timeout_seconds=TIMEOUT), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW
        )
    finally:
        Handler.script.delay = 0.0
    assert analysis.verdict is Verdict.ERROR and "timed out" in analysis.reasons[0].lower(), analysis.reasons


def test_credentials_and_the_body_of_a_refusal_stay_out_of_the_reasons(server: str) -> None:
    """The URL's userinfo and query, the bearer token and whatever body the server chose never reach the
    analysis (status, Events and logs take its reasons), and a reason stays one short line."""
    host = server.removeprefix("http://")
    url = f"http://alice:pass-in-url@{host}/prometheus?key=query-secret#fragment"
    Handler.script.body = "denied bearer-secret pass-in-url query-secret " + "<p>page</p>" * 300
    Handler.script.status, Handler.script.delay = 401, 0.0
    try:
        analysis = analyze(
            Prometheus(url, token="bearer-secret", timeout_seconds=TIMEOUT), SpeculativeDeployment.from_mapping(BASE),
            STATUS, NOW,
        )  # fmt: skip
    finally:
        Handler.script.status = 200
    said = " ".join(analysis.reasons)
    assert analysis.verdict is Verdict.ERROR
    assert f"Prometheus at http://{host}/prometheus:" in said
    for secret in ("pass-in-url", "alice", "query-secret", "bearer-secret", "fragment"):
        assert secret not in said
    assert all(len(reason) < 300 and "\n" not in reason for reason in analysis.reasons)


@pytest.mark.parametrize("position", ODD_DIGITS, ids=["superscript", "arabic-indic", "5000-digits"])
def test_a_position_that_is_not_a_plain_number_is_no_exception(server: str, position: str) -> None:
    """Per-position acceptance is read by the `position` label; one that is not ASCII digits is not a position."""

    def answer(query: str) -> str:
        labels = [{"position": p} for p in ("0", position)] if "position" in query else [{}]
        series = [{"metric": metric, "value": [1.0, "5"]} for metric in labels]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}})

    Handler.script.status, Handler.script.delay, Handler.script.by_query = 200, 0.0, answer
    try:
        analysis = analyze(
            Prometheus(server, timeout_seconds=TIMEOUT), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW
        )
    finally:
        Handler.script.by_query = None
    assert analysis.verdict in Verdict
    assert analysis.canary is None or len(analysis.canary.acceptance_per_position) <= 1
