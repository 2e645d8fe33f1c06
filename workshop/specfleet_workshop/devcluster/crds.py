"""Apply CustomResourceDefinitions to a dev cluster and wait until the API server serves them.

`kubectl wait --for=condition=Established` is not a wait for a CRD created a moment ago: until the API
server's controllers write the first condition, `.status.conditions` is null and kubectl exits 1 at once
(".status.conditions accessor error: <nil> is of the type <nil>"): 1 of 18 waits, six at a time on a fresh
cluster, and a CI run's tests. So this polls the conditions, and counts "none yet" as "not yet".
"""

import json
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from specfleet_workshop.devcluster.cluster import ClusterError, ClusterInfo

ESTABLISH_TIMEOUT = 120.0
"""Seconds: a busy machine's fresh API server can refuse the first asks."""
POLL_INTERVAL = 0.25


def is_established(crd: Mapping[str, Any]) -> bool:
    """Whether the API server serves this CRD; a CRD without conditions yet is not served yet."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def crd_names(manifest: str) -> list[str]:
    """The names of the CustomResourceDefinitions in a multi-document YAML manifest."""
    return [
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all(manifest)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def apply_crds(cluster: ClusterInfo, manifests: Iterable[Path | str], timeout: float = ESTABLISH_TIMEOUT) -> list[str]:
    """Apply CRD manifests (files, or YAML text) server-side, idempotently, and wait until every CRD in them is
    Established. Returns the CRDs' names."""
    kubectl = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig)]
    names: list[str] = []
    for manifest in manifests:
        text = manifest.read_text() if isinstance(manifest, Path) else manifest
        in_manifest = crd_names(text)
        applied = subprocess.run(
            [*kubectl, "apply", "--server-side", "--force-conflicts", "-f", "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if applied.returncode != 0:
            raise ClusterError(f"applying {', '.join(in_manifest)} failed: {applied.stderr.strip()}")
        names += in_manifest
    wait_established(cluster, names, timeout)
    return names


def wait_established(cluster: ClusterInfo, names: list[str], timeout: float = ESTABLISH_TIMEOUT) -> None:
    """Poll the named CRDs until every one is Established; a refused or failed read counts as not yet."""
    if not names:
        return
    command = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "get", "-o", "json"]
    command += [f"crd/{name}" for name in names]
    deadline = time.monotonic() + timeout
    while True:
        got = subprocess.run(command, capture_output=True, text=True, timeout=30)
        waiting = list(names) if got.returncode != 0 else _not_established(json.loads(got.stdout), names)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"CRDs not Established within {timeout:.0f}s: {', '.join(waiting)}"
                + (f" ({got.stderr.strip()[-500:]})" if got.returncode != 0 else "")
            )
        time.sleep(POLL_INTERVAL)


def _not_established(listed: Mapping[str, Any], names: list[str]) -> list[str]:
    """The names not yet Established in `kubectl get -o json` output (one object, or a List of them)."""
    items = listed["items"] if listed.get("kind") == "List" else [listed]
    served = {item["metadata"]["name"] for item in items if is_established(item)}
    return [name for name in names if name not in served]
