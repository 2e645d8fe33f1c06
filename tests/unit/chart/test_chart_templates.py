"""The Helm chart as `helm template` renders it (offline, the pinned helm): RBAC, the Deployment, values.

These check what the chart promises; tests/integration/test_chart.py checks that a real API server
agrees (server-side dry run, install, upgrade, and the operator running on the chart's RBAC).
"""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.metrics import alerts
from specfleet_workshop import chartgen

from repokit import KUBE, ROOT

pytestmark = pytest.mark.xdist_group("chart_templates")  # its module-scoped fixture is built once, on one worker

CHART = ROOT / "charts" / "specfleet"
Manifest = dict[str, Any]

NAMESPACED_RULES = [
    {"apiGroups": ["specfleet.io"], "resources": ["speculativedeployments"], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["specfleet.io"], "resources": ["speculativedeployments/status"], "verbs": ["patch"]},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
"""Exactly what operator/specfleet/controller (kube.py, handlers.py) calls, per watched namespace."""
CRD_DISCOVERY = {
    "apiGroups": ["apiextensions.k8s.io"],
    "resources": ["customresourcedefinitions"],
    "verbs": ["list", "watch"],
}
NODES_READ = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
"""The capacity check (specfleet.capacity): the nodes' labels, taints, conditions and allocatable GPUs."""
PODS_LISTED = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
"""The capacity check: what the pods bound to those nodes request, in every namespace."""


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60, check=False)


