"""Where the repository's files are, for unit tests at any depth under tests/unit."""

from pathlib import Path

from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
EXAMPLES = ROOT / "examples"
"""The example SpeculativeDeployments."""
KUBE = ("--kube-version", KUBERNETES_VERSION)
"""For `helm template`: the dev cluster's Kubernetes, which the chart's `kubeVersion` admits. The pinned helm is
built without Helm's k8sVersion ldflags, so without this it renders for its fallback, Kubernetes 1.20."""
