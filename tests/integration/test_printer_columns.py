"""`kubectl get sdep` on a real API server prints the CRD's columns from a status the rollout code filled."""

import json
import re
import subprocess
from datetime import UTC, datetime

import pytest

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import Analysis, Measurements, Phase, SpeculativeDeploymentStatus, Verdict
from specfleet.rollout.columns import with_columns
from specfleet_workshop.devcluster.cluster import ClusterInfo

pytestmark = pytest.mark.integration

NAME = "columns"
SPEC = {"model": {"name": "m/target"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}
"""Two default steps, one replica; the canary's config is k=3 against stable's default k=5."""


def kubectl(cluster: ClusterInfo, namespace: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def printed(output: str) -> dict[str, str]:
    """kubectl's table of one object as {HEADER: cell} (columns are set apart by two spaces or more)."""
    header, row = output.strip().splitlines()
    return dict(zip(re.split(r"\s{2,}", header), re.split(r"\s{2,}", row), strict=True))


def canary_status() -> SpeculativeDeploymentStatus:
    """A canary at its second step with two Ready pods for one replica, judged once; columns filled by the rollout."""
    status = SpeculativeDeploymentStatus(
        phase=Phase.PROGRESSING,
        stable_revision="a1b2c3d4e5",
        stable_serving={"speculative": {"method": "ngram"}},
        canary_revision="f6a7b8c9d0",
        current_step=1,
        canary_weight=50,
        replicas=2,
        last_analysis=Analysis(
            time=datetime.now(UTC),
            revision="f6a7b8c9d0",
            step=1,
            verdict=Verdict.PASS,
            canary=Measurements(acceptance_alpha=0.71, token_latency_p95_seconds=0.01234),
        ),
    )
    return with_columns(SpeculativeDeploymentSpec.model_validate(SPEC), status)


def test_kubectl_get_shows_step_ready_config_and_p95_in_ms_and_the_revisions_when_wide(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str
) -> None:
    document = {"apiVersion": "specfleet.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": NAME}}
    kubectl(dev_cluster, namespace, "apply", "-f", "-", stdin=json.dumps({**document, "spec": SPEC}))
    status = canary_status().model_dump(mode="json", by_alias=True, exclude_none=True)
    patch = json.dumps({"status": status})
    kubectl(dev_cluster, namespace, "patch", "sdep", NAME, "--subresource=status", "--type=merge", "-p", patch)

    table = printed(kubectl(dev_cluster, namespace, "get", "sdep", NAME))
    assert list(table) == ["NAME", "PHASE", "STEP", "WEIGHT", "READY", "CONFIG", "ALPHA", "P95-TOKEN-MS", "AGE"]
    assert table["PHASE"] == "Progressing" and table["STEP"] == "2/2" and table["WEIGHT"] == "50"
    assert table["READY"] == "2/1" and table["CONFIG"] == "ngram k=5 -> ngram k=3"
    assert table["ALPHA"] == "0.71" and table["P95-TOKEN-MS"] == "12.34"

    wide = printed(kubectl(dev_cluster, namespace, "get", "sdep", NAME, "-o", "wide"))
    assert (wide["STABLE"], wide["CANARY"]) == ("a1b2c3d4e5", "f6a7b8c9d0")
    assert {k: v for k, v in wide.items() if k not in ("STABLE", "CANARY", "AGE")} == {
        k: v for k, v in table.items() if k != "AGE"
    }