def render(helm: Path, *args: str) -> list[Manifest]:
    result = run_helm(helm, "template", "sf", str(CHART), "--namespace", "ops", *KUBE, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def only(manifests: list[Manifest], kind: str) -> Manifest:
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"


def joins_built_in_roles(manifest: Manifest) -> bool:
    """A ClusterRole that app teams get through the built-in roles (bound to no account of the chart's)."""
    return any(key.startswith(AGGREGATE_TO) for key in manifest["metadata"].get("labels", {}))


def operators_own(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if not joins_built_in_roles(m)]


def container(manifests: list[Manifest]) -> Manifest:
    return only(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_lint_strict_passes_with_defaults_and_with_everything_on(helm: Path) -> None:
    everything = ["--set", "replicaCount=3", "--set", "watchNamespaces={a,b}", "--set", "prometheusAuth.enabled=true"]
    everything += ["--set", "gatewayAPI.enabled=true", "--set", "inferencePools.enabled=true"]
    everything += ["--set", "monitoring.force=true"]
    everything += ["--set", "grafanaDashboard.enabled=true"]
    for extra in ([], everything):
        result = run_helm(helm, "lint", "--strict", str(CHART), *extra)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_operator_pod_is_locked_down(helm: Path) -> None:
    manifests = render(helm)
    pod = only(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is True
    assert only(manifests, "ServiceAccount")["automountServiceAccountToken"] is False
    security = container(manifests)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container(manifests)["volumeMounts"]


def test_probes_call_the_liveness_endpoint_the_operator_serves(helm: Path) -> None:
    operator = container(render(helm, "--set", "healthPort=9000"))
    assert "--liveness=http://0.0.0.0:9000/healthz" in operator["args"]
    assert {"name": "health", "containerPort": 9000, "protocol": "TCP"} in operator["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_args_come_from_values(helm: Path) -> None:
    operator = container(
        render(
            helm,
            *("--set", "operator.prometheusUrl=http://prometheus.monitoring:9090", "--set", "operator.workers=8"),
            *("--set", "watchNamespaces={team-a,team-b}", "--set", "operator.logFormat=human"),
            *("--set", "operator.verbose=true", "--set", "operator.extraArgs={--resync=60}"),
            *("--set", "templatePolicy=restricted"),
            *("--set", "operator.allowedPrometheusUrls={https://thanos.obs.svc/tenant-a,http://prom.team-b:9090}"),
        )
    )
    assert operator["args"] == [
        "--log-format=human",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--workers=8",
        "--resync=300",
        "--template-policy=restricted",
        "--metrics-port=8081",
        "--namespace=team-a",
        "--namespace=team-b",
        "--prometheus-url=http://prometheus.monitoring:9090",
        "--allow-prometheus-url=https://thanos.obs.svc/tenant-a",
        "--allow-prometheus-url=http://prom.team-b:9090",
        "--leader-election=ops/sf-specfleet",
        "--verbose",
        "--resync=60",
    ]


def test_image_is_the_app_version_unless_a_tag_or_digest_is_given(helm: Path) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container(render(helm))["image"] == f"ghcr.io/specfleet/specfleet-operator:{app_version}"
    assert container(render(helm, "--set", "image.tag=dev"))["image"].endswith(":dev")
    digest = "sha256:" + "a" * 64
    assert container(render(helm, "--set", f"image.digest={digest}"))["image"].endswith(f"@{digest}")


def test_cluster_wide_rbac_is_exactly_what_the_operator_uses(helm: Path) -> None:
    manifests = operators_own(render(helm))
    role = only(manifests, "ClusterRole")
    assert role["rules"] == [*NAMESPACED_RULES, CRD_DISCOVERY, NODES_READ]  # pods: listed cluster-wide already
    binding = only(manifests, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sf-specfleet", "namespace": "ops"}]
    # namespaced: only leader election's, in the release namespace (see test_every_replica_count_elects_...)
    assert [r["metadata"]["name"] for r in by_kind(manifests, "Role")] == ["sf-specfleet-leader-election"]
    assert [b["metadata"]["name"] for b in by_kind(manifests, "RoleBinding")] == ["sf-specfleet-leader-election"]


def test_watch_namespaces_get_a_role_each_and_nothing_namespaced_cluster_wide(helm: Path) -> None:
    manifests = operators_own(render(helm, "--set", "watchNamespaces={team-a,team-b}"))
    roles = [r for r in by_kind(manifests, "Role") if r["metadata"]["name"] != "sf-specfleet-leader-election"]
    assert {r["metadata"]["namespace"] for r in roles} == {"team-a", "team-b"}
    assert all(r["rules"] == NAMESPACED_RULES for r in roles)
    bindings_here = [
        b for b in by_kind(manifests, "RoleBinding") if b["metadata"]["name"] != "sf-specfleet-leader-election"
    ]
    assert {b["metadata"]["namespace"] for b in bindings_here} == {"team-a", "team-b"}
    cluster_roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(manifests, "ClusterRole")}
    assert cluster_roles == {
        "sf-specfleet-discovery": [
            CRD_DISCOVERY,
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        ],
        "sf-specfleet-capacity": [NODES_READ, PODS_LISTED],  # read-only: no watch, no Secret, no write
    }
    bindings = {b["metadata"]["name"]: b for b in by_kind(manifests, "ClusterRoleBinding")}
    assert set(bindings) == set(cluster_roles)
    for name, binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sf-specfleet", "namespace": "ops"}]


@pytest.mark.parametrize("scope", [[], ["--set", "watchNamespaces={team-a}"]], ids=["cluster-wide", "namespaced"])
def test_capacity_check_off_reads_no_nodes(helm: Path, scope: list[str]) -> None:
    """`capacityCheck: false`: no rule on nodes anywhere, and pods only as the watched namespaces allow."""
    manifests = render(helm, *scope, "--set", "capacityCheck=false")
    roles = [*by_kind(manifests, "ClusterRole"), *by_kind(manifests, "Role")]
    assert not [rule for role in roles for rule in role["rules"] if "nodes" in rule["resources"]]
    assert not any(m["metadata"]["name"].endswith("-capacity") for m in manifests)
    if scope:
        cluster_rules = [rule for role in by_kind(manifests, "ClusterRole") for rule in role["rules"]]
        assert not [rule for rule in cluster_rules if "pods" in rule["resources"]]


def test_secrets_only_when_prometheus_auth_is_on_and_narrowed_to_names(helm: Path) -> None:
    def secret_rules(*args: str) -> list[Manifest]:
        rules = only(operators_own(render(helm, *args)), "ClusterRole")["rules"]
        return [r for r in rules if "secrets" in r["resources"]]

    assert secret_rules() == []
    assert secret_rules("--set", "prometheusAuth.enabled=true") == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    ]
    assert secret_rules("--set", "prometheusAuth.enabled=true", "--set", "prometheusAuth.secretNames={prom}") == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["prom"]}
    ]


def test_notifications_mount_the_operators_targets_and_read_a_namespaces_secret_by_name_only(helm: Path) -> None:
    def secret_rules(manifests: list[Manifest]) -> list[Manifest]:
        rules = only(operators_own(manifests), "ClusterRole")["rules"]
        return [r for r in rules if "secrets" in r["resources"]]

    on = ("--set", "notifications.enabled=true")
    target = ("--set", "notifications.targets[0].sink=webhook", "--set", "notifications.targets[0].url=https://e.x/h")
    assert secret_rules(render(helm, *on, *target)) == []  # the operator's own targets come mounted, not read
    manifests = render(
        helm, *on, *target, "--set", "notifications.namespaceSecrets=true",
        "--set", "notifications.allowedUrls={https://hooks.slack.com/services}",
    )  # fmt: skip
    assert secret_rules(manifests) == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["specfleet-notifications"]}
    ]
    (secret,) = by_kind(manifests, "Secret")
    assert yaml.safe_load(secret["stringData"]["targets.yaml"]) == {
        "targets": [{"sink": "webhook", "url": "https://e.x/h"}]
    }
    pod = only(manifests, "Deployment")["spec"]["template"]
    assert "checksum/notifications" in pod["metadata"]["annotations"]
    assert {"name": "notifications", "secret": {"secretName": secret["metadata"]["name"],
            "items": [{"key": "targets.yaml", "path": "targets.yaml"}]}} in pod["spec"]["volumes"]  # fmt: skip
    args = container(manifests)["args"]
    assert "--notifications-config=/etc/specfleet/notifications/targets.yaml" in args
    assert "--namespace-notifications" in args and "--allow-notification-url=https://hooks.slack.com/services" in args

    mine = render(helm, *on, "--set", "notifications.existingSecret=my-targets")
    assert by_kind(mine, "Secret") == []
    volumes = only(mine, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "my-targets" for v in volumes)
    assert not any("notif" in a for a in container(render(helm))["args"])


