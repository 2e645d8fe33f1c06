"""Real `vllm serve` processes for the pods of a namespace, fed with load and scraped by Prometheus.

    engine = RealEngine(home, file_sd_dir=info.file_sd_dir, api_client=info.api_client(), namespaces=["team-a"])
    engine.start()          # watches pods as the simulator does (specfleet_workshop.fleetpods.watch)
    engine.describe()       # each pod: state, port, the translations made, requests sent
    engine.stop()           # SIGTERM every server, remove the file_sd file

A Running pod gets a server started from its rendered argv (`translate`), at most `max_servers` at once
(about 2.5 GiB each); a pod beyond that waits and is reported as over the limit until a slot frees.
Once a server answers /health, its file_sd target (the simulator's labels, path /metrics) is written and
a bounded load of completion requests starts.
"""

import contextlib
import http.client
import json
import logging
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path
from typing import Any

import kubernetes

from specfleet_workshop.fleetpods.loopback import free_port
from specfleet_workshop.fleetpods.pods import PodArgsError, PodInfo, parse_pod, pod_argv
from specfleet_workshop.fleetpods.targets import target_group, write_atomic
from specfleet_workshop.fleetpods.watch import KubePodSource
from specfleet_workshop.realvllm.install import VllmHome
from specfleet_workshop.realvllm.translate import Translation, UntranslatableError, translate

log = logging.getLogger(__name__)

DEFAULT_MAX_SERVERS = 3
"""About 2.5 GiB per server (PSS of the API server and the engine core, which holds the model and a 1 GiB KV cache)."""
STARTUP_SECONDS = 900.0
"""Launch to /health: 45-70 s on 2 idle cores, over 5 minutes when the box is busy (two servers, tests)."""
PORT_ATTEMPTS = 5
"""Launches of one server whose port was taken before vllm serve could bind it (a port is picked free, and
vllm binds it ~30 s later: another process, or an outgoing connection, can take it meanwhile)."""
STOP_SECONDS = 30.0
PROMPTS = (
    "def foo(self): return self.x\n" * 6,
    "import os\nimport sys\n" * 8,
    "for i in range(10):\n    print(i)\n" * 5,
    "the quick brown fox jumps over the lazy dog. " * 6,
    "self.assertEqual(a, b)\nself.assertEqual(a, b)\n" * 4,
)
"""Repetitive prompts, so an n-gram drafter finds matches as it would in code or agentic traffic."""


@dataclass(frozen=True)
class LoadPlan:
    """What each server is sent: `rate` requests a second (fixed arrivals, so a faster server does not get more
    load and the judge compares pods at the same load), at most `concurrency` in flight (arrivals wait when a
    server cannot keep up), greedy with `max_tokens` each, at most `requests` in all."""

    rate: float = 4.0
    concurrency: int = 4
    max_tokens: int = 32
    requests: int = 5000
    prompts: tuple[str, ...] = PROMPTS


class State(StrEnum):
    WAITING = "over-limit"  # no free server slot: reported, started when one frees
    STARTING = "starting"
    SERVING = "serving"
    FAILED = "failed"  # untranslatable, or the server exited


