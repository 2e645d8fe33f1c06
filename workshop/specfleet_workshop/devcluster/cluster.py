"""Public API of the dev cluster: `up`, `down`, `status`, `load_info`, and the `ClusterInfo` they describe.

    from specfleet_workshop.devcluster.cluster import up, down
    info = up()                              # reuses a healthy cluster in about a second, restarts dead parts
    api = info.api_client()                  # kubernetes.client.ApiClient with admin rights
    (info.file_sd_dir / "canary.json").write_text(...)   # Prometheus scrapes it within 5 s

This is the thin imperative shell: the flags, files and node objects come from pure modules
(`config`, `pki`, `nodes`); processes are handled by `process` through pid files.
"""

import json
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from rich.console import Console

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster import config, process
from specfleet_workshop.devcluster.binaries import (
    COMPONENTS,
    CONTROL_PLANE,
    TOOLS,
    find_prometheus,
    prometheus_version,
)
from specfleet_workshop.devcluster.build import GoBuilder, kwok_stage_dir
from specfleet_workshop.devcluster.config import Layout, Ports
from specfleet_workshop.devcluster.nodes import DEFAULT_POOL, NodePool, node_manifests
from specfleet_workshop.devcluster.paths import default_state_dir
from specfleet_workshop.devcluster.pki import create_pki

PROCESSES = (*CONTROL_PLANE, "prometheus")
"""What `up` starts, in start order; `down` stops them in reverse."""

_PORT_OF = {
    "etcd": "etcd_client",
    "kube-apiserver": "apiserver",
    "kube-controller-manager": "controller_manager",
    "kube-scheduler": "scheduler",
    "kwok": "kwok",
    "prometheus": "prometheus",
}


class ClusterError(RuntimeError):
    """The cluster could not be started or is not there; the message says why and where the logs are."""


@dataclass(frozen=True)
class ClusterInfo:
    """How to reach a running dev cluster."""

    state_dir: Path
    kubeconfig: Path
    api_url: str
    prometheus_url: str
    file_sd_dir: Path
    ports: Ports
    binaries: dict[str, Path]
    versions: dict[str, str]
    node_names: tuple[str, ...]

    @property
    def kubectl(self) -> Path:
        """kubectl at the pinned Kubernetes version (not the machine's older /usr/bin/kubectl)."""
        return self.binaries["kubectl"]

    @property
    def helm(self) -> Path:
        return self.binaries["helm"]

    def api_client(self) -> kubernetes.client.ApiClient:
        """A client with the admin credentials of the kubeconfig (group system:masters)."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def to_json(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "api_url": self.api_url,
            "prometheus_url": self.prometheus_url,
            "file_sd_dir": str(self.file_sd_dir),
            "ports": self.ports.as_dict(),
            "binaries": {name: str(path) for name, path in self.binaries.items()},
            "versions": self.versions,
            "node_names": list(self.node_names),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ClusterInfo":
        return cls(
            state_dir=Path(data["state_dir"]),
            kubeconfig=Path(data["kubeconfig"]),
            api_url=data["api_url"],
            prometheus_url=data["prometheus_url"],
            file_sd_dir=Path(data["file_sd_dir"]),
            ports=Ports.from_dict(data["ports"]),
            binaries={name: Path(path) for name, path in data["binaries"].items()},
            versions=dict(data["versions"]),
            node_names=tuple(data["node_names"]),
        )


@dataclass(frozen=True)
class ComponentStatus:
    """One process of the cluster as `dev status` shows it."""

    name: str
    version: str
    port: int
    pid: int | None
    running: bool
    healthy: bool
    rss_bytes: int | None
    restarts: int = 0

    @property
    def health(self) -> str:
        """One word for people: healthy, unhealthy (runs but fails its check), dead, or missing (no pid file)."""
        if self.running:
            return "healthy" if self.healthy else "unhealthy"
        return "dead" if self.pid is not None else "missing"


@dataclass(frozen=True)
class ClusterStatus:
    """What runs for one state directory; `info` is None when no cluster was ever brought up there."""

    state_dir: Path
    info: ClusterInfo | None
    components: tuple[ComponentStatus, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return bool(self.components) and all(item.running and item.healthy for item in self.components)


def _state_dir(state_dir: Path | None) -> Path:
    return (state_dir or default_state_dir()).expanduser().absolute()


def load_info(state_dir: Path | None = None) -> ClusterInfo | None:
    """The recorded ClusterInfo of a cluster brought up in `state_dir`, or None (it may have died since)."""
    layout = Layout(_state_dir(state_dir))
    try:
        return ClusterInfo.from_json(json.loads(layout.cluster_file.read_text()))
    except (OSError, ValueError, KeyError):
        return None


def _client_ssl_context(layout: Layout) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    return context


def _self_signed_ssl_context() -> ssl.SSLContext:
    """Controller manager and scheduler serve /healthz with a certificate they generate themselves."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _http_ok(url: str, context: ssl.SSLContext | None = None, expect: str | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:
            body = response.read().decode(errors="replace")
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False
    return expect is None or expect in body