def test_httproutes_only_when_gateway_api_routing_is_on(helm: Path) -> None:
    def rules(*args: str) -> list[Manifest]:
        return list(only(operators_own(render(helm, *args)), "ClusterRole")["rules"])

    def route_rules(*args: str) -> list[Manifest]:
        return [r for r in rules(*args) if "httproutes" in r["resources"]]

    def grant_rules(*args: str) -> list[Manifest]:
        return [r for r in rules(*args) if "referencegrants" in r["resources"]]

    assert route_rules() == [] and grant_rules() == []
    assert route_rules("--set", "gatewayAPI.enabled=true") == [
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"], "verbs": ["get", "patch"]}
    ]
    # a route in another namespace is written only when a ReferenceGrant there consents: read, never written
    assert grant_rules("--set", "gatewayAPI.enabled=true") == [
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["referencegrants"], "verbs": ["list"]}
    ]


def test_inferencepools_only_when_pool_routing_is_on(helm: Path) -> None:
    def pool_rules(*args: str) -> list[Manifest]:
        rules = only(operators_own(render(helm, *args)), "ClusterRole")["rules"]
        return [r for r in rules if any("inference" in group for group in r["apiGroups"])]

    assert pool_rules() == [] and pool_rules("--set", "gatewayAPI.enabled=true") == []
    assert "--inference-pools" not in container(render(helm))["args"]  # nor watched: it would be refused
    assert "--inference-pools" in container(render(helm, "--set", "inferencePools.enabled=true"))["args"]
    assert pool_rules("--set", "inferencePools.enabled=true") == [
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"],
        }
    ]


FLEETS = "speculativedeployments"
FLEETS_STATUS, FLEETS_SCALE = f"{FLEETS}/status", f"{FLEETS}/scale"
READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete", "deletecollection"}


