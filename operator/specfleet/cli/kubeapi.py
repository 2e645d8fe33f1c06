"""The few custom-object calls of `kubectl specfleet`, made without the Kubernetes library when possible.

`import kubernetes` alone takes longer than the whole `kubectl specfleet status` may (its package imports
every API and model class), and these commands need four REST calls. This module reads the common
kubeconfigs itself: a server with a CA (file or data) or `insecure-skip-tls-verify`, and a client
certificate and key (files or data) or a bearer token (`token`, `tokenFile`). Anything else (exec or
auth-provider plugins, basic auth, proxies, `tls-server-name`, several files in KUBECONFIG) goes through
the Kubernetes library exactly as before, so no kubeconfig that worked stops working.

`CustomObjects` has the signatures of the `kubernetes.client.CustomObjectsApi` methods the CLI calls, so
either can serve `specfleet.cli.rollouts`.
"""

import base64
import http.client
import json
import math
import os
import ssl
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SUPPORTED_USER_KEYS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile"}
)
SUPPORTED_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "extensions"}
)


class KubeconfigError(Exception):
    """The kubeconfig is missing, unreadable, or names a context, cluster or user it does not hold."""


class UnsupportedKubeconfigError(Exception):
    """The kubeconfig uses a feature this module leaves to the Kubernetes library."""


