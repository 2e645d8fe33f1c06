"""Names shared by the suite's conftests: how the workers of one pytest-xdist run find each other."""

RUN_DIR = "SPECFLEET_TEST_RUN_DIR"
"""Environment variable naming a directory shared by the controller and every worker of one run."""
CLUSTER_STARTED = "cluster-started"
"""File in the run directory naming the dev cluster's state directory when this run started the cluster."""
