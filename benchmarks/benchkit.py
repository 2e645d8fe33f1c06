"""What the benchmark scripts share: a cluster with the CRD installed, a Prometheus of one's own, processes,
waits, ports, percentiles, markdown tables.

The cluster's modules (the Kubernetes library, the dev cluster) load where a cluster is made, so the
simulation-only benchmarks (judge_roc, autotune_regret) can use the rest without paying for them.
"""

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specfleet.api.vocabulary import API_VERSION, KIND
from specfleet_workshop.devcluster.process import signals_as_interrupts, signals_deferred, signals_ignored
from specfleet_workshop.fleetpods.loopback import free_port

if TYPE_CHECKING:
    from specfleet_workshop.devcluster.cluster import ClusterInfo

ROOT = Path(__file__).resolve().parents[1]


def cluster_with_crd(state_dir: Path, mi300x_nodes: int) -> tuple["ClusterInfo", str]:
    """A dev cluster of its own (free ports) with the CRD Established, and a fresh namespace in it."""
    import kubernetes

    from specfleet_workshop.devcluster.cluster import up
    from specfleet_workshop.devcluster.config import free_ports
    from specfleet_workshop.devcluster.crds import apply_crds
    from specfleet_workshop.devcluster.nodes import pool_from_counts

    cluster = up(state_dir, pool=pool_from_counts(mi300x=mi300x_nodes, mi325x=0, mi355x=0, cpu=1), ports=free_ports())
    apply_crds(cluster, [ROOT / "crds" / "specfleet.io_speculativedeployments.yaml"])
    namespace = f"bench-{free_port()}"
    kubernetes.client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {"name": namespace}})
    return cluster, namespace


def one_replica_fleet(name: str, speculative: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A one-replica Llama 3.1 8B SpeculativeDeployment on MI300X (one GPU), with extra spec fields."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculative": speculative,
            "accelerator": {"productNames": ["AMD_Instinct_MI300X_OAM"]},
            **spec,
        },
    }


