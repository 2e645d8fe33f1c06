"""Pods from the Kubernetes API: list, then watch; relist after any error.

Hands each pod (as API JSON) and its node's labels to a sink; knows nothing about simulation. By default
only the pods of SpeculativeDeployments; with `label_selector=None` every pod of the scope, for a sink
that picks vLLM pods whoever owns them (the simulator, so Argo Rollouts and Flagger canaries are served too).
"""

import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from specfleet.api.vocabulary import LABEL_NAME

log = logging.getLogger(__name__)

WATCH_SECONDS = 10
"""Server-side watch timeout: bounds how long `stop()` waits for a watch to notice."""
RETRY_SECONDS = 1.0


class PodSink(Protocol):
    def upsert_pod(self, pod: dict[str, Any], node_labels: dict[str, str]) -> None: ...

    def remove_pod(self, namespace: str, name: str) -> None: ...

    def replace_pods(self, namespace: str | None, pods: list[tuple[dict[str, Any], dict[str, str]]]) -> None: ...


class KubePodSource:
    """One watch thread per namespace (or one for all namespaces), feeding `sink`."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        namespaces: Sequence[str],
        sink: PodSink,
        label_selector: str | None = LABEL_NAME,
    ) -> None:
        self.api_client = api_client
        self.label_selector = label_selector
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.scopes: list[str | None] = list(namespaces) or [None]
        self.sink = sink
        self._stop = threading.Event()
        self._node_labels: dict[str, dict[str, str]] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for scope in self.scopes:
            thread = threading.Thread(target=self._run, args=(scope,), name=f"sim-watch-{scope or 'all'}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    def _node(self, pod: dict[str, Any]) -> dict[str, str]:
        """The node's labels (cached: the GPU product of a node does not change)."""
        name = (pod.get("spec") or {}).get("nodeName")
        if not name:
            return {}
        if name not in self._node_labels:
            try:
                metadata = self.core.read_node(name).metadata
                self._node_labels[name] = dict((metadata and metadata.labels) or {})
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                log.warning("cannot read node %s: %s", name, error)
                return {}
        return self._node_labels[name]

    def _list(self, namespace: str | None, **kwargs: Any) -> Any:
        if self.label_selector is not None:
            kwargs["label_selector"] = self.label_selector
        if namespace is None:
            return self.core.list_pod_for_all_namespaces(**kwargs)
        return self.core.list_namespaced_pod(namespace, **kwargs)

    def _run(self, namespace: str | None) -> None:
        while not self._stop.is_set():
            try:
                self._list_and_watch(namespace)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                log.warning("pod watch (%s) failed, relisting: %s", namespace or "all namespaces", error)
                self._stop.wait(RETRY_SECONDS)

    def _list_and_watch(self, namespace: str | None) -> None:
        listing = self._list(namespace)
        pods = [self.api_client.sanitize_for_serialization(item) for item in listing.items]
        self.sink.replace_pods(namespace, [(pod, self._node(pod)) for pod in pods])
        version = listing.metadata.resource_version
        while not self._stop.is_set():
            stream = kubernetes.watch.Watch().stream(
                self._list_for_watch(namespace), resource_version=version, timeout_seconds=WATCH_SECONDS
            )
            for event in stream:
                if self._stop.is_set():
                    return
                pod = event["object"]
                metadata = pod.get("metadata") or {}
                version = metadata.get("resourceVersion", version)
                if event["type"] == "DELETED":
                    self.sink.remove_pod(metadata.get("namespace", ""), metadata.get("name", ""))
                else:
                    self.sink.upsert_pod(pod, self._node(pod))

    def _list_for_watch(self, namespace: str | None) -> Any:
        """The list function `Watch.stream` calls, bound to this scope and the label selector.

        It has no return annotation or docstring, so the watch yields pods as plain API JSON (and turns an
        ERROR event, such as 410 Gone, into an ApiException that makes `_run` relist).
        """

        def list_pods(**kwargs: Any) -> Any:
            return self._list(namespace, **kwargs)

        return list_pods
