"""The one place where the versions of the dev cluster's upstream programs are pinned.

Every binary is built from the Go module proxy at exactly these versions, so a test run on any
machine talks to the same API server, scheduler and kwok. Bump a pin here and the binary cache,
which is keyed by version, rebuilds on the next `specfleet dev up` or `specfleet dev build`.
"""

from typing import Final

KUBERNETES_VERSION: Final = "v1.37.2"
"""kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (module k8s.io/kubernetes)."""

ETCD_VERSION: Final = "v3.6.16"
"""etcd server (module go.etcd.io/etcd/server/v3); Kubernetes 1.37 wants etcd 3.6."""

KWOK_VERSION: Final = "v0.8.0"
"""kwok controller (module sigs.k8s.io/kwok); also the source of the Stage YAMLs that fake pod life."""

HELM_VERSION: Final = "v3.22.0"
"""helm v3 (module helm.sh/helm/v3), for charts installed into the dev cluster."""

ARGO_ROLLOUTS_VERSION: Final = "v1.10.1"
"""Argo Rollouts controller (module github.com/argoproj/argo-rollouts), a peer for the side-by-side
benchmark only. v1.10.2 declares go 1.26.10, newer than a local 1.26.8; v1.10.1 builds with it."""

FLAGGER_VERSION: Final = "v1.44.0"
"""Flagger (module github.com/fluxcd/flagger), a peer for the side-by-side benchmark only. The proxy lists
only v1.36.1, but an explicit query finds v1.44.0."""

DISTRIBUTION_VERSION: Final = "v3.1.2"
"""CNCF Distribution's `registry` (module github.com/distribution/distribution/v3): the OCI registry a release is
pushed to on loopback, standing in for a public one (docs/release.md)."""

MINIMUM_GO: Final = (1, 26)
"""All four modules above declare `go 1.26.0`; with GOTOOLCHAIN=local an older go cannot build them."""