def _health_checks(layout: Layout, ports: Ports) -> dict[str, Callable[[], bool]]:
    base = f"https://{config.LOOPBACK}"
    return {
        "etcd": lambda: _http_ok(f"{config.etcd_url(ports)}/health", expect='"health":"true"'),
        "kube-apiserver": lambda: _http_ok(f"{config.api_url(ports)}/readyz", _client_ssl_context(layout)),
        "kube-controller-manager": lambda: _http_ok(
            f"{base}:{ports.controller_manager}/healthz", _self_signed_ssl_context()
        ),
        "kube-scheduler": lambda: _http_ok(f"{base}:{ports.scheduler}/healthz", _self_signed_ssl_context()),
        "kwok": lambda: _http_ok(f"http://{config.LOOPBACK}:{ports.kwok}/healthz"),
        "prometheus": lambda: _http_ok(f"{config.prometheus_url(ports)}/-/ready"),
    }


def status(state_dir: Path | None = None) -> ClusterStatus:
    """Pid, port, version, health and memory of every process of the cluster in `state_dir`."""
    layout = Layout(_state_dir(state_dir))
    info = load_info(layout.state_dir)
    if info is None:
        return ClusterStatus(layout.state_dir, None)
    checks = _health_checks(layout, info.ports)
    components = []
    for name in PROCESSES:
        record = process.read_record(layout.pid_file(name))
        running = record is not None and process.is_alive(record)
        components.append(
            ComponentStatus(
                name=name,
                version=info.versions.get(name, "unknown"),
                port=getattr(info.ports, _PORT_OF[name]),
                pid=record.pid if record else None,
                running=running,
                healthy=running and checks[name](),
                rss_bytes=process.rss_bytes(record.pid) if record and running else None,
                restarts=record.restarts if record else 0,
            )
        )
    return ClusterStatus(layout.state_dir, info, tuple(components))


def down(state_dir: Path | None = None) -> list[str]:
    """Stop the processes recorded in the pid files (nothing else) and delete the state directory.

    Returns the names of the processes that were still running.
    """
    layout = Layout(_state_dir(state_dir))
    if not layout.state_dir.exists():
        return []
    if not layout.marker.exists():
        raise ClusterError(f"{layout.state_dir} is not a specfleet dev cluster state directory; not touching it")
    stopped = [name for name in reversed(PROCESSES) if process.stop(layout.pid_file(name))]
    shutil.rmtree(layout.state_dir)
    return stopped


def _wait_for(what: str, check: Callable[[], bool], timeout: float, layout: Layout, names: tuple[str, ...]) -> None:
    """Poll `check` until it holds; fail early, with the log tail, if one of `names` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for name in names:
            record = process.read_record(layout.pid_file(name))
            if record is None or not process.is_alive(record):
                raise ClusterError(f"{name} exited while waiting for {what}:\n{_log_tail(layout, name)}")
        time.sleep(0.2)
    raise ClusterError(
        f"timed out after {timeout:.0f}s waiting for {what}; logs: {layout.state_dir / 'logs'}\n"
        + "\n".join(_log_tail(layout, name) for name in names)
    )


def _log_tail(layout: Layout, name: str, lines: int = 15) -> str:
    try:
        tail = layout.log_file(name).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"({name}: no log)"
    return f"--- {layout.log_file(name)} (last {len(tail)} lines) ---\n" + "\n".join(tail)


def _bind_once(port: int) -> None:
    """Raise OSError if a server could not listen on `port` now.

    Like the servers themselves: a port in TIME_WAIT after `down` is free, a listener is not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.LOOPBACK, port))


