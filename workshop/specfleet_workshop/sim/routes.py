"""The simulator's HTTP: its loopback address, its paths, and the handler that answers them.

All on one loopback port:
    GET /pods/<namespace>/<pod>/metrics   the pod's vLLM metrics (503 until the pod is Ready, 404 unknown)
    POST /pods/<namespace>/<pod>/v1/completions             OpenAI completions (streamed or not), served
    POST /tracks/<namespace>/<sdep>/<track>/v1/completions  by the pod's engine (a track: its Ready pods in turn)
    POST /pods/<namespace>/<pod>/restart  vLLM in the pod starts again: its counters from 0 (404 unknown/unready)
    GET  .../v1/models                    the served model, for OpenAI clients
    GET /scenario, PUT /scenario          the scenario document (YAML or JSON body; 400 names bad fields)
    GET /pods                             what is simulated: matched pair, expected acceptance, step time
    GET /gateway                          the stand-in gateway's streams: requests served and mirrored per backend
    GET /healthz
"""

import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from specfleet_workshop.fleetpods.loopback import LoopbackHandler
from specfleet_workshop.sim import completions
from specfleet_workshop.sim.completions import CompletionError, CompletionRequest
from specfleet_workshop.sim.scenario import Scenario, ScenarioError, dump_scenario, load_scenario
from specfleet_workshop.sim.streams import CompletionStream

log = logging.getLogger(__name__)

DEFAULT_PORT = 18000


def metrics_path(namespace: str, pod: str) -> str:
    return f"/pods/{namespace}/{pod}/metrics"


def openai_base_path(namespace: str, pod: str) -> str:
    """An OpenAI client's base URL path for one pod (it appends `/v1/completions`, `/v1/models`)."""
    return f"/pods/{namespace}/{pod}"


@dataclass(frozen=True)
class OpenAIRoute:
    """Who answers an OpenAI request: one pod, or the Ready pods of one track of a SpeculativeDeployment."""

    namespace: str
    endpoint: str
    """`completions` or `models`."""
    pod: str | None = None
    sdep: str | None = None
    track: str | None = None


def openai_route(path: str) -> OpenAIRoute | None:
    """`/pods/<ns>/<pod>/v1/<endpoint>` or `/tracks/<ns>/<sdep>/<track>/v1/<endpoint>`, else None."""
    parts = path.strip("/").split("/")
    if len(parts) == 5 and parts[0] == "pods" and parts[3] == "v1" and parts[4] in {"completions", "models"}:
        return OpenAIRoute(namespace=parts[1], pod=parts[2], endpoint=parts[4])
    if len(parts) == 6 and parts[0] == "tracks" and parts[4] == "v1" and parts[5] in {"completions", "models"}:
        return OpenAIRoute(namespace=parts[1], sdep=parts[2], track=parts[3], endpoint=parts[5])
    return None


class SimulatorApi(Protocol):
    """What the handler asks of the simulator (`specfleet_workshop.sim.simulator.Simulator`)."""

    @property
    def scenario(self) -> Scenario: ...

    def set_scenario(self, scenario: Scenario) -> None: ...

    def describe(self) -> list[dict[str, Any]]: ...

    def gateway(self) -> list[dict[str, Any]]: ...

    def restart(self, namespace: str, name: str) -> bool: ...

    def metrics(self, namespace: str, name: str) -> tuple[HTTPStatus, bytes]: ...

    def models(self, route: OpenAIRoute) -> dict[str, Any]: ...

    def open_completion(self, route: OpenAIRoute, request: CompletionRequest) -> CompletionStream: ...


def handler_for(sim: SimulatorApi) -> type[LoopbackHandler]:
    class Handler(LoopbackHandler):
        server_version = "specfleet-sim"

        def _send_json(self, status: HTTPStatus, document: Any) -> None:
            self._send(status, json.dumps(document).encode(), "application/json")

        def _models(self, route: OpenAIRoute) -> None:
            try:
                self._send_json(HTTPStatus.OK, sim.models(route))
            except CompletionError as error:
                self._send_json(error.status, error.body())

        def do_POST(self) -> None:
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if len(parts) == 4 and parts[0] == "pods" and parts[3] == "restart":
                if sim.restart(parts[1], parts[2]):
                    self._send(HTTPStatus.OK, b"restarted\n")
                else:
                    self._send(HTTPStatus.NOT_FOUND, b"no Ready pod of that name\n")
                return
            route = openai_route(self.path.split("?", 1)[0])
            if route is None or route.endpoint != "completions":
                self._send(HTTPStatus.NOT_FOUND, b"not found\n")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                request = completions.parse_request(body)
                stream = sim.open_completion(route, request)
            except CompletionError as error:
                self._send_json(error.status, error.body())
                return
            try:
                if request.stream:
                    self.send_response(HTTPStatus.OK)
                    self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()  # HTTP/1.0 without a length: the body ends when the connection closes
                    self.close_connection = True
                    for event in stream.events():
                        self.wfile.write(event)
                else:
                    try:
                        answer = stream.response()
                    except CompletionError as error:
                        self._send_json(error.status, error.body())
                    else:
                        self._send_json(HTTPStatus.OK, answer)
            except (BrokenPipeError, ConnectionResetError):
                log.debug("client of %s went away", stream.id)
            finally:
                stream.close()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            parts = path.strip("/").split("/")
            if path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n")
            elif path == "/scenario":
                self._send(HTTPStatus.OK, dump_scenario(sim.scenario).encode(), "application/yaml")
            elif path == "/pods":
                self._send(HTTPStatus.OK, json.dumps(sim.describe(), indent=1).encode(), "application/json")
            elif path == "/gateway":
                self._send(HTTPStatus.OK, json.dumps(sim.gateway(), indent=1).encode(), "application/json")
            elif (route := openai_route(path)) is not None and route.endpoint == "models":
                self._models(route)
            elif len(parts) == 4 and parts[0] == "pods" and parts[3] == "metrics":
                status, body = sim.metrics(parts[1], parts[2])
                self._send(status, body, CONTENT_TYPE_PLAIN_0_0_4 if status is HTTPStatus.OK else "text/plain")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n")

        def do_PUT(self) -> None:
            if self.path.split("?", 1)[0] != "/scenario":
                self._send(HTTPStatus.NOT_FOUND, b"not found\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                scenario = load_scenario(self.rfile.read(length).decode())
            except (ScenarioError, UnicodeDecodeError) as error:
                self._send(HTTPStatus.BAD_REQUEST, f"{error}\n".encode())
                return
            sim.set_scenario(scenario)
            self._send(HTTPStatus.OK, dump_scenario(scenario).encode(), "application/yaml")

    return Handler
