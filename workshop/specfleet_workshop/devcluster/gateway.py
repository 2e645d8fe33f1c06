"""Gateway API's HTTPRoute and ReferenceGrant CRDs on a dev cluster, for fleets whose traffic an HTTPRoute splits.

The CRDs come from the Gateway API Go module at a pinned version, through the Go module proxy (where Go
projects get it, and the one place these machines can), cached in Go's module cache. There is no gateway
controller: the route is an object whose weights specfleet sets and tests read; a ReferenceGrant is how a
route's namespace lets fleets of another namespace set them.
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


def gateway_api_dir() -> Path:
    """The pinned Gateway API module in the Go module cache (downloaded the first time)."""
    with tempfile.TemporaryDirectory() as workdir:
        download = subprocess.run(
            ["go", "mod", "download", "-json", GATEWAY_API],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=workdir,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    if download.returncode != 0:
        raise ClusterError(f"go mod download {GATEWAY_API} failed: {download.stderr.strip() or download.stdout}")
    return Path(json.loads(download.stdout)["Dir"])


def install_httproute_crd(cluster: ClusterInfo) -> None:
    """Apply the HTTPRoute and ReferenceGrant CRDs (server-side, idempotent) and wait until the API server serves
    them: a fleet whose route is in another namespace needs a ReferenceGrant there."""
    module = gateway_api_dir()
    apply_crds(cluster, [module / HTTPROUTE_CRD, module / REFERENCEGRANT_CRD])
