"""Pure rendering of everything the dev cluster runs: ports, file layout, command lines and config files.

Nothing here starts a process or touches the disk, so every flag can be unit-tested. Every listener
is bound to 127.0.0.1 explicitly: several components default to 0.0.0.0 (the controller manager's and
scheduler's serving ports, kwok's server), which must never happen on a shared machine.
"""

import base64
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from specfleet.api.vocabulary import LABEL_PREFLIGHT
from specfleet_workshop.fleetpods import loopback

LOOPBACK = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CLUSTER_NAME = "specfleet-dev"
ADMIN_USER = "specfleet-dev-admin"
"""The identity of the admin kubeconfig: tests, benchmarks and controllers run out of cluster use it."""
CONTROL_PLANE_CLIENT_QPS = 500
"""kube-controller-manager's and kube-scheduler's own API rate limit (defaults 20 and 50 QPS). A production
control plane keeps its defaults to protect a shared API server; here they would be the bottleneck of a
fleet-scale benchmark (1,000 Deployments, ReplicaSets and pods at once), not the controllers it measures."""


@dataclass(frozen=True)
class Ports:
    """Loopback ports of every listener; the defaults sit away from the usual Kubernetes and Prometheus ports."""

    etcd_client: int = 12379
    etcd_peer: int = 12380
    apiserver: int = 16443
    controller_manager: int = 16257
    scheduler: int = 16259
    kwok: int = 16247
    prometheus: int = 19090

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, int]) -> "Ports":
        return cls(**{item.name: int(values[item.name]) for item in fields(cls) if item.name in values})


def free_ports() -> Ports:
    """Ports free right now (below the ephemeral range: `fleetpods.loopback.free_port`), for throwaway
    clusters beside the default one."""
    return Ports(*loopback.free_ports(len(fields(Ports))))


@dataclass(frozen=True)
class Layout:
    """Where each file of one cluster lives inside its state directory."""

    state_dir: Path

    @property
    def marker(self) -> Path:
        """Proof that a directory is a dev cluster's state, checked before `down` deletes anything."""
        return self.state_dir / ".specfleet-dev-state"

    @property
    def cluster_file(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def kwok_config(self) -> Path:
        return self.state_dir / "kwok" / "kwok.yaml"

    @property
    def prometheus_dir(self) -> Path:
        return self.state_dir / "prometheus"

    @property
    def prometheus_config(self) -> Path:
        return self.prometheus_dir / "prometheus.yml"

    @property
    def file_sd_dir(self) -> Path:
        return self.prometheus_dir / "file_sd"

    @property
    def audit_policy(self) -> Path:
        return self.state_dir / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "logs" / "audit.log"

    def component_kubeconfig(self, component: str) -> Path:
        return self.state_dir / "kubeconfigs" / f"{component}.kubeconfig"

    def pid_file(self, component: str) -> Path:
        return self.state_dir / "pids" / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"


def api_url(ports: Ports) -> str:
    return f"https://{LOOPBACK}:{ports.apiserver}"


def prometheus_url(ports: Ports) -> str:
    return f"http://{LOOPBACK}:{ports.prometheus}"


def etcd_url(ports: Ports) -> str:
    return f"http://{LOOPBACK}:{ports.etcd_client}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render_kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    """A kubeconfig with the credentials embedded, so it can be copied anywhere and still work."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)},
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def etcd_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """Single-member etcd on loopback; no fsync, since a dev cluster's data is disposable and speed matters."""
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(binary),
        f"--name={CLUSTER_NAME}",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={etcd_url(ports)}",
        f"--advertise-client-urls={etcd_url(ports)}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={CLUSTER_NAME}={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-apiserver with client-certificate authentication, RBAC and ServiceAccount token signing.

    The requestheader flags let aggregated API servers (metrics-server, say) trust the API server's
    front-proxy identity, and keep the controller manager and scheduler from logging a missing CA bundle.

    `--endpoint-reconciler-type=none`: the `kubernetes` Service would otherwise get 127.0.0.1 as endpoint,
    which Endpoints validation rejects (loopback), filling the log; nothing in the cluster dials it.

    The audit log records every request of the admin user (see `render_audit_policy`): which client sent
    what, by its User-Agent, so a benchmark counts each controller's requests as the API server saw them.
    """
    pki = layout.pki
    return [
        str(binary),
        f"--etcd-servers={etcd_url(ports)}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--endpoint-reconciler-type=none",
        f"--audit-policy-file={layout.audit_policy}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=1",
        "--allow-privileged=true",
        "--profiling=false",
    ]


def controller_manager_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """All default controllers (deployment, replicaset, garbage collector, serviceaccount-token, ...),
    each with its own ServiceAccount credentials, as kubeadm runs them, so RBAC is exercised for real."""
    kubeconfig = layout.component_kubeconfig("controller-manager")
    pki = layout.pki
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        "--controllers=*",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--cluster-name={CLUSTER_NAME}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--kube-api-qps={CONTROL_PLANE_CLIENT_QPS}",
        f"--kube-api-burst={2 * CONTROL_PLANE_CLIENT_QPS}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def scheduler_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """The default scheduler profile: the real NodeResourcesFit plugin decides where GPU pods fit."""
    kubeconfig = layout.component_kubeconfig("scheduler")
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        f"--kube-api-qps={CONTROL_PLANE_CLIENT_QPS}",
        f"--kube-api-burst={2 * CONTROL_PLANE_CLIENT_QPS}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kwok manages only nodes annotated `kwok.x-k8s.io/node=fake`, so a real node could never be touched."""
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--server-address={LOOPBACK}:{ports.kwok}",
        "--node-lease-duration-seconds=40",
    ]


