"""The Helm chart on the real dev cluster, and the operator running on nothing but the chart's RBAC.

Helm and kubectl are the pinned builds. The operator runs as a local process whose kubeconfig holds a
token of the chart's ServiceAccount (`kubectl create token`), so every request it makes is authorised
by the chart's Roles exactly as in a pod; the pod the chart creates is a kwok fake and runs nothing.
Waits poll with a deadline; the one fixed window (a follower must not write) says why.
"""

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet_workshop import chartgen
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.crds import apply_crds

from chartkit import CHART, ROOT, Cluster, run
from fleetkit import Fleet, healthy, schemaless_crd, sdep, wait_for
from speckit import FULL_TEMPLATE

pytestmark = pytest.mark.integration

RBAC_DENIED = ("cannot ", "Not enough permissions", "403 Forbidden")
"""How a refused request shows in the operator's log: the API server's RBAC message (`... cannot <verb> ...`),
kopf's warning, or the reconciler's `API error 403 Forbidden`."""
USED = [
    ("list", "speculativedeployments"),
    ("watch", "speculativedeployments"),
    ("patch", "speculativedeployments"),
    ("patch", "speculativedeployments/status"),
    *(
        (verb, kind)
        for kind in ("deployments", "services")
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ),
    ("list", "pods"),
    ("watch", "pods"),
    ("create", "events"),
    ("patch", "events"),
]
"""Every (verb, resource) the operator uses in a watched namespace (operator/specfleet/controller)."""
CAPACITY = [("get", "nodes"), ("list", "nodes"), ("list", "pods", "--all-namespaces")]
"""What the capacity check reads cluster-wide (`capacityCheck`, on by default): read-only."""

MONITORING_KINDS = {
    "PodMonitor": "podmonitors",
    "ServiceMonitor": "servicemonitors",
    "PrometheusRule": "prometheusrules",
}


@pytest.fixture
def cluster(dev_cluster: ClusterInfo) -> Cluster:
    return Cluster(dev_cluster)


@pytest.fixture
def release(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A release name unique to the test (its ClusterRoles are cluster-wide), uninstalled afterwards."""
    name = f"sf-{namespace.removeprefix('test-')}"
    yield name
    cluster.helm("uninstall", name, "-n", namespace, "--wait", "--ignore-not-found", check=False)


@pytest.fixture
def monitoring_crds(cluster: Cluster) -> Iterator[None]:
    """Stand-ins for the Prometheus Operator's CRDs: the kinds exist (schema-less), so the API server
    serves monitoring.coreos.com/v1 and Helm's `.Capabilities` sees it. Removed afterwards."""
    crds = [schemaless_crd("monitoring.coreos.com", kind, plural) for kind, plural in MONITORING_KINDS.items()]
    names = apply_crds(cluster.info, [yaml.safe_dump_all(crds)])
    yield
    cluster.kubectl("delete", "--wait=true", "--timeout=60s", *(f"crd/{name}" for name in names), check=False)


@contextlib.contextmanager
def operator_process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `specfleet run`-like child process, terminated (then killed) when the block ends."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def specfleet_run(kubeconfig: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "specfleet.cli", "run", "--kubeconfig", str(kubeconfig), "--liveness", "", *args]


def can_i(cluster: Cluster, kubeconfig: Path, *question: str) -> bool:
    answer = cluster.kubectl("auth", "can-i", *question, kubeconfig=kubeconfig, check=False)
    return answer.stdout.strip() == "yes"


def refusals(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if any(text in line for text in RBAC_DENIED)]


def promote_then_abort(fleet: Fleet, **spec: Any) -> None:
    """A canary that walks its steps and is promoted, then one held at a manual gate and aborted (the
    operator has no Prometheus: the fleet's author says so)."""
    fleet.unguarded = True
    before = healthy(fleet, **spec)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))
    assert canary != before
    status = wait_for(
        "promotion",
        lambda: (s := fleet.status("llama")).get("stableRevision") == canary and s.get("phase") == "Healthy" and s,
    )
    assert status["history"][-1]["outcome"] == "Promoted"
    wait_for("the promoted canary's Deployment to go", lambda: "llama-canary" not in fleet.deployments())

    fleet.patch_spec("llama", {"rollout": {"steps": [{"weight": 50, "pause": {}}]}})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the manual gate", fleet.phase_is("llama", "Paused"))
    fleet.annotate("llama", "specfleet.io/abort", "now")
    status = wait_for("the abort", fleet.phase_is("llama", "Aborted"))
    assert status["history"][-1]["outcome"] == "Aborted"
    wait_for("the aborted canary's Deployment to go", lambda: "llama-canary" not in fleet.deployments())
    wait_for(
        "the abort annotation to be consumed",
        lambda: "specfleet.io/abort" not in (fleet.get("llama")["metadata"].get("annotations") or {}),
    )