def built_in_role_grants(manifests: list[Manifest], role: str) -> dict[str, set[str]]:
    """What the aggregated ClusterRoles add to the built-in `role`: verbs by specfleet.io resource."""
    grants: dict[str, set[str]] = {}
    for cluster_role in by_kind(manifests, "ClusterRole"):
        if cluster_role["metadata"]["labels"].get(f"{AGGREGATE_TO}{role}") != "true":
            continue
        for rule in cluster_role["rules"]:
            assert rule["apiGroups"] == ["specfleet.io"] and "resourceNames" not in rule, rule
            for resource in rule["resources"]:
                grants.setdefault(resource, set()).update(rule["verbs"])
    return grants


def test_app_teams_read_fleets_with_view_and_write_them_with_edit_and_admin(helm: Path) -> None:
    manifests = render(helm)
    assert built_in_role_grants(manifests, "view") == {FLEETS: READ, FLEETS_STATUS: READ, FLEETS_SCALE: READ}
    written = {FLEETS: READ | WRITE, FLEETS_STATUS: READ, FLEETS_SCALE: READ | {"update", "patch"}}
    assert built_in_role_grants(manifests, "edit") == written
    assert built_in_role_grants(manifests, "admin") == written


def test_no_app_team_role_writes_a_fleets_status_or_grants_a_wildcard(helm: Path) -> None:
    """The status is the rollout's record (its step, verdicts, acknowledged commands): a tenant who could write it
    could forge a promotion. A command is an annotation patch on the object itself."""
    aggregated = [m for m in by_kind(render(helm), "ClusterRole") if joins_built_in_roles(m)]
    assert len(aggregated) == 2
    for rule in (rule for role in aggregated for rule in role["rules"]):
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        if FLEETS_STATUS in rule["resources"]:
            assert set(rule["verbs"]) <= READ, rule


@pytest.mark.parametrize("off", ["rbac.aggregateToBuiltInRoles=false", "rbac.create=false"])
def test_app_team_roles_can_be_left_out(helm: Path, off: str) -> None:
    for role in ("view", "edit", "admin"):
        assert built_in_role_grants(render(helm, "--set", off), role) == {}


@pytest.mark.parametrize("replicas", [1, 3])
def test_every_replica_count_elects_its_writer_through_the_release_lease(helm: Path, replicas: int) -> None:
    """One replica too: its stamps are what keep another install or a laptop run off its fleets, and an update's
    new pod stands by until the old one released the Lease (so the update can roll, not recreate)."""
    manifests = render(helm, "--set", f"replicaCount={replicas}")
    assert only(manifests, "Deployment")["spec"]["replicas"] == replicas
    assert only(manifests, "Deployment")["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert "--leader-election=ops/sf-specfleet" in container(manifests)["args"]
    lease_role = only(manifests, "Role")
    assert lease_role["metadata"]["namespace"] == "ops"
    assert lease_role["rules"] == lease_rules(["sf-specfleet"])
    assert only(manifests, "RoleBinding")["roleRef"]["name"] == "sf-specfleet-leader-election"


def lease_rules(names: list[str]) -> list[Manifest]:
    """create (no name yet), get on any (a fleet's stamp may name a shard of an earlier `shards` value), patch
    narrowed to the release's own Leases."""
    leases = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}
    return [
        {**leases, "verbs": ["create"]},
        {**leases, "verbs": ["get"]},
        {**leases, "resourceNames": names, "verbs": ["patch"]},
    ]


def test_one_shard_renders_one_deployment_as_without_sharding(helm: Path) -> None:
    assert render(helm, "--set", "shards=1") == render(helm)
    assert not any(a.startswith("--shard") for a in container(render(helm))["args"])


