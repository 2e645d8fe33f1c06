"""The peers for benchmarks/peers.py: Argo Rollouts' and Flagger's binaries (built into the project's cache
when missing) and CRDs, and the command that runs each controller out of cluster."""

import sys
from pathlib import Path
from typing import Any

from benchkit import free_port


def peer_binaries() -> tuple[dict[str, Path], Path, Path]:
    """The peers' binaries (built when missing) and their CRD directories, from the project's build cache."""
    from rich.console import Console

    from specfleet_workshop.cachedir import cache_root
    from specfleet_workshop.devcluster.binaries import PEERS
    from specfleet_workshop.devcluster.build import GoBuilder, build_groups

    cache = cache_root()
    binaries = GoBuilder(cache, Console(stderr=True)).ensure(list(PEERS))
    groups = build_groups("")
    return binaries, groups["argo-rollouts"].extra_files_dir(cache), groups["flagger"].extra_files_dir(cache)


def install_peer_crds(cluster: Any, argo_crds: Path, flagger_crds: Path) -> None:
    """Apply Argo Rollouts' and Flagger's CRDs and wait until every CRD is Established."""
    from specfleet_workshop.devcluster.crds import apply_crds

    apply_crds(cluster, [*sorted(argo_crds.glob("*.yaml")), flagger_crds / "crd.yaml"])


def controller_command(controller: str, binaries: dict[str, Path], cluster: Any, namespace: str) -> tuple[
    list[str], str]:  # fmt: skip
    """How each controller runs out of cluster for one namespace, at its defaults, and the URL that answers
    once it serves."""
    kubeconfig = str(cluster.kubeconfig)
    port = free_port()
    if controller == "specfleet":
        return [sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "",
                "--kubeconfig", kubeconfig, "--prometheus-url", cluster.prometheus_url, "--workers", "8",
                "--metrics-port", str(port)], f"http://127.0.0.1:{port}/metrics"  # fmt: skip
    if controller == "argo":
        return [str(binaries["rollouts-controller"]), "--kubeconfig", kubeconfig, "--namespaced", "--namespace",
                namespace, "--leader-elect=false", "--metricsPort", str(free_port()), "--healthzPort", str(port),
                "--loglevel", "info"], f"http://127.0.0.1:{port}/healthz"  # fmt: skip
    return [str(binaries["flagger"]), "-kubeconfig", kubeconfig, "-namespace", namespace, "-mesh-provider",
            "kubernetes", "-metrics-server", cluster.prometheus_url, "-port", str(port), "-log-level", "info"], \
        f"http://127.0.0.1:{port}/healthz"  # fmt: skip