def prometheus_command(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """`--web.enable-lifecycle` lets a test POST /-/reload after rewriting the config."""
    return [
        str(binary),
        f"--config.file={layout.prometheus_config}",
        f"--storage.tsdb.path={layout.prometheus_dir / 'data'}",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address={LOOPBACK}:{ports.prometheus}",
        "--web.enable-lifecycle",
    ]


def render_prometheus_config(layout: Layout, ports: Ports, scrape_interval: str) -> str:
    """Scrape Prometheus itself, etcd and the API server, plus every target group in `file_sd/*.json`.

    Later issues drop JSON target groups into `file_sd/` (picked up within 5 s, no reload). A group's
    labels may set `job`, which then wins over this job's name.
    """
    pki = layout.pki
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": [f"{LOOPBACK}:{ports.prometheus}"]}]},
            {"job_name": "etcd", "static_configs": [{"targets": [f"{LOOPBACK}:{ports.etcd_client}"]}]},
            {
                "job_name": "kube-apiserver",
                "scheme": "https",
                "tls_config": {
                    "ca_file": str(pki / "ca.crt"),
                    "cert_file": str(pki / "prometheus.crt"),
                    "key_file": str(pki / "prometheus.key"),
                },
                "static_configs": [{"targets": [f"{LOOPBACK}:{ports.apiserver}"]}],
            },
            {
                "job_name": "file-sd",
                "file_sd_configs": [{"files": [str(layout.file_sd_dir / "*.json")], "refresh_interval": "5s"}],
            },
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def render_audit_policy() -> str:
    """Requests of the admin user, one event each when received (verb, resource, User-Agent); nothing else.

    The control plane's own components (their own identities) and ServiceAccounts are left out: they make
    most requests, and no test or benchmark asks about them.
    """
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
        "rules": [{"level": "Metadata", "users": [ADMIN_USER]}, {"level": "None"}],
    }
    return yaml.safe_dump(policy, sort_keys=False)


SIMULATOR_RUN_LABEL = LABEL_PREFLIGHT
"""Pods with this label (preflight Jobs') are run by `specfleet sim`, which reports their exit: kwok's
pod-complete stage, which would mark every Job pod Succeeded, leaves them alone."""


def render_kwok_config(stage_documents: list[dict[str, Any]], pod_ready_delay_ms: int) -> str:
    """kwok's config file: the upstream stages, with the pod-ready stage held back by `pod_ready_delay_ms` and
    the pod-complete stage keeping off the pods the simulator runs.

    The delay mimics a model server loading weights; a pod can override it with kwok's own annotation
    `pod-ready.stage.kwok.x-k8s.io/delay` (a duration such as "20s").
    """
    documents = []
    for stage in stage_documents:
        if stage["metadata"]["name"] == "pod-ready":
            stage = {
                **stage,
                "spec": {
                    **stage["spec"],
                    "delay": {
                        "durationMilliseconds": pod_ready_delay_ms,
                        "durationFrom": {
                            "expressionFrom": '.metadata.annotations["pod-ready.stage.kwok.x-k8s.io/delay"]'
                        },
                    },
                },
            }
        elif stage["metadata"]["name"] == "pod-complete":
            selector = stage["spec"].get("selector") or {}
            not_run_here = {"key": f'.metadata.labels["{SIMULATOR_RUN_LABEL}"]', "operator": "DoesNotExist"}
            expressions = [*selector.get("matchExpressions", []), not_run_here]
            stage = {**stage, "spec": {**stage["spec"], "selector": {**selector, "matchExpressions": expressions}}}
        documents.append(stage)
    return yaml.safe_dump_all(documents, sort_keys=False)


def pod_ready_delay_ms(kwok_config: str) -> int:
    """The pod-ready delay a rendered kwok config holds (0 when none), to render it again the same way."""
    for stage in yaml.safe_load_all(kwok_config):
        if stage and stage.get("metadata", {}).get("name") == "pod-ready":
            return int(stage["spec"].get("delay", {}).get("durationMilliseconds", 0))
    return 0