def wait_until(what: str, check: Callable[[], bool], timeout: float, *, interval: float = 2.0) -> None:
    """Poll `check` every `interval` seconds until it holds; end the run (SystemExit) after `timeout`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class ProcessUsage:
    cpu_seconds: float
    """User and system time so far."""
    rss_mib: float
    peak_rss_mib: float


def process_usage(pid: int) -> ProcessUsage:
    """What a live process has used so far, from /proc (the controllers measured run on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return ProcessUsage(
        cpu_seconds=(int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
        rss_mib=int(status["VmRSS"].split()[0]) / 1024,  # kB
        peak_rss_mib=int(status["VmHWM"].split()[0]) / 1024,
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@contextlib.contextmanager
def cluster_session(state_dir: Path, mi300x_nodes: int, *, keep: bool = False) -> Iterator[tuple["ClusterInfo", str]]:
    """`cluster_with_crd` that always ends: a fresh dev cluster in `state_dir`, taken down when the block ends
    (success, exception, Ctrl-C, SIGTERM), or with `keep=True` left running with the command that stops it.

    A cluster left in `state_dir` by an earlier run is taken down first, so every run measures a fresh one.
    Never the default dev cluster's directory: other people's tests use that cluster.
    """
    from specfleet_workshop.devcluster.cluster import down, load_info
    from specfleet_workshop.devcluster.config import Layout
    from specfleet_workshop.devcluster.paths import default_state_dir

    state_dir = state_dir.absolute()
    if state_dir == default_state_dir().absolute():
        raise SystemExit(f"{state_dir} is the default dev cluster's state directory: give the benchmark its own")
    with signals_as_interrupts():
        try:
            if Layout(state_dir).marker.exists():
                print(f"taking down the cluster an earlier run left in {state_dir}", file=sys.stderr)
                down(state_dir)
            yield cluster_with_crd(state_dir, mi300x_nodes)
        finally:
            with signals_ignored():
                if keep and load_info(state_dir) is not None:
                    print(f"cluster kept (--keep); stop it with: specfleet dev down --state-dir {state_dir}",
                          file=sys.stderr)  # fmt: skip
                else:
                    stopped = down(state_dir)
                    print(f"dev cluster in {state_dir} stopped ({len(stopped)} processes)", file=sys.stderr)


class PrivatePrometheus:
    """A real Prometheus of its own over the file_sd target files in `targets` (the dev cluster's directory, or
    one run's simulator's), which its owner may stop or pause without disturbing anyone sharing the cluster.

    With `remote_write` (a receiver's URL) it runs in agent mode: it scrapes and forwards every sample there,
    and answers no queries. With `targets` None it scrapes nothing and receives remote writes: the store an
    agent feeds, which keeps answering with what it has when the agent stops (a pipeline lagging behind).
    """

    def __init__(
        self, targets: Path | None, workdir: Path, *, scrape_interval: str = "5s", remote_write: str | None = None
    ) -> None:
        import urllib.request

        import yaml

        from specfleet_workshop.devcluster.binaries import find_prometheus

        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config: dict[str, Any] = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [],
        }
        if targets is not None:
            sd = {"files": [f"{targets}/*.json"], "refresh_interval": scrape_interval}
            config["scrape_configs"] = [{"job_name": "vllm", "file_sd_configs": [sd]}]
        if remote_write is not None:
            # sent within a second of their scrape, so the store is behind only when the agent is
            config["remote_write"] = [{"url": remote_write, "queue_config": {"batch_send_deadline": "1s"}}]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        command = [
            str(find_prometheus()),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        if remote_write is not None:
            command += ["--enable-feature=agent", f"--storage.agent.path={workdir / 'wal'}"]
        else:
            command += [f"--storage.tsdb.path={workdir / 'tsdb'}"]
        if targets is None:
            command += ["--web.enable-remote-write-receiver"]
        self._log = (workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            try:
                return urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200
            except OSError:
                return False

        try:
            wait_until("Prometheus ready", ready, timeout=60, interval=0.5)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop it (a paused one too) and reap it; again is harmless."""
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL ends a SIGSTOPped process too; nothing in its data is kept
            self.process.wait(timeout=30)
        self._log.close()

    def __enter__(self) -> "PrivatePrometheus":
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _at_priority(priority: int) -> Callable[[], None]:
    """A child's `preexec_fn` that sets its nice value, or leaves the default when it may not."""

    def set_priority() -> None:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, priority)

    return set_priority


@contextlib.contextmanager
def background(
    commands: dict[str, list[str]],
    logs: Path,
    *,
    keep: bool = False,
    environments: dict[str, dict[str, str]] | None = None,
    nice: dict[str, int] | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start each command, its output in `logs/<name>.log` and `environments[name]` added to its environment,
    at scheduling priority `nice[name]` when given (a negative one needs root: without it the command runs at
    the default and a line says so); when the block ends, SIGTERM them (SIGKILL after 30 s) and reap them, or
    with `keep=True` leave them running and print their pids."""
    logs.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with signals_deferred(), (logs / f"{name}.log").open("wb") as log:  # started means in `started`
                environment = {**os.environ, **(environments or {}).get(name, {})}
                priority = (nice or {}).get(name)
                prepare = None if priority is None else _at_priority(priority)
                started.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                                preexec_fn=prepare))  # fmt: skip
                if priority is not None and os.getpriority(os.PRIO_PROCESS, started[-1].pid) != priority:
                    print(f"{name} runs at the default priority: nice {priority} needs root", file=sys.stderr)
        yield started
    finally:
        with signals_ignored():
            if keep:
                pids = ", ".join(f"{name} {child.pid}" for name, child in zip(commands, started, strict=False))
                print(f"processes kept (--keep): {pids}; stop them with: kill {' '.join(str(c.pid) for c in started)}",
                      file=sys.stderr)  # fmt: skip
            else:
                for child in started:
                    if child.poll() is None:
                        child.terminate()
                for child in started:
                    try:
                        child.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        child.wait()