@pytest.mark.parametrize("scope", [[], ["--set", "watchNamespaces={a,b}"]])
def test_three_shards_render_three_deployments_each_with_its_shard_and_lease(helm: Path, scope: list[str]) -> None:
    manifests = render(helm, "--set", "shards=3", *scope)
    deployments = by_kind(manifests, "Deployment")
    assert [d["metadata"]["name"] for d in deployments] == [f"sf-specfleet-shard-{i}" for i in range(3)]
    selectors = []
    for index, made in enumerate(deployments):
        pod = made["spec"]["template"]
        args = pod["spec"]["containers"][0]["args"]
        assert "--leader-election=ops/sf-specfleet" in args  # the base: the shard's Lease is derived from it
        assert [a for a in args if a.startswith("--shard")] == ["--shards=3", f"--shard={index}"]
        assert made["spec"]["strategy"]["type"] == "RollingUpdate"
        selector = made["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert selector["specfleet.io/operator-shard"] == str(index)
        selectors.append(selector)
    assert len({tuple(sorted(s.items())) for s in selectors}) == 3, "two shards' Deployments would share pods"
    lease_role = next(m for m in by_kind(manifests, "Role") if m["metadata"]["name"] == "sf-specfleet-leader-election")
    assert lease_role["rules"] == lease_rules([f"sf-specfleet-shard-{i}-of-3" for i in range(3)])
    # the operator may patch its fleets (the stamp) wherever it watches them
    fleet_rules = [r for m in manifests if m["kind"] in ("ClusterRole", "Role") for r in m.get("rules", [])]
    assert any("speculativedeployments" in r["resources"] and "patch" in r["verbs"] for r in fleet_rules)
    service = next(m for m in manifests if m["kind"] == "Service")
    assert "specfleet.io/operator-shard" not in service["spec"]["selector"]  # metrics of every shard


def test_monitoring_objects_only_where_the_prometheus_operator_api_is_served(helm: Path) -> None:
    kinds = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    assert not kinds & {m["kind"] for m in render(helm)}
    served = [f"--api-versions=monitoring.coreos.com/v1/{kind}" for kind in sorted(kinds)]
    assert kinds <= {m["kind"] for m in render(helm, *served)}
    assert kinds <= {m["kind"] for m in render(helm, "--set", "monitoring.force=true")}
    assert "ServiceMonitor" not in {m["kind"] for m in render(helm, *served, "--set", "metrics.enabled=false")}


def test_pod_monitor_scrapes_vllm_with_the_labels_the_analysis_selects_on(helm: Path) -> None:
    monitor = only(render(helm, "--set", "monitoring.force=true"), "PodMonitor")["spec"]
    assert monitor["podTargetLabels"] == ["specfleet.io/name", "specfleet.io/track", "specfleet.io/revision"]
    assert monitor["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert monitor["selector"]["matchExpressions"] == [{"key": "specfleet.io/name", "operator": "Exists"}]
    assert monitor["namespaceSelector"] == {"any": True}
    scoped = render(helm, "--set", "monitoring.force=true", "--set", "watchNamespaces={team-a}")
    assert only(scoped, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_service_monitor_keeps_the_fleet_namespace_label(helm: Path) -> None:
    manifests = render(helm, "--set", "monitoring.force=true")
    endpoint = only(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    label, value = alerts.OPERATOR_TARGET  # what SpecfleetOperatorDown selects the operator's `up` series by
    assert endpoint["relabelings"] == [{"targetLabel": label, "replacement": value}]
    service = only(manifests, "Service")
    assert service["spec"]["ports"][0]["name"] == "metrics"
    assert "--metrics-port=8081" in container(manifests)["args"]


def test_prometheus_rule_and_dashboard_are_the_generated_ones(helm: Path) -> None:
    manifests = render(helm, "--set", "monitoring.force=true", "--set", "grafanaDashboard.enabled=true")
    assert only(manifests, "PrometheusRule")["spec"] == chartgen.prometheus_rules()
    config_map = only(manifests, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["specfleet-rollouts.json"]) == chartgen.dashboard()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "replicaCount=two"], "at '/replicaCount': got string, want integer"),
        (["--set", "shards=0"], "at '/shards': minimum: got 0, want 1"),
        (["--set", "operator.workerz=8"], "at '/operator': additional properties 'workerz' not allowed"),
        (["--set", "monitoring.podMonitor.interval=soon"], "at '/monitoring/podMonitor/interval'"),
        (["--set-json", 'watchNamespaces=["Team_A"]'], "at '/watchNamespaces/0'"),
        (["--set", "operator.logFormat=xml"], "at '/operator/logFormat': value must be one of 'json', 'human'"),
        (["--set", "operator.allowedPrometheusUrls={http://u:p@prom:9090}"], "at '/operator/allowedPrometheusUrls/0'"),
        (["--set", "operator.allowedPrometheusUrls={http://prom:9090/#x}"], "at '/operator/allowedPrometheusUrls/0'"),
        (["--set", "colour=blue"], "additional properties 'colour' not allowed"),
    ],
)
def test_the_schema_rejects_bad_values_naming_the_key(helm: Path, values: list[str], message: str) -> None:
    result = run_helm(helm, "template", "sf", str(CHART), *KUBE, *values)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


