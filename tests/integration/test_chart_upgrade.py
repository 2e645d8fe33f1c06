"""`helm upgrade` carries the CRD: a release of the previous chart version, whose CRD lacks a field, upgraded to
this chart, after which the API server serves the field. On the real dev cluster, with the pinned helm.

The dev cluster's CRD was applied by `specfleet dev up`, not by Helm: the test first lets the release adopt it
as docs/install.md says (label and annotations), so it also walks the documented path from chart 0.1.0. The
previous version lacks `spec.storage`, an optional field no CEL rule reads and few tests write; the CRD is re-applied
from crds/ afterwards whatever happens.
"""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from specfleet_workshop import chartgen
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.crds import apply_crds

from chartkit import CHART, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("chart_crd")]

CRD_NAME = "speculativedeployments.specfleet.io"
NEW_FIELD = "storage"
CRD_FILE = CHART.parents[1] / "crds" / "specfleet.io_speculativedeployments.yaml"


def previous_chart(tmp_path: Path) -> Path:
    """This chart as version N-1: an earlier version number, and a CRD template without `spec.storage`."""
    chart = tmp_path / "specfleet"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    current = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    major, minor, _ = (int(part) for part in current.split("."))
    meta["version"] = f"{major}.{minor - 1}.0"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    template = chart / chartgen.CRD_TEMPLATE_FILE
    lines = template.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line == f"              {NEW_FIELD}:\n")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 16))
    template.write_text("".join(lines[:start] + lines[end:]))
    return chart


def serves_new_field(cluster: Cluster, namespace: str) -> bool:
    """Whether the API server accepts `spec.storage` under strict field validation (server-side dry run)."""
    document = yaml.safe_load((CHART.parents[1] / "examples" / "llama-8b-eagle3-mi325x.yaml").read_text())
    document["spec"][NEW_FIELD] = {"modelCacheClaim": "hf-cache"}
    document["metadata"] = {"name": "probe", "namespace": namespace}
    result = cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=json.dumps(document), check=False
    )
    if result.returncode == 0:
        return True
    assert "unknown field" in result.stderr and NEW_FIELD in result.stderr, result.stderr
    return False


@pytest.fixture
def helm_cluster(dev_cluster: ClusterInfo) -> Cluster:
    return Cluster(dev_cluster)


@pytest.fixture
def adopted_crd(helm_cluster: Cluster, namespace: str) -> Iterator[str]:
    """The CRD of crds/ (as the dev cluster's fixtures apply it), handed to a release unique to the test as
    docs/install.md says; yields the release's name. Uninstalled, and the CRD restored from crds/, afterwards."""
    cluster, release = helm_cluster, f"sf-{namespace.removeprefix('test-')}"
    apply_crds(cluster.info, [CRD_FILE])
    cluster.kubectl("label", "crd", CRD_NAME, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    ownership = [f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}"]
    cluster.kubectl("annotate", "crd", CRD_NAME, *ownership, "--overwrite")
    try:
        yield release
    finally:
        cluster.helm("uninstall", release, "-n", namespace, "--wait", "--ignore-not-found", check=False)
        cluster.kubectl("label", "crd", CRD_NAME, "app.kubernetes.io/managed-by-", check=False)
        cluster.kubectl(
            "annotate",
            "crd",
            CRD_NAME,
            "meta.helm.sh/release-name-",
            "meta.helm.sh/release-namespace-",
            "helm.sh/resource-policy-",
            check=False,
        )
        apply_crds(cluster.info, [CRD_FILE])


def test_helm_upgrade_from_the_previous_chart_serves_the_changed_crd(
    helm_cluster: Cluster, namespace: str, adopted_crd: str, tmp_path: Path
) -> None:
    cluster, release = helm_cluster, adopted_crd
    old = previous_chart(tmp_path)
    cluster.helm("install", release, str(old), "-n", namespace, "--set", "crds.install=true")
    assert not serves_new_field(cluster, namespace)

    cluster.helm("upgrade", release, str(CHART), "-n", namespace, "--reuse-values", "--set", "crds.install=true")
    assert serves_new_field(cluster, namespace)
    crd = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    history = json.loads(cluster.helm("history", release, "-n", namespace, "-o", "json").stdout)
    current = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    previous = yaml.safe_load((old / "Chart.yaml").read_text())["version"]
    assert [entry["chart"] for entry in history] == [f"specfleet-{previous}", f"specfleet-{current}"]

    cluster.helm("uninstall", release, "-n", namespace, "--wait")
    assert cluster.exists("crd", CRD_NAME)  # crds.keep: uninstalling never deletes the fleets
