"""`kubectl specfleet`'s own client against a real TLS server that demands a client certificate.

The certificates come from the dev cluster's PKI code (openssl), the server is the standard library's: the
client must present the admin certificate, trust only the dev CA, send merge patches, and report the
server's error statuses as the Kubernetes library would.
"""

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.cli import kubeapi, view
from specfleet_workshop.devcluster.config import render_kubeconfig
from specfleet_workshop.devcluster.pki import create_pki

pytestmark = pytest.mark.xdist_group("cli_kubeapi")  # its module-scoped fixture is built once, on one worker

OBJECT_PATH = "/apis/specfleet.io/v1alpha1/namespaces/team-a/speculativedeployments/llama"
SDEP = ("specfleet.io", "v1alpha1", "team-a", "speculativedeployments")
LLAMA = {"metadata": {"name": "llama", "resourceVersion": "7"}, "status": {"phase": "Paused"}}


@dataclass
class Seen:
    requests: list[tuple[str, str, str | None, Any]] = field(default_factory=list)
    client_subjects: list[str] = field(default_factory=list)


@dataclass
class Server:
    url: str
    pki: Path
    seen: Seen


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    create_pki(directory, "10.96.0.1")
    return directory


@pytest.fixture
def server(pki: Path) -> Iterator[Server]:
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: Any = None) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            sent = json.loads(self.rfile.read(length)) if length else None
            seen.requests.append((self.command, self.path, self.headers.get("Content-Type"), sent))
            subject = dict(item[0] for item in self.connection.getpeercert()["subject"])  # type: ignore[union-attr]
            seen.client_subjects.append(subject["commonName"])
            if self.path != OBJECT_PATH:
                status, body = 404, {"kind": "Status", "reason": "NotFound", "message": "not found"}
            elif self.command == "PATCH" and sent["metadata"].get("resourceVersion") != "7":
                status, body = 409, {"kind": "Status", "reason": "Conflict"}
            else:
                status, body = (
                    200,
                    {"metadata": {"name": "llama", "resourceVersion": "7"}, "status": {"phase": "Paused"}},
                )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = _answer  # noqa: N815 (the names http.server calls)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield Server(f"https://127.0.0.1:{httpd.server_address[1]}", pki, seen)
    httpd.shutdown()
    httpd.server_close()


def kubeconfig(tmp_path: Path, server: Server, namespace: str | None = None) -> Path:
    pki = server.pki
    text = render_kubeconfig(
        server.url, (pki / "ca.crt").read_bytes(), (pki / "admin.crt").read_bytes(),
        (pki / "admin.key").read_bytes(), "admin",
    )  # fmt: skip
    if namespace:
        document = yaml.safe_load(text)
        document["contexts"][0]["context"]["namespace"] = namespace
        text = yaml.safe_dump(document)
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    return path


def test_get_and_patch_with_the_client_certificate(tmp_path: Path, server: Server) -> None:
    api, namespace = kubeapi.from_kubeconfig(str(kubeconfig(tmp_path, server, "team-a")), None)
    assert namespace == "team-a"

    obj = api.get_namespaced_custom_object("specfleet.io", "v1alpha1", "team-a", "speculativedeployments", "llama")
    body = {"metadata": {"resourceVersion": "7", "annotations": {"specfleet.io/promote": "step"}}}
    api.patch_namespaced_custom_object("specfleet.io", "v1alpha1", "team-a", "speculativedeployments", "llama", body)

    assert obj["status"] == {"phase": "Paused"}
    assert server.seen.client_subjects == ["specfleet-dev-admin", "specfleet-dev-admin"]
    (_, _, _, _), (method, path, content_type, sent) = server.seen.requests
    assert (method, path, content_type, sent) == ("PATCH", OBJECT_PATH, "application/merge-patch+json", body)


def test_error_statuses_and_a_refused_connection_are_told_apart(tmp_path: Path, server: Server) -> None:
    api, _ = kubeapi.from_kubeconfig(str(kubeconfig(tmp_path, server)), None)
    with pytest.raises(kubeapi.ApiError) as missing:
        api.get_namespaced_custom_object("specfleet.io", "v1alpha1", "team-a", "speculativedeployments", "other")
    stale = {"metadata": {"resourceVersion": "6"}}
    with pytest.raises(kubeapi.ApiError) as conflict:
        api.patch_namespaced_custom_object(
            "specfleet.io", "v1alpha1", "team-a", "speculativedeployments", "llama", stale
        )
    assert (kubeapi.error_status(missing.value), kubeapi.error_status(conflict.value)) == (404, 409)

    refused = kubeapi.CustomObjects("https://127.0.0.1:1", api.ssl_context)
    with pytest.raises(OSError) as unreachable:
        refused.list_cluster_custom_object("specfleet.io", "v1alpha1", "speculativedeployments")
    assert kubeapi.is_connection_error(unreachable.value) and kubeapi.error_status(unreachable.value) is None


