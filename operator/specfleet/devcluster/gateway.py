"""Gateway API's HTTPRoute CRD on a dev cluster, for fleets whose traffic an HTTPRoute splits.

The CRD comes from the Gateway API Go module at a pinned version, through the Go module proxy (where Go
projects get it, and the one place these machines can), cached in Go's module cache. There is no gateway
controller: the route is an object whose weights specfleet sets and tests read.
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from specfleet.devcluster.cluster import ClusterError, ClusterInfo
from specfleet.devcluster.crds import apply_crds

GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.3"
"""v1.7 needs go 1.27."""
HTTPROUTE_CRD = "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"


def httproute_crd_file() -> Path:
    """The HTTPRoute CRD's file in the Go module cache (downloaded the first time)."""
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
    return Path(json.loads(download.stdout)["Dir"]) / HTTPROUTE_CRD


def install_httproute_crd(cluster: ClusterInfo) -> None:
    """Apply the HTTPRoute CRD (server-side, idempotent) and wait until the API server serves it."""
    apply_crds(cluster, [httproute_crd_file()])