# The stand-in monitoring CRDs are cluster-wide, made and deleted per test: a chart another test installs meanwhile
# renders a PodMonitor, and its upgrade fails once they are gone. So these tests hold the cluster alone.
@pytest.mark.cluster_wide
@pytest.mark.xdist_group("monitoring_crds")
def test_rendered_chart_passes_a_server_side_dry_run(cluster: Cluster, namespace: str, monitoring_crds: None) -> None:
    everything = [
        *("--set", "replicaCount=2", "--set", f"watchNamespaces={{{namespace}}}"),
        *("--set", "prometheusAuth.enabled=true", "--set", "prometheusAuth.secretNames={prom-token}"),
        *(
            "--set",
            "gatewayAPI.enabled=true",
            "--set",
            "monitoring.force=true",
            "--set",
            "grafanaDashboard.enabled=true",
        ),
    ]
    for values in ([], everything, ["--set", "shards=3", *everything]):
        rendered = cluster.helm("template", "sf-dry", str(CHART), "-n", namespace, *values).stdout
        kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered) if doc}
        result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=rendered)
        assert result.stdout.count("(server dry run)") == rendered.count("\nkind: "), result.stdout
    assert {"PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap", "Role", "RoleBinding"} <= kinds


def test_a_change_of_shards_leaves_the_running_shards_leases_patchable(cluster: Cluster, namespace: str) -> None:
    """During `helm upgrade --set shards=3` the old shards (2, say) still run: they must renew, then release, their
    Leases, so the Role keeps the release's Leases that exist (the chart's `lookup`), and only those."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for name in (
        "sf-leases-specfleet-shard-0-of-2",
        "sf-leases-specfleet-shard-1-of-2",
        "sf-leases-specfleet",
        "other",
    ):
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": "old-shard", "leaseDurationSeconds": 15, "renewTime": now},
        }
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(lease))
    args = ("template", "sf-leases", str(CHART), "-n", namespace, "--set", "shards=3")
    for dry_run, old in (([], []), (["--dry-run=server"], ["sf-leases-specfleet", "sf-leases-specfleet-shard-0-of-2",
                                                             "sf-leases-specfleet-shard-1-of-2"])):  # fmt: skip
        rendered = yaml.safe_load_all(cluster.helm(*args, *dry_run).stdout)
        role = next(d for d in rendered if d and d["metadata"]["name"] == "sf-leases-specfleet-leader-election")
        patch = next(rule for rule in role["rules"] if rule["verbs"] == ["patch"])
        assert sorted(patch["resourceNames"]) == sorted([f"sf-leases-specfleet-shard-{i}-of-3" for i in range(3)] + old)


def test_install_upgrade_uninstall(cluster: Cluster, namespace: str, release: str) -> None:
    cluster.helm("install", release, str(CHART), "-n", namespace, "--wait", "--timeout", "120s")
    assert cluster.exists("-n", namespace, f"deployment/{release}-specfleet")
    assert cluster.exists(f"clusterrole/{release}-specfleet") and cluster.exists(
        f"clusterrolebinding/{release}-specfleet"
    )
    assert cluster.exists("-n", namespace, f"role/{release}-specfleet-leader-election")  # one replica elects too
    app_team_roles = [f"clusterrole/{release}-specfleet-aggregate-to-{role}" for role in ("view", "edit")]
    assert all(cluster.exists(role) for role in app_team_roles)  # test_app_team_roles.py: what they grant
    policy = f"{release}-specfleet-template-policy"  # the cluster serves it (1.30+): helm renders it
    assert cluster.exists(f"validatingadmissionpolicy/{policy}") and cluster.exists(
        f"validatingadmissionpolicybinding/{policy}"
    )

    cluster.helm(
        *("upgrade", release, str(CHART), "-n", namespace, "--wait", "--timeout", "120s"),
        *("--set", "operator.workers=8", "--set", "replicaCount=2"),
    )
    deployment = json.loads(
        cluster.kubectl("-n", namespace, "get", f"deployment/{release}-specfleet", "-o", "json").stdout
    )
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--workers=8" in args and f"--leader-election={namespace}/{release}-specfleet" in args
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert cluster.exists("-n", namespace, f"role/{release}-specfleet-leader-election")
    history = json.loads(cluster.helm("history", release, "-n", namespace, "-o", "json").stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]

    cluster.helm("uninstall", release, "-n", namespace, "--wait")
    assert not cluster.exists("-n", namespace, f"deployment/{release}-specfleet")
    assert not cluster.exists(f"clusterrole/{release}-specfleet")
    assert not any(cluster.exists(role) for role in app_team_roles)
    assert not cluster.exists(f"validatingadmissionpolicy/{policy}")
    assert not cluster.exists("-n", namespace, f"serviceaccount/{release}-specfleet")
    assert cluster.exists("crd/speculativedeployments.specfleet.io"), "Helm never deletes the CRD (or its objects)"


def test_install_refuses_bad_values_with_the_key_in_the_message(cluster: Cluster, namespace: str, release: str) -> None:
    for values, message in (
        (("--set", "replicaCount=two"), "at '/replicaCount': got string, want integer"),
        (("--set", "operator.workerz=8"), "at '/operator': additional properties 'workerz' not allowed"),
    ):
        refused = cluster.helm("install", release, str(CHART), "-n", namespace, *values, check=False)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    assert cluster.helm("list", "-n", namespace, "-q").stdout.strip() == ""


@pytest.mark.cluster_wide
@pytest.mark.xdist_group("monitoring_crds")
def test_monitoring_objects_appear_when_the_api_is_served(
    cluster: Cluster, namespace: str, release: str, monitoring_crds: None
) -> None:
    cluster.helm("install", release, str(CHART), "-n", namespace)
    for kind, plural in MONITORING_KINDS.items():
        name = f"{release}-specfleet-vllm" if kind == "PodMonitor" else f"{release}-specfleet"
        assert cluster.exists("-n", namespace, f"{plural}.monitoring.coreos.com/{name}"), kind


def test_the_operator_runs_on_the_namespaced_rbac_and_no_more(
    cluster: Cluster, namespace: str, release: str, crd_installed: None, fleet: Fleet, tmp_path: Path
) -> None:
    values = ["--set", f"watchNamespaces={{{namespace}}}"]
    values += ["--set", "prometheusAuth.enabled=true", "--set", "prometheusAuth.secretNames={prom-token}"]
    values += [
        "--set",
        "outputEquivalencePrompts.enabled=true",
        "--set",
        "outputEquivalencePrompts.configMapNames={prompts}",
    ]
    cluster.helm("install", release, str(CHART), "-n", namespace, *values)
    account = cluster.service_account_kubeconfig(namespace, f"{release}-specfleet", tmp_path / "sa.kubeconfig")
    log = tmp_path / "operator.log"

    fleet.make_room_for(FULL_TEMPLATE)  # every template field, rendered by an operator on the chart's RBAC
    election = f"--leader-election={namespace}/{release}-specfleet"  # as the chart runs it
    with operator_process(specfleet_run(account, "--namespace", namespace, "--resync", "30", election), log):
        promote_then_abort(fleet, template=FULL_TEMPLATE)
    assert refusals(log) == [], "the operator was refused something it uses"

    allowed = [*USED, ("get", "secrets/prom-token"), ("get", "configmaps/prompts")]
    denied = [
        ("get", "secrets/other"),
        ("list", "secrets"),
        ("watch", "nodes"),
        ("patch", "nodes"),
        ("watch", "pods", "--namespace", "default"),
        ("create", "pods"),
        ("delete", "pods"),
        ("update", "deployments"),
        ("create", "speculativedeployments"),
        ("delete", "speculativedeployments"),
        ("get", "configmaps"),
        ("get", "configmaps/other"),
        ("list", "configmaps"),
        ("list", "deployments", "--namespace", "default"),
        ("patch", "httproutes.gateway.networking.k8s.io"),
    ]
    for question in allowed:
        assert can_i(cluster, account, *question, "--namespace", namespace), question
    for question in CAPACITY:
        assert can_i(cluster, account, *question), question
    for question in denied:
        namespaced = question if "--namespace" in question else (*question, "--namespace", namespace)
        assert not can_i(cluster, account, *namespaced), question
    refused = cluster.kubectl("get", "secrets", "-n", namespace, kubeconfig=account, check=False)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr


@pytest.mark.cluster_wide
def test_the_operator_runs_on_the_cluster_wide_rbac(
    cluster: Cluster, namespace: str, release: str, crd_installed: None, fleet: Fleet, tmp_path: Path
) -> None:
    cluster.helm("install", release, str(CHART), "-n", namespace)
    account = cluster.service_account_kubeconfig(namespace, f"{release}-specfleet", tmp_path / "sa.kubeconfig")
    log = tmp_path / "operator.log"
    with operator_process(
        specfleet_run(account, "--resync", "30", f"--leader-election={namespace}/{release}-specfleet"), log
    ):
        healthy(fleet)
    # A cluster-wide operator also sees other tests' namespaces, where a terminating namespace answers
    # 403 to creations: only RBAC's own wording counts as a refusal here.
    assert [
        line for line in log.read_text().splitlines() if "cannot " in line or "Not enough permissions" in line
    ] == []
    for question in USED:
        assert can_i(cluster, account, *question, "--all-namespaces"), question
    for question in CAPACITY:
        assert can_i(cluster, account, *question), question
    for question in (("get", "secrets", "--all-namespaces"), ("watch", "nodes"), ("create", "namespaces")):
        assert not can_i(cluster, account, *question), question


def _lease(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("-n", namespace, "get", f"lease/{name}", "-o", "json").stdout)["spec"]


def observe_for(seconds: float, what: str, probe: Callable[[], bool]) -> None:
    """A negative can only be seen over a window: fail as soon as `probe` turns false within it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe(), what
        time.sleep(0.25)