def test_a_server_signed_by_another_ca_is_refused(tmp_path: Path, server: Server) -> None:
    other = tmp_path / "other-pki"
    create_pki(other, "10.96.0.1")
    path = kubeconfig(tmp_path, server)
    document = yaml.safe_load(path.read_text())
    document["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        (other / "ca.crt").read_bytes()
    ).decode()
    path.write_text(yaml.safe_dump(document))
    api, _ = kubeapi.from_kubeconfig(str(path), None)
    with pytest.raises(ssl.SSLCertVerificationError):
        api.get_namespaced_custom_object("specfleet.io", "v1alpha1", "team-a", "speculativedeployments", "llama")


def test_file_references_resolve_next_to_the_kubeconfig_and_a_token_is_sent(tmp_path: Path, server: Server) -> None:
    (tmp_path / "ca.pem").write_bytes((server.pki / "ca.crt").read_bytes())
    (tmp_path / "token").write_text("s3cret\n")
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.pem"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "config").write_text(yaml.safe_dump(document))
    api, namespace = kubeapi.from_kubeconfig(str(tmp_path / "config"), None)
    assert api.headers == {"Authorization": "Bearer s3cret"} and namespace == "default"


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"command": "aws", "args": ["eks", "get-token"]}},
        {"auth-provider": {"name": "oidc"}},
        {"username": "a", "password": "b"},
    ],
)
def test_kubeconfigs_it_does_not_read_go_to_the_kubernetes_library(tmp_path: Path, user: dict[str, Any]) -> None:
    document = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "config").write_text(yaml.safe_dump(document))
    with pytest.raises(kubeapi.UnsupportedKubeconfigError):
        kubeapi.from_kubeconfig(str(tmp_path / "config"), None)


def test_several_kubeconfig_files_go_to_the_kubernetes_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/a/config:/b/config")
    with pytest.raises(kubeapi.UnsupportedKubeconfigError):
        kubeapi.from_kubeconfig(None, None)


def test_a_missing_context_is_a_kubeconfig_error(tmp_path: Path, server: Server) -> None:
    with pytest.raises(kubeapi.KubeconfigError, match="no context named 'nope'"):
        kubeapi.from_kubeconfig(str(kubeconfig(tmp_path, server)), "nope")


def test_the_cli_reads_the_object_through_its_own_client(tmp_path: Path, server: Server) -> None:
    """`connect` picks `kubeapi` for a client-certificate kubeconfig; `get` maps a 404 to one clear line."""
    cluster = view.connect(str(kubeconfig(tmp_path, server, "team-a")), None, None)
    assert isinstance(cluster.api, kubeapi.CustomObjects)
    assert view.get(cluster, "llama")["metadata"]["resourceVersion"] == "7"
    with pytest.raises(SystemExit) as missing:
        view.get(cluster, "missing")
    assert missing.value.code == 1


@pytest.mark.parametrize(("throttled", "answered"), [(2, 200), (kubeapi.THROTTLED_RETRIES + 1, 429)])
def test_an_api_server_that_throttles_is_asked_again_after_the_wait_it_gives(throttled: int, answered: int) -> None:
    """429 (priority and fairness, or storage still starting) is asked again after its Retry-After, up to
    THROTTLED_RETRIES times; a server that keeps throttling is an ApiError 429 in the end."""
    calls: list[str] = []

    class Throttling(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            calls.append(self.path)
            status, body = (429, b"{}") if len(calls) <= throttled else (200, b'{"items": []}')
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Throttling)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        api = kubeapi.CustomObjects(f"http://127.0.0.1:{httpd.server_address[1]}", None)
        if answered == 200:
            assert api.list_cluster_custom_object("specfleet.io", "v1alpha1", "speculativedeployments") == {"items": []}
        else:
            with pytest.raises(kubeapi.ApiError) as throttled_out:
                api.list_cluster_custom_object("specfleet.io", "v1alpha1", "speculativedeployments")
            assert kubeapi.error_status(throttled_out.value) == 429
        assert len(calls) == min(throttled, kubeapi.THROTTLED_RETRIES) + 1
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_retry_after_is_read_as_seconds_and_capped() -> None:
    assert kubeapi._retry_after("3") == 3.0
    assert kubeapi._retry_after(None) == kubeapi._retry_after("soon") == kubeapi._retry_after("nan") == 1.0
    assert kubeapi._retry_after("3600") == kubeapi.MAX_RETRY_AFTER
