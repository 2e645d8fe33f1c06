"""A stand-in for the API server behind `kubectl specfleet`'s commands, for the CLI tests that run them."""

import copy
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException


class FakeApi:
    """The SpeculativeDeployment as the API server holds it: patches are recorded and their annotations merged
    (the first `conflicts` ones are refused with 409, as after another write). `on_read`, when set, moves the
    world on before every read (an operator writing the status, or an error raised)."""

    def __init__(
        self, status: dict[str, Any], conflicts: int = 0, on_read: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"name": "llama", "namespace": "ns", "resourceVersion": "7", "generation": 1},
            "status": status,
        }
        self.patches: list[dict[str, Any]] = []
        self.conflicts = conflicts
        self.on_read = on_read
        self.reads = 0

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        self.reads += 1
        if self.on_read is not None:
            self.on_read(self.obj)
        return copy.deepcopy(self.obj)

    def patch_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str, body: Any):
        if self.conflicts:
            self.conflicts -= 1
            self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
            raise ApiException(status=409, reason="Conflict")
        self.patches.append(body)
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        self.obj["metadata"].setdefault("annotations", {}).update(annotations)
        return self.obj