def _check_ports_free(ports: Ports) -> None:
    for name, port in ports.as_dict().items():
        try:
            _bind_once(port)
        except OSError as error:
            raise ClusterError(
                f"port {port} ({name}) on {config.LOOPBACK} is in use: another dev cluster or program holds it. "
                "Stop it (`specfleet dev down`, maybe with --state-dir) or start with --free-ports."
            ) from error


def _write_kubeconfigs(layout: Layout, ports: Ports) -> None:
    pki = layout.pki
    ca = (pki / "ca.crt").read_bytes()

    def render(certificate: str, user: str) -> str:
        return config.render_kubeconfig(
            config.api_url(ports), ca, (pki / f"{certificate}.crt").read_bytes(),
            (pki / f"{certificate}.key").read_bytes(), user,
        )  # fmt: skip

    layout.kubeconfig.write_text(render("admin", config.ADMIN_USER))
    layout.kubeconfig.chmod(0o600)
    for component in ("controller-manager", "scheduler", "kwok"):
        path = layout.component_kubeconfig(component)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(component, component))
        path.chmod(0o600)


def _write_configs(
    layout: Layout, ports: Ports, stage_dir: Path, scrape_interval: str, pod_ready_delay_ms: int
) -> None:
    stages = [yaml.safe_load(path.read_text()) for path in sorted(stage_dir.glob("*.yaml"))]
    layout.kwok_config.parent.mkdir(parents=True, exist_ok=True)
    layout.kwok_config.write_text(config.render_kwok_config(stages, pod_ready_delay_ms))
    layout.file_sd_dir.mkdir(parents=True, exist_ok=True)
    layout.prometheus_config.write_text(config.render_prometheus_config(layout, ports, scrape_interval))
    layout.audit_policy.write_text(config.render_audit_policy())


def _ensure_nodes(api: kubernetes.client.ApiClient, pool: NodePool) -> tuple[str, ...]:
    """Create the pool's nodes that do not exist yet (nodes are never removed, so `up` can grow a pool)."""
    core = kubernetes.client.CoreV1Api(api)
    existing = {_node_name(node) for node in core.list_node().items}
    manifests = node_manifests(pool)
    for manifest in manifests:
        if manifest["metadata"]["name"] not in existing:
            core.create_node(manifest)  # type: ignore[arg-type]  # the client sends a dict as it is (status included)
    return tuple(manifest["metadata"]["name"] for manifest in manifests)


def _nodes_ready(api: kubernetes.client.ApiClient, names: tuple[str, ...]) -> bool:
    ready = {
        _node_name(node)
        for node in kubernetes.client.CoreV1Api(api).list_node().items
        if node.status is not None  # no status yet: not Ready
        and any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    }
    return ready.issuperset(names)


def _node_name(node: kubernetes.client.V1Node) -> str | None:
    if node.metadata is None:
        raise ValueError("the API server listed a node without metadata")
    return node.metadata.name


def _default_service_account_exists(api: kubernetes.client.ApiClient) -> bool:
    """Pods are refused until the serviceaccount controller has made `default/default`."""
    try:
        kubernetes.client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    except kubernetes.client.ApiException:
        return False
    return True


def _write_cluster_file(layout: Layout, info: ClusterInfo) -> None:
    """What `load_info` reads back; written last, so its presence means the cluster came up completely."""
    layout.cluster_file.write_text(
        json.dumps({**info.to_json(), "written_at": datetime.now(UTC).isoformat()}, indent=2)
    )


_COMMANDS: dict[str, Callable[[Path, Layout, Ports], list[str]]] = {
    "etcd": config.etcd_command,
    "kube-apiserver": config.apiserver_command,
    "kube-controller-manager": config.controller_manager_command,
    "kube-scheduler": config.scheduler_command,
    "kwok": config.kwok_command,
    "prometheus": config.prometheus_command,
}
"""How each process's command line is rendered when a cluster is created (and recorded in its pid file)."""

