"""App teams on the real API server: with the chart installed, ServiceAccounts bound to the built-in `view`, `edit`
and `admin` ClusterRoles in one namespace get SpeculativeDeployments there through the chart's aggregated
ClusterRoles, and nothing in another namespace. `kubectl auth can-i --as` answers for every verb; `kubectl
specfleet promote` runs on an `edit` user's own token and promotes, while a `view` user's is refused and says so.
"""

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from specfleet.api.vocabulary import GROUP, PLURAL, Command
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import Fleet, Operator, healthy, sdep, wait_for
from hostile_templates import ESCALATIONS

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "specfleet"
ROLES = ("view", "edit", "admin")
FLEETS = f"{PLURAL}.{GROUP}"
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
GATE = [{"weight": 50, "pause": {}}]


def user(namespace: str, role: str) -> str:
    return f"system:serviceaccount:{namespace}:{role}-user"


def can_i(fleet: Fleet, role: str, verb: str, *resource: str, namespace: str | None = None) -> bool:
    asked = [verb, *resource, "--as", user(fleet.namespace, role), "-n", namespace or fleet.namespace]
    return fleet.kubectl("auth", "can-i", *asked, check=False).stdout.strip() == "yes"


@pytest.fixture
def app_teams(dev_cluster: ClusterInfo, crd_installed: None, fleet: Fleet) -> Iterator[str]:
    """The chart installed for this namespace only (its template policy bound here alone, as other tests' fleets
    share the cluster), and a ServiceAccount `<role>-user` bound to each built-in role here; the release name."""
    release = f"roles-{fleet.namespace.removeprefix('test-')}"
    helm = [str(dev_cluster.helm), "--kubeconfig", str(dev_cluster.kubeconfig), "-n", fleet.namespace]
    # crds.install=false: the CRD is cluster-wide, applied by the dev cluster's fixtures, not by a test's release
    install = [*helm, "install", release, str(CHART), "--set", f"watchNamespaces={{{fleet.namespace}}}"]
    install += ["--set", "crds.install=false"]
    installed = subprocess.run(install, capture_output=True, text=True, timeout=180, check=False)
    assert installed.returncode == 0, installed.stderr
    for role in ROLES:
        fleet.kubectl("create", "serviceaccount", f"{role}-user")
        fleet.kubectl("create", "rolebinding", f"{role}-user", f"--clusterrole={role}",
                      f"--serviceaccount={fleet.namespace}:{role}-user")  # fmt: skip
    wait_for("the built-in roles to aggregate the chart's rules", lambda: all(
        can_i(fleet, role, "get", FLEETS) and can_i(fleet, role, "patch", FLEETS) == (role != "view") for role in ROLES
    ))  # fmt: skip
    yield release
    subprocess.run([*helm, "uninstall", release, "--wait"], capture_output=True, text=True, timeout=180, check=False)


def test_view_reads_fleets_and_edit_and_admin_write_them_but_never_their_status(fleet: Fleet, app_teams: str) -> None:
    for role in ROLES:
        for verb in READ:
            assert can_i(fleet, role, verb, FLEETS), (role, verb)
            assert can_i(fleet, role, verb, FLEETS, "--subresource=status"), (role, verb, "status")
        for verb in WRITE:
            assert can_i(fleet, role, verb, FLEETS) == (role != "view"), (role, verb)
        for verb in ("update", "patch"):
            assert not can_i(fleet, role, verb, FLEETS, "--subresource=status"), (role, verb, "status")
            assert can_i(fleet, role, verb, FLEETS, "--subresource=scale") == (role != "view"), (role, verb, "scale")
        for elsewhere in ("default", "kube-system"):
            for verb in ("get", "list", "patch", "create"):
                assert not can_i(fleet, role, verb, FLEETS, namespace=elsewhere), (role, verb, elsewhere)


def test_the_template_policy_binds_an_edit_user(fleet: Fleet, app_teams: str) -> None:
    hostile = ESCALATIONS[0]
    document = sdep("hostile", replicas=1)
    document["spec"]["template"] = hostile.template
    manifest = yaml.safe_dump(document)
    as_edit = ["apply", "--as", user(fleet.namespace, "edit"), "-f", "-"]

    def enforced() -> bool:  # a dry run, so that nothing is created before the policy is in force
        return (
            "ValidatingAdmissionPolicy"
            in fleet.kubectl(*as_edit, "--dry-run=server", stdin=manifest, check=False).stderr
        )

    wait_for("the chart's admission policy in force", enforced)
    refused = fleet.kubectl(*as_edit, stdin=manifest, check=False)
    assert refused.returncode != 0 and re.sub(r"\[\d+\]", "[*]", hostile.field) in refused.stderr, refused.stderr
    assert fleet.kubectl("get", FLEETS, "hostile", "--ignore-not-found", "-o", "name").stdout.strip() == ""


def specfleet_as(
    dev_cluster: ClusterInfo, fleet: Fleet, role: str, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl specfleet ARGS` with a kubeconfig holding the `<role>-user` ServiceAccount's own token."""
    token = fleet.kubectl("create", "token", f"{role}-user", "--duration", "1h").stdout.strip()
    config = yaml.safe_load(dev_cluster.kubeconfig.read_text())
    config["users"] = [{"name": role, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = role
    kubeconfig = tmp_path / f"{role}.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "specfleet.cli", *args, "--kubeconfig", str(kubeconfig), "-n", fleet.namespace]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_an_edit_user_promotes_and_a_view_user_is_refused_saying_why(
    dev_cluster: ClusterInfo, operator: Operator, fleet: Fleet, app_teams: str, tmp_path: Path
) -> None:
    first = healthy(fleet, steps=GATE)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the manual gate", fleet.phase_is("llama", "Paused"))

    looked = specfleet_as(dev_cluster, fleet, "view", tmp_path, "status", "llama")
    assert looked.returncode == 0 and "Paused" in looked.stdout, looked.stderr
    refused = specfleet_as(dev_cluster, fleet, "view", tmp_path, "promote", "llama")
    assert refused.returncode == 1, refused.stderr
    assert "forbidden by RBAC" in refused.stderr and 'cannot patch resource "speculativedeployments"' in refused.stderr
    assert Command.PROMOTE.annotation not in (fleet.get("llama")["metadata"].get("annotations") or {})
    assert fleet.status("llama")["phase"] == "Paused"

    promoted = specfleet_as(dev_cluster, fleet, "edit", tmp_path, "promote", "llama")
    assert promoted.returncode == 0, promoted.stderr
    wait_for("the edit user's promotion", lambda: (s := fleet.status("llama")).get("phase") == "Healthy"
             and s["stableRevision"] != first)  # fmt: skip
