"""helm and kubectl on the dev cluster, for the tests of the chart (install, upgrade, RBAC)."""

import subprocess
from pathlib import Path

import pytest
import yaml

from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specfleet"


def run(
    command: list[str], stdin: str | None = None, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(command[:6])} ... did not finish in {timeout:.0f}s", pytrace=False)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command[:4])} ... failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


class Cluster:
    """helm and kubectl against the dev cluster, as admin or with another kubeconfig."""

    def __init__(self, info: ClusterInfo) -> None:
        self.info = info

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """An install or upgrade leaves the CRD to `specfleet dev up` (`crds.install=false`) unless `args` say
        otherwise: the CRD is cluster-wide and releases of parallel tests would each claim it."""
        if args and args[0] in ("install", "upgrade") and not any("crds.install" in arg for arg in args):
            args = (*args, "--set", "crds.install=false")
        if args and args[0] == "template":  # the pinned helm's own default is Kubernetes 1.20 (tests/unit/repokit.py)
            args = (*args, "--kube-version", KUBERNETES_VERSION)
        return run([str(self.info.helm), "--kubeconfig", str(self.info.kubeconfig), *args], check=check)

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        config = str(kubeconfig or self.info.kubeconfig)
        return run([str(self.info.kubectl), "--kubeconfig", config, *args], stdin=stdin, check=check)

    def exists(self, *resource: str) -> bool:
        return self.kubectl("get", *resource, "--ignore-not-found", "-o", "name").stdout.strip() != ""

    def service_account_kubeconfig(self, namespace: str, account: str, path: Path) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount (a bound token, as a pod would get)."""
        token = self.kubectl("-n", namespace, "create", "token", account, "--duration", "1h").stdout.strip()
        admin = yaml.safe_load(self.info.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
            "current-context": account,
        }
        path.write_text(yaml.safe_dump(config))
        return path