@dataclass
class Server:
    info: PodInfo
    argv: list[str]
    state: State = State.WAITING
    reason: str = ""
    port: int = 0
    translation: Translation | None = None
    process: subprocess.Popen[bytes] | None = None
    sent: int = 0
    failed_requests: int = 0
    launches: int = 0
    log_offset: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def _signal_group(pid: int, signum: int) -> None:
    """Signal the process group `pid` leads (started with start_new_session); gone already is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _get(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


class RealEngine:
    """All servers, their load, the file_sd file, and (optionally) the Kubernetes pod watch."""

    def __init__(
        self,
        home: VllmHome,
        *,
        workdir: Path,
        file_sd_dir: Path | None = None,
        api_client: kubernetes.client.ApiClient | None = None,
        namespaces: Sequence[str] = (),
        max_servers: int = DEFAULT_MAX_SERVERS,
        load: LoadPlan | None = None,
    ) -> None:
        self.home = home
        self.workdir = workdir
        self.file_sd_dir = file_sd_dir
        self.max_servers = max_servers
        self.load = load or LoadPlan()
        self._servers: dict[str, Server] = {}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._source = KubePodSource(api_client, namespaces, self) if api_client is not None else None
        self._written: str | None = None

    @property
    def targets_file(self) -> Path | None:
        return None if self.file_sd_dir is None else self.file_sd_dir / f"specfleet-vllm-{os.getpid()}.json"

    def start(self) -> "RealEngine":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_targets()
        if self._source is not None:
            self._source.start()
        return self

    def stop(self) -> None:
        """Stop the watch, then every server (SIGTERM, SIGKILL after 30 s); remove the targets file."""
        self._stopping.set()
        if self._source is not None:
            self._source.stop()
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
            if self.targets_file is not None:
                self.targets_file.unlink(missing_ok=True)
        for server in servers:
            self._terminate(server)

    def __enter__(self) -> "RealEngine":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # pods (the PodSink interface of KubePodSource)

    def upsert_pod(self, pod: dict[str, Any], node_labels: dict[str, str]) -> None:
        """A Running pod gets a server (or waits for a slot); a pod that stops running loses it."""
        del node_labels  # real vLLM runs on this CPU whatever GPU the fake node has
        try:
            info = parse_pod(pod)
        except PodArgsError as error:
            metadata = pod.get("metadata") or {}
            log.warning("not serving %s/%s: %s", metadata.get("namespace"), metadata.get("name"), error)
            return
        with self._lock:
            known = self._servers.get(info.key)
            if known is not None and (known.info.uid != info.uid or not info.running):
                self._remove(info.key)
                known = None
            if info.running and known is None:
                self._servers[info.key] = Server(info=info, argv=pod_argv(pod))
            elif known is not None:
                known.info = info
            self._schedule()

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._remove(f"{namespace}/{name}")
            self._schedule()

    def replace_pods(self, namespace: str | None, pods: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
        listed = {"{namespace}/{name}".format(**(pod.get("metadata") or {})) for pod, _ in pods}
        with self._lock:
            for key, known in list(self._servers.items()):
                if (namespace is None or known.info.namespace == namespace) and key not in listed:
                    self._remove(key)
            for pod, labels in pods:
                self.upsert_pod(pod, labels)
            self._schedule()

    # what runs

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "pod": key,
                    "track": server.info.track,
                    "state": server.state.value,
                    "reason": server.reason,
                    "url": f"http://127.0.0.1:{server.port}" if server.port else None,
                    "pid": server.process.pid if server.process else None,
                    "log": str(self._log_path(server)),
                    "translations": list(server.translation.changes) if server.translation else [],
                    "requests_sent": server.sent,
                    "requests_failed": server.failed_requests,
                }
                for key, server in self._servers.items()
            ]

    def address_of(self, namespace: str, name: str) -> tuple[HTTPStatus, str]:
        """The pod's server (`realvllm.front`): (OK, its base URL), or why it cannot be called."""
        with self._lock:
            server = self._servers.get(f"{namespace}/{name}")
            if server is None:
                return HTTPStatus.NOT_FOUND, "no such running pod"
            if server.state is not State.SERVING:
                return HTTPStatus.SERVICE_UNAVAILABLE, f"its server is {server.state.value} {server.reason}".strip()
            return HTTPStatus.OK, f"http://127.0.0.1:{server.port}"

    def _log_path(self, server: Server) -> Path:
        return self.workdir / f"{server.info.namespace}_{server.info.name}.log"

    def _schedule(self) -> None:
        """Start waiting pods, in arrival order, while fewer than `max_servers` run; report the rest."""
        if self._stopping.is_set():
            return
        active = sum(s.state in (State.STARTING, State.SERVING) for s in self._servers.values())
        for server in self._servers.values():
            if server.state is not State.WAITING:
                continue
            if active >= self.max_servers:
                reason = f"{self.max_servers} servers already run (--max-servers, ~2.5 GiB each)"
                if server.reason != reason:
                    server.reason = reason
                    log.warning("pod %s not served yet: %s", server.info.key, reason)
                continue
            self._launch(server)
            active += server.state is State.STARTING
        self._write_targets()

    def _launch(self, server: Server) -> None:
        port = free_port()
        try:
            translation = translate(server.argv, self.home.models, port)
        except UntranslatableError as error:
            server.state, server.reason = State.FAILED, str(error)
            log.error("pod %s cannot run on real vLLM: %s", server.info.key, error)
            return
        server.port, server.translation = port, translation
        server.launches += 1
        changes = "; ".join(translation.changes)
        log.info("pod %s: starting vllm serve on port %d; translated: %s", server.info.key, port, changes)
        with self._log_path(server).open("ab") as output:
            server.log_offset = output.tell()
            server.process = subprocess.Popen(
                [str(self.home.vllm), "serve", *translation.argv],
                env=self.home.env(),
                cwd=self.home.scratch,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the engine and worker stop with it
            )
        server.state, server.reason = State.STARTING, ""
        threading.Thread(target=self._supervise, args=(server,), name=f"vllm-{port}", daemon=True).start()

    def _supervise(self, server: Server) -> None:
        """Wait for /health, then publish the target and drive the load until the pod goes."""
        assert server.process is not None
        base = f"http://127.0.0.1:{server.port}"
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _get(f"{base}/health"):
            if server.stop.wait(1.0):
                return
            if server.process.poll() is not None and self._lost_its_port(server):
                _signal_group(server.process.pid, signal.SIGKILL)  # whatever it had started
                with self._lock:
                    taken = (server.info.key, server.port)
                    log.warning("pod %s: port %d was taken before vllm serve bound it: another port", *taken)
                    if not server.stop.is_set():
                        self._launch(server)
                return
            if server.process.poll() is not None or time.monotonic() > deadline:
                self._terminate(server)
                with self._lock:
                    server.state = State.FAILED
                    server.reason = (
                        f"vllm serve exited ({server.process.returncode}) or did not answer /health within "
                        f"{STARTUP_SECONDS:.0f}s; see {self._log_path(server)}"
                    )
                    log.error("pod %s: %s", server.info.key, server.reason)
                    self._schedule()
                return
        with self._lock:
            server.state = State.SERVING
            log.info("pod %s: serving %s", server.info.key, base)
            self._write_targets()
        self._drive(server, base)

    def _lost_its_port(self, server: Server) -> bool:
        """Whether this launch of vllm serve exited because its port was in use, and may be tried again."""
        if server.launches >= PORT_ATTEMPTS:
            return False
        with self._log_path(server).open("rb") as output:
            output.seek(server.log_offset)
            return b"Address already in use" in output.read()

    def _drive(self, server: Server, base: str) -> None:
        """Fixed-interval arrivals until `requests` were sent or the pod goes."""
        slots = threading.Semaphore(self.load.concurrency)
        interval = 1.0 / self.load.rate
        next_at = time.monotonic()
        for number in range(self.load.requests):
            if server.stop.wait(max(0.0, next_at - time.monotonic())):
                return
            next_at += interval
            while not slots.acquire(timeout=1.0):
                if server.stop.is_set():
                    return
            server.sent = number + 1
            threading.Thread(target=self._request, args=(server, base, number, slots), daemon=True).start()

    def _request(self, server: Server, base: str, number: int, slots: threading.Semaphore) -> None:
        body = {
            "model": server.info.args.served_model_name,
            "prompt": self.load.prompts[number % len(self.load.prompts)],
            "max_tokens": self.load.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }
        request = urllib.request.Request(
            f"{base}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
        except (OSError, http.client.HTTPException) as error:  # refused, timed out, or an answer cut short
            with self._lock:
                server.failed_requests += 1
            log.debug("request to %s failed: %s", base, error)
        finally:
            slots.release()

    def _remove(self, key: str) -> None:
        server = self._servers.pop(key, None)
        if server is not None:
            log.info("pod %s gone: stopping its server", key)
            threading.Thread(target=self._terminate, args=(server,), daemon=True).start()

    def _terminate(self, server: Server) -> None:
        """SIGTERM the server's process group (API server, engine core, worker), SIGKILL after 30 s."""
        server.stop.set()
        process = server.process
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_SECONDS)

    def _write_targets(self) -> None:
        path = self.targets_file
        if path is None or self._stopping.is_set():
            return
        with self._lock:
            groups = [
                target_group(server.info, f"127.0.0.1:{server.port}", "/metrics")
                for server in self._servers.values()
                if server.state is State.SERVING
            ]
            text = json.dumps(sorted(groups, key=lambda g: g["targets"][0]), indent=1)
            if text != self._written:
                write_atomic(path, text)
                self._written = text