def test_replicas_elect_one_writer_and_fail_over(
    cluster: Cluster, namespace: str, release: str, crd_installed: None, fleet: Fleet, tmp_path: Path
) -> None:
    values = ["--set", "replicaCount=2", "--set", f"watchNamespaces={{{namespace}}}"]
    cluster.helm("install", release, str(CHART), "-n", namespace, *values)
    account = cluster.service_account_kubeconfig(namespace, f"{release}-specfleet", tmp_path / "sa.kubeconfig")
    lease_name = f"{release}-specfleet"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    foreign = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name, "namespace": namespace},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600, "renewTime": now},
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(foreign))

    logs = [tmp_path / "replica-a.log", tmp_path / "replica-b.log"]
    command = specfleet_run(account, "--namespace", namespace, "--resync", "30", "--leader-election",
                            f"{namespace}/{lease_name}")  # fmt: skip
    with operator_process(command, logs[0]) as a, operator_process(command, logs[1]) as b:
        replicas = {logs[0]: a, logs[1]: b}
        wait_for("both replicas standing by", lambda: all("workers start when" in log.read_text() for log in logs))
        fleet.unguarded = True  # no Prometheus here: canaries on pauses alone, as the fleet's author says
        fleet.apply(sdep("llama"))
        # the followers watch the new object at once; 5 s is more than two lease retry periods
        observe_for(5.0, "no replica writes while another holds the lease", lambda: not fleet.status("llama"))

        cluster.kubectl(
            "-n", namespace, "patch", f"lease/{lease_name}", "--type=merge", "-p", '{"spec":{"holderIdentity":null}}'
        )
        wait_for("Healthy under the elected replica", fleet.phase_is("llama", "Healthy"))
        first = _lease(cluster, namespace, lease_name)["holderIdentity"]
        leader_log = next(log for log in logs if f"acquired by {first}" in log.read_text())
        replicas[leader_log].send_signal(signal.SIGKILL)  # no release: the other must wait for expiry
        replicas[leader_log].wait(timeout=30)

        second = wait_for(
            "the other replica to take over",
            lambda: (h := _lease(cluster, namespace, lease_name).get("holderIdentity")) not in (first, None) and h,
            timeout=60,
        )
        assert _lease(cluster, namespace, lease_name)["leaseTransitions"] >= 2
        fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
        canary = wait_for("a canary under the new leader", lambda: fleet.status("llama").get("canaryRevision"))
        wait_for("its promotion", lambda: fleet.status("llama").get("stableRevision") == canary)
    survivor_log = next(log for log in logs if log != leader_log)
    assert f"acquired by {second}" in survivor_log.read_text()
    assert all(refusals(log) == [] for log in logs)


