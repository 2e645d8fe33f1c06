"""The operator's Kubernetes client: it says who it is (audit logs tell it apart), keeps enough connections,
and lists nodes and pods for the capacity check as plain dicts, cluster-wide, unfinished pods only."""

import hashlib
import json
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic.exceptions import ForbiddenError

from specfleet import __version__
from specfleet.controller.kube import Kube, load_config
from specfleet.controller.metrics import API_REQUESTS
from specfleet_workshop.devcluster.config import render_kubeconfig


def test_the_operator_client_sends_its_own_user_agent(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(render_kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me"))
    client = load_config(str(kubeconfig))
    assert client.user_agent == f"specfleet/{__version__}"
    assert client.default_headers["User-Agent"] == f"specfleet/{__version__}"


def test_the_client_keeps_a_connection_per_worker(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(render_kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me"))
    assert load_config(str(kubeconfig), connections=64).configuration.connection_pool_maxsize == 64
    assert load_config(str(kubeconfig), connections=1).configuration.connection_pool_maxsize >= 5  # the default


# the capacity check's two lists, through the real dynamic client against a stand-in API server

NODE = {"metadata": {"name": "gpu-1", "labels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}}}
POD = {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"nodeName": "gpu-1"}}
RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list"]},
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]},
    ],
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, list[str], set[str]]]:
    """A plain-HTTP API server with discovery, nodes and pods; paths in `forbidden` answer 403."""
    seen: list[str] = []
    forbidden: set[str] = set()
    answers: dict[str, Any] = {
        "/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
        "/api/v1": RESOURCES,
        "/api/v1/nodes": {"kind": "NodeList", "items": [NODE]},
        "/api/v1/pods": {"kind": "PodList", "items": [POD]},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            path = urllib.parse.urlsplit(self.path).path
            if path in forbidden:
                status, body = 403, {"kind": "Status", "reason": "Forbidden", "code": 403, "message": "cannot"}
            elif path in answers:
                status, body = 200, answers[path]
            else:
                status, body = 404, {"kind": "Status", "reason": "NotFound", "code": 404}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield url, seen, forbidden
    finally:
        server.shutdown()
        server.server_close()
        # the dynamic client's discovery cache, named after the host (kubernetes.dynamic.discovery)
        cache = (
            Path(tempfile.gettempdir()) / f"osrcp-{hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()}.json"
        )
        cache.unlink(missing_ok=True)


def kube_at(url: str) -> Kube:
    configuration = client.Configuration()
    configuration.host = url
    return Kube(client.ApiClient(configuration))


def test_the_capacity_lists_are_cluster_wide_plain_dicts_and_counted(api: tuple[str, list[str], set[str]]) -> None:
    url, seen, _ = api
    kube = kube_at(url)
    before = {kind: API_REQUESTS.labels("list", kind)._value.get() for kind in ("Node", "Pod")}
    assert kube.list_nodes() == [NODE]
    assert kube.list_pods_on_nodes() == [POD]
    listed = [urllib.parse.urlsplit(p) for p in seen if p.startswith(("/api/v1/nodes", "/api/v1/pods"))]
    assert [p.path for p in listed] == ["/api/v1/nodes", "/api/v1/pods"]
    assert urllib.parse.parse_qs(listed[1].query) == {"fieldSelector": ["status.phase!=Succeeded,status.phase!=Failed"]}
    assert {kind: API_REQUESTS.labels("list", kind)._value.get() - before[kind] for kind in before} == {
        "Node": 1,
        "Pod": 1,
    }


def test_a_refused_list_is_a_forbidden_error(api: tuple[str, list[str], set[str]]) -> None:
    url, _, forbidden = api
    forbidden.add("/api/v1/nodes")
    with pytest.raises(ForbiddenError):
        kube_at(url).list_nodes()
