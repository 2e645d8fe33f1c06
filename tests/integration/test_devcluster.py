"""The dev cluster against its real components: scheduler, controllers, API validation, kwok, Prometheus.

No mocks and no sleeps as assertions: every wait polls the real API with a deadline.
"""

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
import yaml

from specfleet_workshop.devcluster import cluster
from specfleet_workshop.devcluster.config import free_ports
from specfleet_workshop.devcluster.crds import apply_crds
from specfleet_workshop.devcluster.nodes import GPU_RESOURCE, pool_from_counts
from specfleet_workshop.devcluster.versions import HELM_VERSION, KUBERNETES_VERSION

from fleetkit import schemaless_crd, wait_for

pytestmark = pytest.mark.integration

T = TypeVar("T")
MI300X = "AMD_Instinct_MI300X_OAM"


def deployment_of(name: str, replicas: int, pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


def gpu_deployment(name: str, gpus: int, replicas: int, product_name: str = MI300X) -> dict[str, Any]:
    """A Deployment shaped like a vLLM server: whole GPUs, required affinity on the node labeller's product name."""
    match = {"key": "amd.com/gpu.product-name", "operator": "In", "values": [product_name]}
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [match]}]}
    }
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai-rocm:latest",
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
    }
    return deployment_of(name, replicas, {"affinity": {"nodeAffinity": affinity}, "containers": [container]})


