"""In-memory copies of what the watches saw, indexed by the SpeculativeDeployment they belong to."""

import copy
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from specfleet.api.vocabulary import LABEL_NAME

Key = tuple[str, str]  # (namespace, name) of a SpeculativeDeployment
Raw = dict[str, Any]


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def owner_key(obj: Mapping[str, Any]) -> Key | None:
    """The SpeculativeDeployment a child belongs to, from its `specfleet.io/name` label."""
    meta = obj.get("metadata", {})
    name = (meta.get("labels") or {}).get(LABEL_NAME)
    return (meta.get("namespace", ""), name) if name else None


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
            self.sdeps[key] = copy.deepcopy(dict(obj))
        return key

    def put_child(self, kind: str, obj: Mapping[str, Any], deleted: bool) -> Key | None:
        """Record a Deployment, Service or Pod; returns the owner's key so it can be reconciled."""
        owner = owner_key(obj)
        if owner is None:
            return None
        name = obj.get("metadata", {}).get("name", "")
        bucket = self._children[kind][owner]
        if deleted:
            bucket.pop(name, None)
        else:
            bucket[name] = copy.deepcopy(dict(obj))
        return owner

    def children(self, kind: str, owner: Key) -> dict[str, Raw]:
        """name -> object of one kind belonging to `owner`."""
        return dict(self._children[kind].get(owner, {}))