def test_every_value_in_values_yaml_is_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def missing(node: Any, spec: dict[str, Any], path: str) -> list[str]:
        if not isinstance(node, dict) or spec.get("additionalProperties") is not False:
            return []
        found = []
        for key, value in node.items():
            if key not in spec["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += missing(value, spec["properties"][key], f"{path}.{key}")
        return found

    assert missing(values, schema, "") == []


def test_the_crd_is_a_template_kept_on_uninstall_unless_switched_off(helm: Path) -> None:
    generated = yaml.safe_load((ROOT / "crds" / "specfleet.io_speculativedeployments.yaml").read_text())
    crd = only(render(helm), "CustomResourceDefinition")
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    assert crd == generated  # the same CRD kubectl users apply from crds/
    loose = only(
        render(helm, "--set", "crds.keep=false", "--set", "crds.annotations.team=ml"), "CustomResourceDefinition"
    )
    assert loose["metadata"]["annotations"] == {"team": "ml"}
    assert not by_kind(render(helm, "--set", "crds.install=false"), "CustomResourceDefinition")


def test_chart_requires_the_kubernetes_the_docs_require(helm: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.28.0-0"
    assert {"artifacthub.io/crds", "artifacthub.io/links", "artifacthub.io/license"} <= set(chart["annotations"])
    old = run_helm(helm, "template", "sf", str(CHART), "--kube-version", "1.27.9")
    assert old.returncode != 0 and "kubeVersion" in old.stderr


@pytest.mark.parametrize("shards", [1, 3])
def test_disruption_budget_spread_and_extras_reach_every_shard(helm: Path, shards: int) -> None:
    values = ["--set", f"shards={shards}", "--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=true"]
    values += ["--set-json", 'extraEnv=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]']
    values += ["--set-json", 'extraVolumes=[{"name": "ca", "configMap": {"name": "ca"}}]']
    values += ["--set-json", 'extraVolumeMounts=[{"name": "ca", "mountPath": "/etc/ca"}]']
    values += [
        "--set-json",
        'topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]',
    ]
    values += [
        "--set-json",
        'extraObjects=[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Release.Name }}-extra"}}]',
    ]
    manifests = render(helm, *values)
    budgets = by_kind(manifests, "PodDisruptionBudget")
    deployments = by_kind(manifests, "Deployment")
    assert len(budgets) == len(deployments) == shards
    for budget, deployment in zip(budgets, deployments, strict=True):
        pod = deployment["spec"]["template"]
        assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
        spread = pod["spec"]["topologySpreadConstraints"]
        assert spread == [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": deployment["spec"]["selector"],
            }
        ]
        operator = pod["spec"]["containers"][0]
        assert operator["env"] == [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]
        assert {"name": "ca", "mountPath": "/etc/ca"} in operator["volumeMounts"]
        assert {"name": "ca", "configMap": {"name": "ca"}} in pod["spec"]["volumes"]
    assert [m["metadata"]["name"] for m in by_kind(manifests, "ConfigMap")] == ["sf-extra"]
    assert not by_kind(render(helm), "PodDisruptionBudget")


def test_helm_test_pod_asks_the_metrics_service_and_is_pod_security_restricted(helm: Path) -> None:
    manifests = render(helm)
    pod = only(manifests, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    service = only(manifests, "Service")["metadata"]["name"]
    (check,) = pod["spec"]["containers"]
    assert check["env"] == [{"name": "URL", "value": f"http://{service}.ops.svc:8081/metrics"}]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert check["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert not by_kind(render(helm, "--set", "metrics.enabled=false"), "Pod")
