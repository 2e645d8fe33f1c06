"""The short version of benchmarks/chaos.py on the dev cluster: one canary of each kind while faults strike
(operator leader and standby SIGKILLed, Prometheus stopped, children edited and deleted by hand, a second
writer racing the operator, a node of a canary deleted, a fleet's scrapes answering 500s or garbage); every
canary ends as it would undisturbed.

The Prometheus it stops and the nodes it deletes are the run's own, so it runs beside the other tests on the
shared dev cluster; API server and etcd restarts run only in the benchmark (`--component-restarts`).
"""

from pathlib import Path

import pytest

from specfleet_workshop.devcluster.cluster import ClusterInfo

import chaos

pytestmark = pytest.mark.integration


@pytest.mark.timeout(1200)
def test_a_short_chaos_run_keeps_every_invariant(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path
) -> None:
    # with the product's default fallbacks; a fleet whose Prometheus is gone waits 10 minutes for its pause, so
    # that kind is left to the benchmark
    kinds = [kind for kind in chaos.EXPECTED if kind not in chaos.PAUSES]
    args = chaos.parse_args(["--quick", "--seed", "3", "--kinds", ",".join(kinds)])
    figures = chaos.play(args, dev_cluster, namespace, tmp_path)
    assert figures["invariant_violations"] == [], figures
    assert figures["outcomes_matching"] == f"{len(kinds)}/{len(kinds)}", figures
    not_struck = set(chaos.FAULTS) - set(figures["faults"])  # every kind struck while the canaries ran
    assert not not_struck, (not_struck, figures["faults_not_struck"], figures["seconds"])
    assert all(n.startswith((f"chaos-{namespace}-", "full-c")) for n in figures["deleted_nodes"]), figures  # its own
