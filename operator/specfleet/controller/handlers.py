"""kopf wiring: watch events fill the store and wake the queue; workers reconcile.

Only `on.event` handlers are used, never `on.create/update`, timers or daemons: those would make kopf
put a finalizer and progress annotations on every object, so deleting a SpeculativeDeployment while
the operator is down would hang. Here deletion never waits for specfleet: owner references let the
Kubernetes garbage collector remove the children.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from specfleet.api.resource import GROUP, PLURAL, VERSION
from specfleet.controller.kube import Kube, connection_info
from specfleet.controller.queue import WorkQueue
from specfleet.controller.reconciler import Reconciler
from specfleet.controller.store import Store
from specfleet.render.manifests import FIELD_MANAGER, LABEL_NAME

MANAGED = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
INITIAL_SYNC_SECONDS = 2.0
"""Give the first LIST of every watch a moment to fill the store before the first reconcile."""


@dataclass
class OperatorOptions:
    workers: int = 4
    resync_seconds: float = 300.0
    metrics_port: int | None = None
    prometheus_url: str | None = None


@dataclass
class Controller:
    """The pieces one operator process shares between its handlers and workers."""

    kube: Kube
    options: OperatorOptions = field(default_factory=OperatorOptions)
    store: Store = field(default_factory=Store)
    queue: WorkQueue = field(default_factory=WorkQueue)

    def registry(self) -> kopf.OperatorRegistry:
        """A kopf registry with this controller's handlers (explicit, so tests can run several)."""
        registry = kopf.OperatorRegistry()
        reconciler = Reconciler(
            self.kube,
            self.store,
            self.queue,
            resync_seconds=self.options.resync_seconds,
            default_prometheus_url=self.options.prometheus_url,
        )
        workers: list[asyncio.Task[None]] = []

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(**connection_info(self.kube.api_client))

        @kopf.on.startup(registry=registry)
        async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any) -> None:
            settings.posting.enabled = False  # events are posted deliberately, not from log lines
            settings.watching.server_timeout = 300
            if self.options.metrics_port is not None:
                from prometheus_client import start_http_server

                start_http_server(self.options.metrics_port)
            await asyncio.sleep(INITIAL_SYNC_SECONDS)
            for _ in range(self.options.workers):
                workers.append(asyncio.create_task(reconciler.run_worker()))
            logger.info("specfleet: %d workers started", self.options.workers)

        @kopf.on.cleanup(registry=registry)
        async def stop(**_: Any) -> None:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

        # async handlers: kopf runs them on the event loop, where the store and the queue live
        @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
        async def speculative_deployment(event: dict[str, Any], **_: Any) -> None:
            key = self.store.put_sdep(event["object"], deleted=event.get("type") == "DELETED")
            self.queue.add(key)

        def child_handler(kind: str) -> Any:
            async def on_child(event: dict[str, Any], **_: Any) -> None:
                owner = self.store.put_child(kind, event["object"], deleted=event.get("type") == "DELETED")
                if owner is not None and owner in self.store.sdeps:
                    self.queue.add(owner)

            on_child.__name__ = f"on_{kind.lower()}"
            return on_child

        kopf.on.event("apps", "v1", "deployments", labels=MANAGED, registry=registry)(child_handler("Deployment"))
        kopf.on.event("", "v1", "services", labels=MANAGED, registry=registry)(child_handler("Service"))
        kopf.on.event("", "v1", "pods", labels={LABEL_NAME: kopf.PRESENT}, registry=registry)(child_handler("Pod"))
        return registry