def test_dashboard_and_alert_queries_are_valid_promql(dev_cluster: ClusterInfo) -> None:
    dashboard_exprs = [t["expr"] for p in chartgen.dashboard()["panels"] for t in p.get("targets", [])]
    rule_exprs = [rule["expr"] for rule in chartgen.prometheus_rules()["groups"][0]["rules"]]
    grafana_variables = {"$namespace": ".*", "$fleet": ".*", "$__rate_interval": "1m"}
    for expr in dashboard_exprs + rule_exprs:
        for variable, value in grafana_variables.items():
            expr = expr.replace(variable, value)
        url = f"{dev_cluster.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert json.load(answer)["status"] == "success", expr


def _build_stage_copies(dockerfile: Path) -> list[str]:
    """The sources the operator image's build stage COPYs from the repository (continuations joined)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    build_stage = text.split("\nFROM ")[1]
    return [src for line in build_stage.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]]


def test_the_operator_image_install_step_installs_only_runtime_dependencies(tmp_path: Path) -> None:
    """images/operator/Dockerfile's build stage, run here: its COPYs into a context, its two commands."""
    context = tmp_path / "src"
    context.mkdir()
    for source in _build_stage_copies(ROOT / "images" / "operator" / "Dockerfile"):
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, context / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / source, context / source)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    # pip's own download cache (the README's first command filled it with these packages): the image's
    # `--no-cache-dir` keeps them out of a layer, which does not matter here, and a busy machine's fresh
    # downloads outlasted the default timeout.
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", str(context / "operator")],
        timeout=420)  # fmt: skip

    assert "Run the operator" in run([str(venv / "bin" / "specfleet"), "run", "--help"]).stdout
    listing = "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))"
    names = run([str(venv / "bin" / "python"), "-I", "-c", listing]).stdout.split()  # -I: not the checkout's *.egg-info
    installed = {re.sub(r"[-_.]+", "-", name).lower() for name in names}
    assert {"specfleet", "kopf", "kubernetes", "pydantic", "prometheus-client", "typer"} <= installed
    assert not installed & {"pytest", "ruff", "hypothesis", "import-linter", "vllm", "pip"}
    assert not installed & {"specfleet-workshop", "specfleet-dev", "matplotlib", "transformers"}
