"""Prometheus file_sd targets for the pods an engine serves, labelled as a PodMonitor would label them."""

import os
import tempfile
from pathlib import Path
from typing import Any

from specfleet.metrics import names
from specfleet.metrics.names import prometheus_label
from specfleet.render.argv import VLLM_PORT
from specfleet_workshop.fleetpods.pods import PodInfo

PEER_TARGET_LABELS = ("app", "rollouts-pod-template-hash")
"""Pod labels kept as target labels besides specfleet's, so other controllers' PromQL can tell canary from
stable: Argo Rollouts' `rollouts-pod-template-hash` (canary and stable ReplicaSets differ in it), and the
`app` label that Flagger's kubernetes provider sets to `<target>` on canary pods and `<target>-primary`
on primary pods. A PodMonitor with these `podTargetLabels` gives the same labels."""


def target_group(pod: PodInfo, address: str, path: str) -> dict[str, Any]:
    """A file_sd target group for one pod, with the labels a PodMonitor with podTargetLabels gives.

    `path` is where `address` serves the pod's metrics: the pod's own path on the simulator, `/metrics` on a
    real vLLM server.
    """
    labels = {
        "__metrics_path__": path,
        names.NAMESPACE: pod.namespace,
        names.POD: pod.name,
        "container": "vllm",
        "endpoint": "http",
        "instance": f"{pod.pod_ip}:{VLLM_PORT}" if pod.pod_ip else pod.name,
    }
    for label in (*names.POD_TARGET_LABELS, *PEER_TARGET_LABELS):
        if label in pod.labels:
            labels[prometheus_label(label)] = pod.labels[label]
    return {"targets": [address], "labels": labels}


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so Prometheus never reads half a file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
