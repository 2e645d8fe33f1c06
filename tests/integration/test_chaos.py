"""The short version of benchmarks/chaos.py on the dev cluster: one canary of each kind while faults strike
(operator leader and standby SIGKILLed, Prometheus stopped, children edited and deleted by hand, a second
writer racing the operator, a node of a canary deleted, a fleet's scrapes answering 500s or garbage); every
canary ends as it would undisturbed.

API server and etcd restarts run only in the benchmark (`--component-restarts`): they would disturb the
other tests sharing this cluster.
"""

import sys
from pathlib import Path

import pytest

from specfleet.devcluster.cluster import ClusterInfo

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import chaos

pytestmark = pytest.mark.integration


@pytest.mark.cluster_wide  # it stops the shared Prometheus and deletes nodes other tests' pods run on
@pytest.mark.timeout(1200)
def test_a_short_chaos_run_keeps_every_invariant(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path
) -> None:
    figures = chaos.play(chaos.parse_args(["--quick", "--seed", "3"]), dev_cluster, namespace, tmp_path)
    assert figures["invariant_violations"] == [], figures
    assert figures["outcomes_matching"] == f"{len(chaos.EXPECTED)}/{len(chaos.EXPECTED)}", figures
    not_struck = set(chaos.FAULTS) - set(figures["faults"])  # every kind struck while the canaries ran
    assert not not_struck, (not_struck, figures["faults_not_struck"], figures["seconds"])