class ApiError(Exception):
    """The API server answered with an error status; `body` is its Status object as text."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"({status}) {reason}")
        self.status, self.reason, self.body = status, reason, body


class CustomObjectsApi(Protocol):
    """What `specfleet.cli.rollouts` calls: this module's `CustomObjects` or the library's CustomObjectsApi."""

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> object: ...

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str) -> Any: ...

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any: ...

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any: ...


def error_status(error: BaseException) -> int | None:
    """The HTTP status of an API error from this module or from the Kubernetes library, else None.

    The library's exception type is looked up only if the library was imported: if it was not, the error
    cannot be one of its.
    """
    if isinstance(error, ApiError):
        return error.status
    library = sys.modules.get("kubernetes.client.exceptions")
    if library is not None and isinstance(error, library.ApiException):
        return int(error.status) if error.status is not None else None
    return None


def is_connection_error(error: BaseException) -> bool:
    """Could not talk to the API server at all (refused, TLS, timeout), from either client."""
    urllib3 = sys.modules.get("urllib3.exceptions")
    return isinstance(error, OSError | http.client.HTTPException) or (
        urllib3 is not None and isinstance(error, urllib3.HTTPError)
    )


THROTTLED = 429
THROTTLED_RETRIES = 5
"""How often a call the API server answered 429 (its priority-and-fairness limits, or its storage still starting)
is made again, after the Retry-After it asks for, as client-go does: a busy cluster is not an error to a user."""
MAX_RETRY_AFTER = 10.0
"""The longest wait taken from a Retry-After header, in seconds (1 s without one)."""


def _retry_after(header: str | None) -> float:
    """The seconds a Retry-After header asks for; 1 s for a date, garbage or none (`nan` and `inf` included)."""
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if math.isfinite(seconds) else 1.0


@dataclass
class CustomObjects:
    """Custom-object calls over one HTTPS (or HTTP) connection per call."""

    server: str
    ssl_context: ssl.SSLContext | None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0

    def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", attempt: int = 0
    ) -> Any:
        url = urllib.parse.urlsplit(self.server)
        connection: http.client.HTTPConnection
        if url.scheme == "https":
            connection = http.client.HTTPSConnection(
                url.hostname or "", url.port or 443, timeout=self.timeout, context=self.ssl_context
            )
        else:
            connection = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=self.timeout)
        headers = {"Accept": "application/json", "User-Agent": "kubectl-specfleet", **self.headers}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            connection.request(method, url.path.rstrip("/") + path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read().decode(errors="replace")
        finally:
            connection.close()
        if response.status == THROTTLED and attempt < THROTTLED_RETRIES:
            time.sleep(_retry_after(response.getheader("Retry-After")))
            return self._request(method, path, body, content_type, attempt + 1)
        if response.status >= 400:
            raise ApiError(response.status, response.reason, data)
        return json.loads(data) if data else None

    @staticmethod
    def _path(group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None) -> str:
        quote = urllib.parse.quote
        path = f"/apis/{quote(group)}/{quote(version)}"
        if namespace is not None:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{quote(plural)}"
        return path + (f"/{quote(name, safe='')}" if name is not None else "")

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        return self._request("GET", self._path(group, version, plural, namespace, name))

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str) -> Any:
        return self._request("GET", self._path(group, version, plural, namespace))

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any:
        return self._request("GET", self._path(group, version, plural))

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any:
        """A JSON merge patch, as the Kubernetes library sends for a dict body (with a resourceVersion in the
        body, the server refuses it with 409 when the object changed since it was read)."""
        return self._request(
            "PATCH", self._path(group, version, plural, namespace, name), body, "application/merge-patch+json"
        )


def _named(entries: list[dict[str, Any]] | None, name: str, kind: str) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            return entry.get(kind) or {}
    raise KubeconfigError(f"the kubeconfig has no {kind} named {name!r}")


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _load_cert_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """`ssl` loads certificates only from files: write them to a private directory for the call, then delete."""
    with tempfile.TemporaryDirectory(prefix="kubectl-specfleet-") as directory:
        cert, key = Path(directory) / "client.crt", Path(directory) / "client.key"
        for path, data in ((cert, cert_pem), (key, key_pem)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        context.load_cert_chain(str(cert), str(key))


def _pem(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return _resolve(base, entry[key]).read_bytes()
    return None


def from_kubeconfig(kubeconfig: str | None, context: str | None) -> tuple[CustomObjects, str]:
    """A client and the context's namespace, from `kubeconfig` or KUBECONFIG or ~/.kube/config.

    Raises UnsupportedKubeconfigError for what this module does not read, KubeconfigError when the file
    cannot be used at all.
    """
    paths = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if os.pathsep in paths.strip(os.pathsep):
        raise UnsupportedKubeconfigError("several kubeconfig files to merge")
    path = Path(paths.strip(os.pathsep)).expanduser()
    import yaml  # here, not at the top: `specfleet --help` imports this module too

    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise KubeconfigError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig")
    context_name = context or document.get("current-context")
    if not context_name:
        raise KubeconfigError(f"{path} sets no current-context")
    chosen = _named(document.get("contexts"), context_name, "context")
    cluster = _named(document.get("clusters"), chosen.get("cluster", ""), "cluster")
    user = _named(document.get("users"), chosen.get("user", ""), "user") if chosen.get("user") else {}
    unsupported = (set(user) - SUPPORTED_USER_KEYS) | (set(cluster) - SUPPORTED_CLUSTER_KEYS)
    if unsupported:
        raise UnsupportedKubeconfigError(", ".join(sorted(unsupported)))
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"cluster {chosen.get('cluster')!r} in {path} has no server")
    base = path.parent
    ssl_context = None
    try:
        if server.startswith("https://"):
            if cluster.get("insecure-skip-tls-verify"):
                ssl_context = ssl.create_default_context()
                ssl_context.check_hostname = False
                ssl_context.verify_mode = ssl.CERT_NONE
            else:
                ca = _pem(cluster, "certificate-authority", base)
                ssl_context = ssl.create_default_context(cadata=ca.decode() if ca else None)
            cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
            if cert and key:
                _load_cert_chain(ssl_context, cert, key)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = _resolve(base, user["tokenFile"]).read_text().strip()
    except (OSError, ValueError, ssl.SSLError) as error:
        raise KubeconfigError(f"credentials of context {context_name!r} in {path}: {error}") from error
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return CustomObjects(server, ssl_context, headers), chosen.get("namespace") or "default"
