"""The only module that writes to the Kubernetes API. Blocking calls; the reconciler runs them in threads.

Children are applied with server-side apply under the field manager `specfleet` (force: specfleet owns
the fields it renders, so a hand edit of them is corrected); deletes carry a uid precondition, so an
object that was replaced by someone else in the meantime is never deleted.
"""

import base64
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ForbiddenError, NotFoundError, ResourceNotFoundError
from kubernetes.dynamic.resource import Resource

from specfleet import __version__
from specfleet.api.vocabulary import API_VERSION, FIELD_MANAGER, KIND
from specfleet.controller.events import EventCorrelator, EventWrite, Involved
from specfleet.controller.metrics import API_REQUESTS

Manifest = dict[str, Any]
USER_AGENT = f"specfleet/{__version__}"
FINISHED_PODS_EXCLUDED = "status.phase!=Succeeded,status.phase!=Failed"
"""The scheduler's own selector for the pods that hold node resources."""
EVENT_MESSAGE_LIMIT = 1024
"""Characters of an Event's message (events.k8s.io's own limit)."""


class SecretError(Exception):
    """A Secret the operator needs cannot be read (missing, forbidden, no such key); the message says which."""


class ConfigMapError(Exception):
    """A ConfigMap the operator needs cannot be read (missing, forbidden, no such key); the message says which."""


