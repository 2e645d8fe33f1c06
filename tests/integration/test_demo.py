"""`specfleet demo` runs unattended and tells its story: Healthy, Promoted, RolledBack."""

import os
import subprocess
import sys

import pytest

from specfleet_workshop.devcluster.cluster import ClusterInfo

pytestmark = pytest.mark.integration


@pytest.mark.timeout(2700)
def test_the_demo_plays_its_three_acts(dev_cluster: ClusterInfo) -> None:
    environment = {**os.environ, "SPECFLEET_STATE_DIR": str(dev_cluster.state_dir), "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "specfleet.cli", "demo"], capture_output=True, text=True, timeout=2600, env=environment
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split(" summary ", 1)[1].split("\n", 1)[1]  # the lines after the summary rule
    assert [line.split()[0] for line in summary.strip().splitlines()[:3]] == ["Healthy", "Promoted", "RolledBack"]
    assert "acceptance alpha" in result.stdout and "upper bound < 0.60" in result.stdout  # the evidence, with its bound
    assert "left running" in result.stdout  # it reused the session's cluster and left it up