def cpu_deployment(name: str, replicas: int) -> dict[str, Any]:
    container = {"name": "app", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
    return deployment_of(name, replicas, {"containers": [container]})


def pods_of(core: kubernetes.client.CoreV1Api, namespace: str, app: str) -> list[kubernetes.client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def is_ready(pod: kubernetes.client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def test_gpu_pods_land_on_mi300x_nodes_and_become_ready(k8s_api: kubernetes.client.ApiClient, namespace: str) -> None:
    apps = kubernetes.client.AppsV1Api(k8s_api)
    core = kubernetes.client.CoreV1Api(k8s_api)
    apps.create_namespaced_deployment(namespace, gpu_deployment("llama", gpus=8, replicas=2))

    def all_ready() -> list[kubernetes.client.V1Pod] | None:
        pods = pods_of(core, namespace, "llama")
        return pods if len(pods) == 2 and all(is_ready(pod) for pod in pods) else None

    pods = wait_for("2 Ready pods of 8 GPUs each", all_ready)
    assert len({pod.spec.node_name for pod in pods}) == 2, "8 GPUs per node: one replica per node"
    for pod in pods:
        assert pod.status.phase == "Running"
        assert pod.status.pod_ip, "kwok gives every pod an IP"
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels["amd.com/gpu.product-name"] == MI300X
    deployment = wait_for(
        "the Deployment to report 2 ready replicas",
        lambda: (d := apps.read_namespaced_deployment("llama", namespace)).status.ready_replicas == 2 and d,
    )
    assert deployment.status.available_replicas == 2


def test_sixteen_gpus_stay_pending_with_the_schedulers_reason(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(k8s_api)
    core = kubernetes.client.CoreV1Api(k8s_api)
    apps.create_namespaced_deployment(namespace, gpu_deployment("too-big", gpus=16, replicas=1))

    def unschedulable_message() -> str | None:
        for pod in pods_of(core, namespace, "too-big"):
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    return condition.message
        return None

    message = wait_for("the scheduler to mark the pod Unschedulable", unschedulable_message)
    assert "Insufficient amd.com/gpu" in message
    events = wait_for(
        "a FailedScheduling event",
        lambda: [
            event
            for event in core.list_namespaced_event(namespace).items
            if event.reason == "FailedScheduling" and "Insufficient amd.com/gpu" in (event.message or "")
        ],
    )
    assert events[0].source.component == "default-scheduler" or events[0].reporting_component == "default-scheduler"
    [pod] = pods_of(core, namespace, "too-big")
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_deleting_a_deployment_garbage_collects_its_replicasets_and_pods(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(k8s_api)
    core = kubernetes.client.CoreV1Api(k8s_api)
    apps.create_namespaced_deployment(namespace, cpu_deployment("web", replicas=3))
    wait_for("3 Ready pods", lambda: len([pod for pod in pods_of(core, namespace, "web") if is_ready(pod)]) == 3)
    assert apps.list_namespaced_replica_set(namespace).items, "the deployment controller made a ReplicaSet"

    apps.delete_namespaced_deployment("web", namespace)

    wait_for("ReplicaSets to be collected", lambda: not apps.list_namespaced_replica_set(namespace).items)
    wait_for("pods to be collected", lambda: not pods_of(core, namespace, "web"))


def test_the_api_server_rejects_an_invalid_object(k8s_api: kubernetes.client.ApiClient, namespace: str) -> None:
    apps = kubernetes.client.AppsV1Api(k8s_api)
    invalid = gpu_deployment("bad", gpus=8, replicas=1)
    invalid["spec"]["replicas"] = -1
    invalid["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(kubernetes.client.ApiException) as raised:
        apps.create_namespaced_deployment(namespace, invalid)
    assert raised.value.status == 422
    body = json.loads(raised.value.body)
    assert body["reason"] == "Invalid"
    assert "spec.replicas: Invalid value: -1" in body["message"]
    assert "`selector` does not match template `labels`" in body["message"]


def test_crds_just_created_are_served_when_apply_crds_returns(
    k8s_api: kubernetes.client.ApiClient, dev_cluster: cluster.ClusterInfo, namespace: str
) -> None:
    """A CRD a moment old has no conditions yet, where `kubectl wait --for=condition=Established` exits 1 at
    once (a CI run lost 108 tests to it): apply_crds waits them out, so an object of each kind can be made."""
    group = f"{namespace}.example.io"
    kinds = [f"Thing{i}" for i in range(4)]
    manifest = yaml.safe_dump_all(schemaless_crd(group, kind, f"{kind.lower()}s") for kind in kinds)
    custom = kubernetes.client.CustomObjectsApi(k8s_api)
    names = apply_crds(dev_cluster, [manifest])
    try:
        assert names == [f"{kind.lower()}s.{group}" for kind in kinds]
        for kind in kinds:
            body = {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": "one"}}
            custom.create_namespaced_custom_object(group, "v1", namespace, f"{kind.lower()}s", body)
    finally:
        extensions = kubernetes.client.ApiextensionsV1Api(k8s_api)
        for name in names:
            extensions.delete_custom_resource_definition(name)


def test_strict_field_validation_refuses_unknown_fields(dev_cluster: cluster.ClusterInfo, namespace: str) -> None:
    """kubectl asks the server for strict field validation (the Python client would refuse the typo itself)."""
    misspelled = cpu_deployment("typo", replicas=1)
    misspelled["spec"]["replica"] = 2
    result = subprocess.run(
        [str(dev_cluster.kubectl), "create", "--validate=strict", "-n", namespace, "-f", "-"],
        input=json.dumps(misspelled),
        env={**os.environ, "KUBECONFIG": str(dev_cluster.kubeconfig)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert 'unknown field "spec.replica"' in result.stderr


def test_service_account_tokens_are_subject_to_rbac(
    dev_cluster: cluster.ClusterInfo, k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(k8s_api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(k8s_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token

    configuration = kubernetes.client.Configuration()
    configuration.host = dev_cluster.api_url
    configuration.ssl_ca_cert = str(dev_cluster.state_dir / "pki" / "ca.crt")
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with kubernetes.client.ApiClient(configuration) as as_reader:
        reader = kubernetes.client.CoreV1Api(as_reader)
        with pytest.raises(kubernetes.client.ApiException) as raised:
            reader.list_namespaced_pod(namespace)
        assert raised.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in raised.value.body

        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "reader-reads-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )

        def can_list() -> bool:
            try:
                reader.list_namespaced_pod(namespace)
            except kubernetes.client.ApiException:
                return False
            return True

        wait_for("the RoleBinding to take effect", can_list, timeout=30)


def test_kubectl_and_helm_are_the_pinned_versions(dev_cluster: cluster.ClusterInfo) -> None:
    environment = {**os.environ, "KUBECONFIG": str(dev_cluster.kubeconfig)}
    output = subprocess.run(
        [str(dev_cluster.kubectl), "version", "-o", "json"], env=environment, capture_output=True, text=True, check=True
    ).stdout
    versions = json.loads(output)
    assert versions["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert versions["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    helm = subprocess.run(
        [str(dev_cluster.helm), "version", "--short"], capture_output=True, text=True, check=True
    ).stdout
    assert helm.startswith(HELM_VERSION)


def test_dev_env_gives_a_new_shell_the_pinned_kubectl_helm_and_the_plugin(dev_cluster: cluster.ClusterInfo) -> None:
    """As a newcomer's shell: only the system directories on PATH (the machine's kubectl, if any, is older)."""
    specfleet = Path(sys.executable).with_name("specfleet")

    def in_new_shell(command: str) -> subprocess.CompletedProcess[str]:
        script = f'eval "$({specfleet} dev env --state-dir {dev_cluster.state_dir})" && {command}'
        shell = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
        done = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    found = in_new_shell("command -v kubectl helm kubectl-specfleet").stdout.split()
    assert [Path(p) for p in found] == [dev_cluster.kubectl, dev_cluster.helm, specfleet.with_name("kubectl-specfleet")]
    version = in_new_shell("kubectl version -o json")
    assert json.loads(version.stdout)["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert "skew" not in version.stderr.lower()
    assert json.loads(in_new_shell("kubectl specfleet list -A -o json").stdout) is not None


def _prometheus_get(base: str, path: str, **params: str) -> dict[str, Any]:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_prometheus_scrapes_targets_dropped_into_file_sd(dev_cluster: cluster.ClusterInfo) -> None:
    base = dev_cluster.prometheus_url
    with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
        assert response.status == 200
    target_file = dev_cluster.file_sd_dir / "probe.json"
    # Point a target group at Prometheus' own /metrics: a loopback target that is always up.
    target = f"127.0.0.1:{dev_cluster.ports.prometheus}"
    target_file.write_text(json.dumps([{"targets": [target], "labels": {"job": "file-sd-probe"}}]))
    try:

        def probe_up() -> list[dict[str, Any]] | None:
            result = _prometheus_get(base, "/api/v1/query", query='up{job="file-sd-probe"} == 1')
            return result["data"]["result"] if result["status"] == "success" else None

        [sample] = wait_for("Prometheus to scrape the file_sd target", probe_up, timeout=60)
        assert sample["metric"]["instance"] == target
    finally:
        target_file.unlink()


def test_prometheus_reloads_its_config_on_request(dev_cluster: cluster.ClusterInfo) -> None:
    request = urllib.request.Request(f"{dev_cluster.prometheus_url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    result = _prometheus_get(dev_cluster.prometheus_url, "/api/v1/status/config")
    assert "file_sd_configs" in result["data"]["yaml"]


def test_a_second_up_reuses_the_running_cluster(dev_cluster: cluster.ClusterInfo) -> None:
    """Reused, not restarted: every component keeps its process (how fast that is belongs to a benchmark)."""
    before = {item.name: item.pid for item in cluster.status(dev_cluster.state_dir).components}
    again = cluster.up(dev_cluster.state_dir)
    after = {item.name: item.pid for item in cluster.status(dev_cluster.state_dir).components}
    assert again == dev_cluster
    assert after == before


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command_line:
            pids.append(int(entry.name))
    return pids


def test_down_leaves_no_process_behind(tmp_path: Path) -> None:
    """A throwaway cluster with its own state dir and free ports, so the session's cluster is not touched."""
    state_dir = tmp_path / "throwaway"
    info = cluster.up(state_dir, pool=pool_from_counts(mi300x=1, mi325x=0, mi355x=0, cpu=0), ports=free_ports())
    running = cluster.status(state_dir)
    assert running.healthy
    pids = [item.pid for item in running.components]
    assert len(pids) == 6
    assert set(_processes_mentioning(str(state_dir))) >= set(pids)

    stopped = cluster.down(state_dir)

    assert sorted(stopped) == sorted(cluster.PROCESSES)
    assert _processes_mentioning(str(state_dir)) == []
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not state_dir.exists()
    assert info.node_names == ("mi300x-0",)