def load_config(kubeconfig: str | None = None, connections: int | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config).

    Its requests say `specfleet/<version>` (kopf's own say `kopf/<version>`), so an API server's audit log
    and flow-control metrics tell the operator apart from other clients of the same identity. `connections`:
    how many requests may be in flight at once (one per reconcile worker); the client keeps at least that
    many connections open (its default is 5 per core).
    """
    if kubeconfig is None:
        try:
            config.load_incluster_config()
            return _client(connections)
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig)
    return _client(connections)


def _client(connections: int | None) -> client.ApiClient:
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, connections or 0)
    api_client = client.ApiClient(configuration)
    api_client.user_agent = USER_AGENT
    return api_client


def connection_info(api_client: client.ApiClient) -> dict[str, Any]:
    """The credentials of `api_client` in the shape of kopf.ConnectionInfo, so kopf and specfleet share one login."""
    cfg = api_client.configuration
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    return {
        "server": cfg.host,
        "ca_path": cfg.ssl_ca_cert,
        "insecure": not cfg.verify_ssl,
        "certificate_path": cfg.cert_file,
        "private_key_path": cfg.key_file,
        "scheme": scheme,
        "token": token,
    }


class Kube:
    """Typed verbs over the dynamic client, each counted in `specfleet_api_requests_total`."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self._dynamic = DynamicClient(api_client)
        self._resources: dict[tuple[str, str], Resource] = {}
        self.events = EventCorrelator()

    def _resource(self, api_version: str, kind: str) -> Resource:
        if (api_version, kind) not in self._resources:
            self._resources[api_version, kind] = self._dynamic.resources.get(api_version=api_version, kind=kind)
        return self._resources[api_version, kind]

    def apply(self, manifest: Manifest) -> None:
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        API_REQUESTS.labels("apply", manifest["kind"]).inc()
        resource.server_side_apply(
            body=manifest,
            name=manifest["metadata"]["name"],
            namespace=manifest["metadata"]["namespace"],
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    def create(self, manifest: Manifest) -> None:
        """Create only: fails with a ConflictError when the name is taken (maybe by someone else's object)."""
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        API_REQUESTS.labels("create", manifest["kind"]).inc()
        resource.create(body=manifest, namespace=manifest["metadata"]["namespace"], field_manager=FIELD_MANAGER)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        """Delete one object, only if it is still the one with `uid`; foreground so pods go with it."""
        resource = self._resource(api_version, kind)
        API_REQUESTS.labels("delete", kind).inc()
        body = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
        with contextlib.suppress(NotFoundError):
            resource.delete(name=name, namespace=namespace, body=body)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> str:
        """Replace the status (a merge patch whose removed keys are nulls, built by the caller), only if the
        object is still at `resource_version` (else ConflictError); returns the new resourceVersion."""
        resource = self._resource(API_VERSION, KIND)
        API_REQUESTS.labels("patch-status", KIND).inc()
        written = resource.status.patch(
            name=name,
            namespace=namespace,
            body={"metadata": {"resourceVersion": resource_version}, "status": status},
            content_type="application/merge-patch+json",
        )
        return str(written.metadata.resourceVersion)

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        resource = self._resource(api_version, kind)
        API_REQUESTS.labels("patch", kind).inc()
        resource.patch(name=name, namespace=namespace, body=body, content_type="application/merge-patch+json")

    def remove_annotations(self, namespace: str, name: str, keys: list[str], resource_version: str) -> None:
        """Remove consumed command annotations, only if the object is still at `resource_version`: a command
        written again in between is never removed unseen (ConflictError instead; the next pass retries)."""
        body = {"metadata": {"resourceVersion": resource_version, "annotations": dict.fromkeys(keys)}}
        self.merge_patch(API_VERSION, KIND, namespace, name, body)

    def has_kind(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves this kind (e.g. the Gateway API CRDs are installed)."""
        try:
            self._resource(api_version, kind)
        except ResourceNotFoundError:
            return False
        return True

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        API_REQUESTS.labels("get", kind).inc()
        try:
            return self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node, as the API server returns it (for the capacity check: labels, taints, allocatable,
        conditions). Raises ForbiddenError when the operator may not list nodes."""
        return self._list("v1", "Node")

    def list_pods_on_nodes(self) -> list[dict[str, Any]]:
        """Every pod in the cluster that has not finished (Succeeded or Failed pods are filtered by the API
        server), for what they request of the nodes they are bound to. Raises ForbiddenError when the
        operator may not list pods in all namespaces."""
        return self._list("v1", "Pod", field_selector=FINISHED_PODS_EXCLUDED)

    def list_labelled(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The objects of one kind in one namespace that match a label selector, as plain JSON."""
        API_REQUESTS.labels("list", kind).inc()
        response = self._resource(api_version, kind).get(
            namespace=namespace, label_selector=label_selector, serialize=False
        )
        items = json.loads(response.data).get("items")
        return [item for item in items or [] if isinstance(item, dict)]

    def list_in(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of one kind in one namespace, as plain JSON (the ReferenceGrants of a route's namespace)."""
        API_REQUESTS.labels("list", kind).inc()
        response = self._resource(api_version, kind).get(namespace=namespace, serialize=False)
        items = json.loads(response.data).get("items")
        return [item for item in items or [] if isinstance(item, dict)]

    def _list(self, api_version: str, kind: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        """A cluster-wide list, read as plain JSON (camelCase dicts, as `read` returns): no ResourceInstance
        wrapping of every field of every object, which on a large cluster costs more than the request."""
        API_REQUESTS.labels("list", kind).inc()
        response = self._resource(api_version, kind).get(field_selector=field_selector, serialize=False)
        items = json.loads(response.data).get("items")
        return [item for item in items or [] if isinstance(item, dict)]

    def read_secret(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret (the Prometheus bearer token); the value is never logged.

        Raises SecretError (missing, forbidden, no such key, not base64 text), never an API exception.
        """
        secret, where = self._read_core("Secret", namespace, name, SecretError)
        data = secret.data.to_dict() if secret.data is not None else {}
        if not data.get(key):
            raise SecretError(f"{where}: has no key {key}")
        try:
            return base64.b64decode(data[key], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise SecretError(f"{where}: key {key} is not base64-encoded text") from None

    def read_optional_secret(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret that may not exist (a namespace's notification targets): None when the Secret or
        the key is absent; SecretError when it is forbidden or not text. The value is never logged."""
        API_REQUESTS.labels("get", "Secret").inc()
        try:
            secret = self._resource("v1", "Secret").get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        except ForbiddenError:
            raise SecretError(f"Secret {namespace}/{name}: forbidden: the operator may not read it (RBAC)") from None
        value = (secret.data.to_dict() if secret.data is not None else {}).get(key)
        if not value:
            return None
        try:
            return base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise SecretError(f"Secret {namespace}/{name}: key {key} is not base64-encoded text") from None

    def _read_core(self, kind: str, namespace: str, name: str, error: type[Exception]) -> tuple[Any, str]:
        """A core/v1 object the user names, and how to name it in messages; a missing or forbidden one raises
        `error` with that said (never an API exception)."""
        API_REQUESTS.labels("get", kind).inc()
        where = f"{kind} {namespace}/{name}"
        try:
            return self._resource("v1", kind).get(name=name, namespace=namespace), where
        except NotFoundError:
            raise error(f"{where}: not found") from None
        except ForbiddenError:
            raise error(f"{where}: forbidden: the operator may not read it (RBAC)") from None

    def read_config_map(self, namespace: str, name: str, key: str) -> str:
        """One key of a ConfigMap (the output-equivalence prompts); the value is never logged.

        Raises ConfigMapError (missing, forbidden, no such key), never an API exception.
        """
        config_map, where = self._read_core("ConfigMap", namespace, name, ConfigMapError)
        data = config_map.data.to_dict() if config_map.data is not None else {}
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ConfigMapError(f"{where}: has no key {key}")
        return str(data[key])

    def post_event(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event on the SpeculativeDeployment (what `kubectl describe sdep` shows): a new one, or, when it
        said the same (or ten similar things) lately, that Event's count and lastTimestamp patched
        (`controller.events`, as client-go's EventRecorder aggregates)."""
        meta = involved["metadata"]
        who = Involved(meta["namespace"], meta["name"], str(meta.get("uid") or ""))
        message = message[:EVENT_MESSAGE_LIMIT]
        write = self.events.correlate(who, event_type, reason, message, datetime.now(UTC))
        if not write.create:
            try:
                self._patch_event(who, write)
                return
            except NotFoundError:  # expired (the API server's event TTL) or deleted: say it anew
                self.events.forget(who, event_type, reason, write.message)
                write = self.events.correlate(who, event_type, reason, message, datetime.now(UTC))
        API_REQUESTS.labels("create", "Event").inc()
        self._resource("v1", "Event").create(
            namespace=who.namespace,
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": write.name, "namespace": who.namespace},
                "involvedObject": {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": who.name,
                    "namespace": who.namespace,
                    "uid": meta.get("uid"),
                },
                "type": event_type,
                "reason": reason,
                "message": write.message[:EVENT_MESSAGE_LIMIT],
                "firstTimestamp": write.first_timestamp.isoformat(),
                "lastTimestamp": write.last_timestamp.isoformat(),
                "count": write.count,
                "source": {"component": "specfleet"},
                "reportingComponent": "specfleet",
            },
        )

    def _patch_event(self, who: Involved, write: EventWrite) -> None:
        body = {
            "count": write.count,
            "lastTimestamp": write.last_timestamp.isoformat(),
            "message": write.message[:EVENT_MESSAGE_LIMIT],
        }
        API_REQUESTS.labels("patch", "Event").inc()
        self._resource("v1", "Event").patch(
            name=write.name, namespace=who.namespace, body=body, content_type="application/merge-patch+json"
        )
