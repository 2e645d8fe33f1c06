"""One loopback address for every real vLLM server: `/pods/<namespace>/<pod>/<path>` goes to that pod's server.

The dev cluster's pods have no reachable IPs (kwok runs nothing), so whoever must call one pod (the operator's
output-equivalence requests, `specfleet run --pod-url-template http://127.0.0.1:18001/pods/{namespace}/{name}`,
or a person with curl) calls the front, as it would call the simulator's per-pod routes. The path after the
pod is passed on as it is (`/v1/completions`, `/v1/models`, `/metrics`), the body buffered (no streaming):

    GET|POST /pods/<namespace>/<pod>/<path>   404 unknown pod, 503 while its server starts or waits for a slot
    GET /healthz
"""

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus

from specfleet_workshop.fleetpods.loopback import LoopbackHandler, LoopbackServer

DEFAULT_PORT = 18001
"""Beside the simulator's 18000, so both can run on one machine."""
FORWARD_SECONDS = 120.0
"""Longest wait for the pod's server: a completion on a busy CPU takes seconds."""
MAX_BODY_BYTES = 1 << 20

PodAddress = Callable[[str, str], tuple[HTTPStatus, str]]
"""(namespace, pod) -> (OK, the server's base URL), or an error status and why."""


def pod_route(path: str) -> tuple[str, str, str] | None:
    """`/pods/<namespace>/<pod>/<rest>` -> (namespace, pod, `/<rest>`), else None."""
    parts = path.split("?", 1)[0].strip("/").split("/", 3)
    if len(parts) == 4 and parts[0] == "pods" and all(parts[1:]):
        query = path[len(path.split("?", 1)[0]) :]
        return parts[1], parts[2], f"/{parts[3]}{query}"
    return None


def _handler(address_of: PodAddress) -> type[LoopbackHandler]:
    class Handler(LoopbackHandler):
        server_version = "specfleet-vllm-front"

        def _forward(self, method: str) -> None:
            if self.path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n")
                return
            route = pod_route(self.path)
            if route is None:
                self._send(HTTPStatus.NOT_FOUND, b"not found: the front serves /pods/<namespace>/<pod>/<path>\n")
                return
            namespace, pod, rest = route
            status, base = address_of(namespace, pod)
            if status is not HTTPStatus.OK:
                self._send(status, f"{namespace}/{pod}: {base}\n".encode())
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b"body too large\n")
                return
            body = self.rfile.read(length) if length else None
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            request = urllib.request.Request(base + rest, data=body, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=FORWARD_SECONDS) as answer:
                    self._send(answer.status, answer.read(), answer.headers.get("Content-Type", "text/plain"))
            except urllib.error.HTTPError as error:
                self._send(error.code, error.read(), error.headers.get("Content-Type", "text/plain"))
            except OSError as error:
                self._send(HTTPStatus.BAD_GATEWAY, f"{namespace}/{pod}: {error}\n".encode())

        def do_GET(self) -> None:
            self._forward("GET")

        def do_POST(self) -> None:
            self._forward("POST")

    return Handler


class PodFront:
    """The front's HTTP server, serving in a thread until `stop`."""

    def __init__(self, listen: tuple[str, int], address_of: PodAddress) -> None:
        self._server = LoopbackServer(listen, _handler(address_of))

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> "PodFront":
        threading.Thread(target=self._server.serve_forever, name="vllm-front", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
