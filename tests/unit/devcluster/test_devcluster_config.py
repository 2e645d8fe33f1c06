"""Command lines and config files of the dev cluster: loopback only, RBAC, ServiceAccount keys, file_sd."""

from pathlib import Path

import yaml

from specfleet_workshop.devcluster import config
from specfleet_workshop.devcluster.config import Layout, Ports

LAYOUT = Layout(Path("/state"))
PORTS = Ports()
BIN = Path("/bin/x")


def _flags(command: list[str]) -> dict[str, str]:
    return dict(item.removeprefix("--").split("=", 1) for item in command[1:] if "=" in item)


def test_every_listener_is_bound_to_loopback() -> None:
    commands = [
        config.etcd_command(BIN, LAYOUT, PORTS),
        config.apiserver_command(BIN, LAYOUT, PORTS),
        config.controller_manager_command(BIN, LAYOUT, PORTS),
        config.scheduler_command(BIN, LAYOUT, PORTS),
        config.kwok_command(BIN, LAYOUT, PORTS),
        config.prometheus_command(BIN, LAYOUT, PORTS),
    ]
    listen_flags = ("bind-address", "listen-client-urls", "listen-peer-urls", "server-address", "web.listen-address")
    seen = 0
    for command in commands:
        for name, value in _flags(command).items():
            if name in listen_flags:
                seen += 1
                assert "127.0.0.1" in value and "0.0.0.0" not in value, (name, value)
    assert seen == 7


def test_apiserver_uses_rbac_and_service_account_keys() -> None:
    flags = _flags(config.apiserver_command(BIN, LAYOUT, PORTS))
    assert flags["authorization-mode"] == "RBAC"
    assert flags["service-account-issuer"] == config.SERVICE_ACCOUNT_ISSUER
    assert flags["service-account-key-file"] == "/state/pki/sa.pub"
    assert flags["service-account-signing-key-file"] == "/state/pki/sa.key"
    assert flags["client-ca-file"] == "/state/pki/ca.crt"
    assert flags["etcd-servers"] == f"http://127.0.0.1:{PORTS.etcd_client}"
    assert flags["secure-port"] == str(PORTS.apiserver)


def test_controller_manager_runs_all_controllers_with_token_signing() -> None:
    flags = _flags(config.controller_manager_command(BIN, LAYOUT, PORTS))
    assert flags["controllers"] == "*"
    assert flags["service-account-private-key-file"] == "/state/pki/sa.key"
    assert flags["use-service-account-credentials"] == "true"
    assert flags["kubeconfig"] == "/state/kubeconfigs/controller-manager.kubeconfig"


def test_the_control_plane_does_not_throttle_itself_below_fleet_scale() -> None:
    for command in (config.controller_manager_command, config.scheduler_command):
        flags = _flags(command(BIN, LAYOUT, PORTS))
        assert float(flags["kube-api-qps"]) >= 200 and int(flags["kube-api-burst"]) >= 400


def test_the_api_server_audits_the_admin_user_only_one_event_per_request() -> None:
    flags = _flags(config.apiserver_command(BIN, LAYOUT, PORTS))
    assert flags["audit-policy-file"] == "/state/audit-policy.yaml"
    assert flags["audit-log-path"] == "/state/logs/audit.log" and flags["audit-log-format"] == "json"
    policy = yaml.safe_load(config.render_audit_policy())
    assert policy["kind"] == "Policy"
    assert set(policy["omitStages"]) == {"ResponseStarted", "ResponseComplete", "Panic"}  # RequestReceived only
    assert policy["rules"] == [{"level": "Metadata", "users": [config.ADMIN_USER]}, {"level": "None"}]


def test_kwok_only_manages_annotated_nodes() -> None:
    flags = _flags(config.kwok_command(BIN, LAYOUT, PORTS))
    assert flags["manage-all-nodes"] == "false"
    assert flags["manage-nodes-with-annotation-selector"] == "kwok.x-k8s.io/node=fake"


def test_prometheus_reads_file_sd_every_5s_and_can_reload() -> None:
    assert "--web.enable-lifecycle" in config.prometheus_command(BIN, LAYOUT, PORTS)
    assert _flags(config.prometheus_command(BIN, LAYOUT, PORTS))["storage.tsdb.path"] == "/state/prometheus/data"
    rendered = yaml.safe_load(config.render_prometheus_config(LAYOUT, PORTS, "7s"))
    assert rendered["global"]["scrape_interval"] == "7s"
    jobs = {job["job_name"]: job for job in rendered["scrape_configs"]}
    assert jobs["file-sd"]["file_sd_configs"] == [
        {"files": ["/state/prometheus/file_sd/*.json"], "refresh_interval": "5s"}
    ]
    assert jobs["kube-apiserver"]["tls_config"]["cert_file"] == "/state/pki/prometheus.crt"


def test_kubeconfig_embeds_credentials() -> None:
    rendered = yaml.safe_load(config.render_kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me"))
    assert rendered["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1", "certificate-authority-data": "Q0E="}
    assert rendered["users"][0]["user"]["client-key-data"] == "S0VZ"
    assert rendered["current-context"] == config.CLUSTER_NAME


def test_kwok_config_delays_only_the_pod_ready_stage() -> None:
    stages = [
        {"kind": "Stage", "metadata": {"name": "node-initialize"}, "spec": {"next": {}}},
        {"kind": "Stage", "metadata": {"name": "pod-ready"}, "spec": {"next": {}}},
    ]
    documents = list(yaml.safe_load_all(config.render_kwok_config(stages, 20_000)))
    assert "delay" not in documents[0]["spec"]
    assert documents[1]["spec"]["delay"]["durationMilliseconds"] == 20_000
    assert "pod-ready.stage.kwok.x-k8s.io/delay" in documents[1]["spec"]["delay"]["durationFrom"]["expressionFrom"]
    assert "delay" not in stages[1]["spec"], "the input stages stay untouched"


def test_kwok_never_completes_the_pods_the_simulator_runs_and_the_delay_reads_back() -> None:
    """A preflight Job's pod must end as its command ended (the simulator reports it), not as kwok's pod-complete
    stage would end any Job pod: Succeeded at once."""
    complete = {
        "kind": "Stage",
        "metadata": {"name": "pod-complete"},
        "spec": {"selector": {"matchExpressions": [{"key": ".status.phase", "operator": "In", "values": ["Running"]}]}},
    }
    ready = {"kind": "Stage", "metadata": {"name": "pod-ready"}, "spec": {"next": {}}}
    rendered = config.render_kwok_config([complete, ready], 7_000)
    stage = next(d for d in yaml.safe_load_all(rendered) if d["metadata"]["name"] == "pod-complete")
    assert stage["spec"]["selector"]["matchExpressions"] == [
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": '.metadata.labels["specfleet.io/preflight"]', "operator": "DoesNotExist"},
    ]
    assert config.pod_ready_delay_ms(rendered) == 7_000
    assert config.render_kwok_config([complete, ready], config.pod_ready_delay_ms(rendered)) == rendered


def test_free_ports_are_distinct_and_ports_round_trip() -> None:
    ports = config.free_ports()
    assert len(set(ports.as_dict().values())) == len(ports.as_dict())
    assert Ports.from_dict(ports.as_dict()) == ports
