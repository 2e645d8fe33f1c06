"""Gateway API's HTTPRoute and ReferenceGrant CRDs on a dev cluster, for fleets whose traffic an HTTPRoute splits, and
the Gateway API Inference Extension's InferencePool CRD (v1), for routes whose backends are InferencePools.

The CRDs come from the Go modules of Gateway API and its Inference Extension at pinned versions, through the Go
module proxy (where Go projects get them, and the one place these machines can), cached in Go's module cache.
There is no gateway controller and no endpoint picker: the route and the pools are objects specfleet writes and
tests read (the simulator's stand-in gateway routes by them); a ReferenceGrant is how a route's namespace lets
fleets of another namespace set them.
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from specfleet_workshop.devcluster.cluster import ClusterError, ClusterInfo
from specfleet_workshop.devcluster.crds import apply_crds

GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.3"
"""v1.7 needs go 1.27."""
HTTPROUTE_CRD = "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"
REFERENCEGRANT_CRD = "config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml"
INFERENCE_EXTENSION = "sigs.k8s.io/gateway-api-inference-extension@v1.6.2"
"""The published v1 API of InferencePool (`inference.networking.k8s.io/v1`)."""
INFERENCEPOOL_CRD = "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"


def module_dir(module: str) -> Path:
    """A pinned Go module (`path@version`) in the Go module cache (downloaded the first time)."""
    with tempfile.TemporaryDirectory() as workdir:
        download = subprocess.run(
            ["go", "mod", "download", "-json", module],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=workdir,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    if download.returncode != 0:
        raise ClusterError(f"go mod download {module} failed: {download.stderr.strip() or download.stdout}")
    return Path(json.loads(download.stdout)["Dir"])


def install_httproute_crd(cluster: ClusterInfo) -> None:
    """Apply the HTTPRoute and ReferenceGrant CRDs (server-side, idempotent) and wait until the API server serves
    them: a fleet whose route is in another namespace needs a ReferenceGrant there."""
    module = module_dir(GATEWAY_API)
    apply_crds(cluster, [module / HTTPROUTE_CRD, module / REFERENCEGRANT_CRD])


def install_inference_pool_crd(cluster: ClusterInfo) -> None:
    """Apply the InferencePool CRD of the Inference Extension's published v1 API (server-side, idempotent) and wait
    until the API server serves it. A stand-in: no endpoint picker runs (the simulator's gateway picks the pod)."""
    apply_crds(cluster, [module_dir(INFERENCE_EXTENSION) / INFERENCEPOOL_CRD])