_LISTENERS = {**{name: (field_name,) for name, field_name in _PORT_OF.items()}, "etcd": ("etcd_client", "etcd_peer")}

UNHEALTHY_GRACE = 30.0
"""Seconds a running but unhealthy component gets to recover (an API server whose etcd just came back)."""


def unusable_reason(layout: Layout, info: ClusterInfo | None) -> str | None:
    """Why the state in `layout` cannot be restarted in place (so only recreating it helps), or None.

    Restarting keeps etcd's data and the PKI, so both must be there, with the files every command line
    names and the binaries the cluster was made with.
    """
    if info is None:
        return f"{layout.cluster_file.name} is missing or unreadable (an earlier `up` did not finish)"
    needed = [
        layout.kubeconfig,
        *(layout.pki / name for name in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")),
        *(layout.component_kubeconfig(name) for name in ("controller-manager", "scheduler", "kwok")),
        layout.etcd_data / "member",
        layout.kwok_config,
        layout.prometheus_config,
    ]
    for path in needed:
        if not path.exists():
            return f"{path} is missing"
    for name in PROCESSES:
        binary = info.binaries.get(name)
        if binary is None or not binary.exists():
            return f"the {name} binary it was made with ({binary}) is gone"
    return None


def _refresh_kwok_config(layout: Layout, console: Console) -> None:
    """Render kwok's config again (with the pod-ready delay it was made with) and restart kwok when it differs,
    so a cluster made by an older specfleet gets the stages this one needs (kwok keeps no state of its own)."""
    current = layout.kwok_config.read_text()
    stages = [yaml.safe_load(path.read_text()) for path in sorted(kwok_stage_dir(cache_root()).glob("*.yaml"))]
    wanted = config.render_kwok_config(stages, config.pod_ready_delay_ms(current))
    if not stages or wanted == current:
        return
    layout.kwok_config.write_text(wanted)
    stop_component(layout.state_dir, "kwok")
    start_component(layout.state_dir, "kwok")
    console.print("kwok's stages were out of date: rewrote its config and restarted it")


def _reuse(layout: Layout, info: ClusterInfo, pool: NodePool, timeout: float, console: Console) -> ClusterInfo:
    """Bring kwok's stages up to date, add the pool's missing nodes to a healthy cluster and wait until they are
    Ready."""
    _refresh_kwok_config(layout, console)
    api = info.api_client()
    try:
        node_names = _ensure_nodes(api, pool)
        _wait_for("fake nodes Ready", lambda: _nodes_ready(api, node_names), timeout, layout, ("kwok",))
    finally:
        api.close()
    added = tuple(name for name in node_names if name not in info.node_names)
    if added:
        info = replace(info, node_names=info.node_names + added)
        _write_cluster_file(layout, info)
    return info


def _recorded_command(layout: Layout, info: ClusterInfo, name: str) -> list[str]:
    """The command line the component last ran with (its pid file), else the one its cluster.json implies."""
    record = process.read_record(layout.pid_file(name))
    if record is not None and record.command:
        return record.command
    return _COMMANDS[name](info.binaries[name], layout, info.ports)


def _check_component_ports_free(info: ClusterInfo, name: str) -> None:
    for field_name in _LISTENERS[name]:
        port = getattr(info.ports, field_name)
        try:
            _bind_once(port)
        except OSError as error:
            raise ClusterError(
                f"cannot restart {name}: its port {port} on {config.LOOPBACK} is held by another program. "
                f"Stop that program, or start over with `specfleet dev up --recreate --free-ports` "
                f"(this cluster's objects are then lost)."
            ) from error


def _poll(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def start_component(state_dir: Path | None, name: str, timeout: float = 180.0) -> process.ProcessRecord:
    """Start one component of an existing cluster again with its recorded command line; wait until healthy.

    Its pid file is rewritten (with the restart counted), so `down` stops the new process.
    """
    layout = Layout(_state_dir(state_dir))
    info = load_info(layout.state_dir)
    if info is None:
        raise ClusterError(f"no dev cluster in {layout.state_dir}")
    previous = process.read_record(layout.pid_file(name))
    if previous is not None and process.is_alive(previous):
        raise ClusterError(f"{name} is still running (pid {previous.pid}); stop it first")
    _check_component_ports_free(info, name)
    command = _recorded_command(layout, info, name)
    restarts = previous.restarts + 1 if previous else 1
    record = process.start(command, layout.pid_file(name), layout.log_file(name), restarts=restarts)
    _wait_for(f"{name} health", _health_checks(layout, info.ports)[name], timeout, layout, (name,))
    return record


def stop_component(state_dir: Path | None, name: str) -> bool:
    """Stop one component by its pid file, keeping the record of its command line; True if it was running."""
    layout = Layout(_state_dir(state_dir))
    pid_file = layout.pid_file(name)
    record = process.read_record(pid_file)
    was_running = process.stop(pid_file)
    if record is not None:  # `process.stop` removed the file; keep the command for `start_component`
        process.write_record(pid_file, record)
    return was_running


def _repair(layout: Layout, current: ClusterStatus, timeout: float, console: Console) -> list[str]:
    """Restart, in start order, each component that is dead or stays unhealthy; keep everything else.

    Returns the names restarted. A component that still runs gets `UNHEALTHY_GRACE` seconds first: an
    API server whose etcd was just restarted recovers by itself.
    """
    assert current.info is not None
    checks = _health_checks(layout, current.info.ports)
    restarted = []
    for item in current.components:
        if item.running and checks[item.name]():
            continue
        if item.running:
            if _poll(checks[item.name], min(UNHEALTHY_GRACE, timeout)):
                continue
            console.print(f"[yellow]{item.name}[/] (pid {item.pid}) runs but fails its health check: restarting it")
            stop_component(layout.state_dir, item.name)
        else:
            was = f"pid {item.pid} is gone" if item.pid else "no pid file"
            console.print(f"[yellow]{item.name}[/] is not running ({was}): restarting it with its recorded command")
        record = start_component(layout.state_dir, item.name, timeout)
        console.print(f"  {item.name} healthy again (pid {record.pid})")
        restarted.append(item.name)
    return restarted


def up(
    state_dir: Path | None = None,
    *,
    pool: NodePool = DEFAULT_POOL,
    ports: Ports | None = None,
    scrape_interval: str = "5s",
    pod_ready_delay_ms: int = 0,
    timeout: float = 180.0,
    console: Console | None = None,
    recreate: bool = False,
) -> ClusterInfo:
    """Start a cluster in `state_dir`, or bring back the one already there.

    A healthy cluster is reused (only missing nodes are added). One with dead or failing components gets
    just those restarted with their recorded command lines, so etcd's data (every object) and the CA stay:
    clients and a running operator carry on. The cluster is recreated from scratch only with
    `recreate=True` or when its state cannot be restarted (`unusable_reason`), and the console says why.

    `ports`, `scrape_interval` and `pod_ready_delay_ms` apply when a cluster is created; a reused cluster
    keeps its own, and a recreated one keeps its ports unless `ports` is given (default: `Ports()`).
    Binaries missing from the cache are built first (many minutes the very first time).
    """
    if console is None:
        from specfleet.console import make_console

        console = make_console(stderr=True)
    layout = Layout(_state_dir(state_dir))
    has_state = layout.state_dir.exists() and any(layout.state_dir.iterdir())
    previous = load_info(layout.state_dir)
    ports = ports or (previous.ports if previous else Ports())
    if has_state and recreate:
        console.print(
            f"[yellow]recreating the cluster in {layout.state_dir} as asked (--recreate)[/]: "
            "its objects, CA and metrics are discarded"
        )
        down(layout.state_dir)
    elif has_state:
        current = status(layout.state_dir)
        if current.healthy and current.info is not None:
            return _reuse(layout, current.info, pool, timeout, console)
        problem = unusable_reason(layout, current.info)
        if problem is None and current.info is not None:
            started = time.monotonic()
            restarted = _repair(layout, current, timeout, console)
            after = status(layout.state_dir).components
            failing = [f"{item.name} {item.health}" for item in after if not item.healthy]
            if failing:
                raise ClusterError(
                    f"after restarting {', '.join(restarted) or 'nothing'}: {', '.join(failing)}; logs in "
                    f"{layout.state_dir / 'logs'}. `specfleet dev up --recreate` starts over (its objects are lost)."
                )
            if restarted:
                console.print(
                    f"[green]dev cluster repaired[/] in {time.monotonic() - started:.1f}s: restarted "
                    f"{', '.join(restarted)}; etcd data and CA kept"
                )
            return _reuse(layout, current.info, pool, timeout, console)
        if layout.marker.exists():
            console.print(f"[yellow]cannot restart the cluster in {layout.state_dir}[/] ({problem}): recreating it")
        down(layout.state_dir)  # refuses a directory that is not a dev cluster's state
    return _start(layout, pool, ports, scrape_interval, pod_ready_delay_ms, timeout, console)


def _start(
    layout: Layout,
    pool: NodePool,
    ports: Ports,
    scrape_interval: str,
    pod_ready_delay_ms: int,
    timeout: float,
    console: Console,
) -> ClusterInfo:
    cache = cache_root()
    prometheus = find_prometheus()  # before a long build: a missing package should fail fast
    binaries = {**GoBuilder(cache, console).ensure(list(TOOLS)), "prometheus": prometheus}
    _check_ports_free(ports)
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    layout.marker.write_text("specfleet dev cluster state; `specfleet dev down` deletes this directory\n")
    started = time.monotonic()
    try:
        with console.status("starting the dev cluster") as progress:
            create_pki(layout.pki, config.KUBERNETES_SERVICE_IP)
            _write_kubeconfigs(layout, ports)
            _write_configs(layout, ports, kwok_stage_dir(cache), scrape_interval, pod_ready_delay_ms)
            checks = _health_checks(layout, ports)

            def launch(*names: str) -> None:
                for name in names:
                    command = _COMMANDS[name](binaries[name], layout, ports)
                    process.start(command, layout.pid_file(name), layout.log_file(name))

            launch("etcd", "prometheus")
            progress.update("waiting for etcd")
            _wait_for("etcd /health", checks["etcd"], timeout, layout, ("etcd",))
            launch("kube-apiserver")
            progress.update("waiting for kube-apiserver /readyz")
            _wait_for("kube-apiserver /readyz", checks["kube-apiserver"], timeout, layout, ("kube-apiserver",))
            launch("kube-controller-manager", "kube-scheduler", "kwok")
            api = kubernetes.config.new_client_from_config(config_file=str(layout.kubeconfig))
            try:
                progress.update(f"creating {pool.node_count} fake nodes")
                node_names = _ensure_nodes(api, pool)
                progress.update("waiting for controllers, scheduler, kwok and Prometheus")
                for name in ("kube-controller-manager", "kube-scheduler", "kwok", "prometheus"):
                    _wait_for(f"{name} health", checks[name], timeout, layout, (name,))
                _wait_for("fake nodes Ready", lambda: _nodes_ready(api, node_names), timeout, layout, ("kwok",))
                _wait_for(
                    "the default ServiceAccount",
                    lambda: _default_service_account_exists(api),
                    timeout,
                    layout,
                    ("kube-controller-manager",),
                )
            finally:
                api.close()
    except BaseException:
        for name in reversed(PROCESSES):
            process.stop(layout.pid_file(name))
        raise
    versions = {name: COMPONENTS[name].version for name in TOOLS}
    versions["prometheus"] = prometheus_version(binaries["prometheus"])
    info = ClusterInfo(
        state_dir=layout.state_dir,
        kubeconfig=layout.kubeconfig,
        api_url=config.api_url(ports),
        prometheus_url=config.prometheus_url(ports),
        file_sd_dir=layout.file_sd_dir,
        ports=ports,
        binaries=binaries,
        versions=versions,
        node_names=node_names,
    )
    _write_cluster_file(layout, info)
    console.print(
        f"[green]dev cluster up[/] in {time.monotonic() - started:.1f}s: {len(node_names)} nodes, "
        f"API {info.api_url}, Prometheus {info.prometheus_url}"
    )
    return info
