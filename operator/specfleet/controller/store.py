"""In-memory copies of what the watches saw, indexed by the SpeculativeDeployment they belong to."""

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from specfleet.api.vocabulary import LABEL_NAME

Key = tuple[str, str]  # (namespace, name) of a SpeculativeDeployment
Raw = dict[str, Any]
PREFLIGHT_POD = "PreflightPod"
"""The kind under which the pods of preflight Jobs are kept, apart from the serving pods."""


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def owner_key(obj: Mapping[str, Any], label: str = LABEL_NAME) -> Key | None:
    """The SpeculativeDeployment a child belongs to, from its `specfleet.io/name` label (or `label`: preflight
    pods name their fleet in `specfleet.io/preflight`, so that the fleet's Service never selects them)."""
    meta = obj.get("metadata", {})
    name = (meta.get("labels") or {}).get(label)
    return (meta.get("namespace", ""), name) if name else None


def trimmed(obj: Mapping[str, Any]) -> Raw:
    """What the operator keeps of a watched object: all but `metadata.managedFields` (server-side apply's
    bookkeeping, often the largest part of a pod or a Deployment, never read here). Copied one level down
    only: each watch event brings a fresh object, and nothing in the operator writes to one it stored."""
    meta = obj.get("metadata") or {}
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class Store:
    """SpeculativeDeployments and their children as last seen; written only by watch events."""

    def __init__(self) -> None:
        self.sdeps: dict[Key, Raw] = {}
        self._children: dict[str, dict[Key, dict[str, Raw]]] = defaultdict(lambda: defaultdict(dict))

    def put_sdep(self, obj: Mapping[str, Any], deleted: bool) -> Key:
        key = key_of(obj)
        if deleted:
            self.sdeps.pop(key, None)
        else:
            self.sdeps[key] = trimmed(obj)
        return key

    def put_child(self, kind: str, obj: Mapping[str, Any], deleted: bool, label: str = LABEL_NAME) -> Key | None:
        """Record a Deployment, Service, Job or Pod; returns the owner's key so it can be reconciled."""
        owner = owner_key(obj, label)
        if owner is None:
            return None
        name = obj.get("metadata", {}).get("name", "")
        bucket = self._children[kind][owner]
        if deleted:
            bucket.pop(name, None)
        else:
            bucket[name] = trimmed(obj)
        return owner

    def forget(self, key: Key) -> None:
        """Drop an object and its children (another shard's: `controller.shards`)."""
        self.sdeps.pop(key, None)
        for kinds in self._children.values():
            kinds.pop(key, None)

    def has_child(self, kind: str, owner: Key, name: str) -> bool:
        return name in self._children[kind].get(owner, {})

    def children(self, kind: str, owner: Key) -> dict[str, Raw]:
        """name -> object of one kind belonging to `owner`."""
        return dict(self._children[kind].get(owner, {}))
