"""Fleet scale for benchmarks/peers.py: N objects of one controller at once, measured from outside.

One controller at a time, in a namespace of its own, started fresh for it: create N fleets from 8 client
threads, watch until every one has converged, then leave everything alone for `idle` seconds. Measured:
time until all converged, the controller process's CPU seconds and peak RSS (/proc), and its API requests
as the API server saw them: the dev cluster's audit log records every request of the admin identity with
its User-Agent. The controller, run out of cluster, is the only other client of that identity while it is
measured, so every request not sent with this script's own User-Agent is the controller's (the agents
seen are reported). The namespace is deleted, and its pods gone, before the next controller starts.
"""

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from benchkit import percentile, process_usage

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
QUANTILES = {"p50": 0.5, "p95": 0.95}
BENCH_USER_AGENT = "specfleet-bench"
"""This script's own requests, told apart from the controllers' in the audit log."""


@dataclass(frozen=True)
class Contender:
    """What fleetscale needs to know of one controller."""

    name: str
    resource: tuple[str, str, str]
    """group, version, plural of the object that says whether a fleet converged."""
    create: Callable[[kubernetes.client.ApiClient, str, str], None]
    """Creates everything one fleet named `name` in `namespace` needs (objects of several kinds for some)."""
    prepare: Callable[[kubernetes.client.ApiClient, str], None]
    """Once per namespace, before the controller starts (templates the fleets refer to)."""
    converged: Callable[[dict[str, Any]], bool]


def audit_events(log: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Audit events written after byte `offset`, and the offset after them (a partial last line waits).
    A file shorter than `offset` was rotated: it is read from its start."""
    with log.open("rb") as handle:
        handle.seek(0 if log.stat().st_size < offset else offset)
        data = handle.read()
    complete = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:complete].splitlines() if line.strip()], offset + complete


def controller_requests(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of every client but this script."""
    return [e for e in events if not (e.get("userAgent") or "").startswith(BENCH_USER_AGENT)]


def measure(
    contender: Contender,
    count: int,
    api: kubernetes.client.ApiClient,
    namespace: str,
    controller: Callable[[], contextlib.AbstractContextManager[int]],
    audit_log: Path,
    idle: float,
    timeout: float,
    arrival: float = 0.0,
) -> dict[str, Any]:
    """One contender's figures. `controller()` starts its process (yielding the pid once it is serving).
    `arrival` > 0 paces the creates evenly over that many seconds (as fast as they go otherwise)."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    contender.prepare(api, namespace)
    try:
        with controller() as pid:
            _, offset = audit_events(audit_log, 0)
            converged: dict[str, float] = {}
            created: dict[str, float] = {}
            with _watching(contender, api, namespace, count, converged, timeout):
                started = time.monotonic()
                _create_all(contender, api, namespace, count, created, arrival)
            cpu = process_usage(pid).cpu_seconds
            events, offset = audit_events(audit_log, offset)
            busy = controller_requests(events)
            time.sleep(idle)  # the measurement: nothing changes for `idle` seconds
            after_idle = process_usage(pid)
            quiet = Counter(e["verb"] for e in controller_requests(audit_events(audit_log, offset)[0]))
    finally:
        _delete_namespace(core, namespace)
    total = max(converged.values()) - started if len(converged) == count else None
    each = sorted(converged[name] - created[name] for name in converged if name in created)
    return {
        "objects": count,
        "converged": len(converged),
        "all_converged_seconds": round(total, 1) if total is not None else None,
        "create_seconds": round(max(created.values()) - started, 1),
        "arrival_seconds": arrival,
        "per_object_seconds": {name: round(percentile(each, q), 1) if each else None for name, q in QUANTILES.items()},
        "cpu_seconds": round(cpu, 1),
        "peak_rss_mib": round(after_idle.peak_rss_mib, 1),
        "api_requests_per_object": round(len(busy) / count, 2),
        "api_requests_by_verb": dict(sorted(Counter(e["verb"] for e in busy).items())),
        "user_agents": sorted({(e.get("userAgent") or "").split(" ")[0] for e in busy}),
        "idle_seconds": idle,
        "idle_writes_per_minute": round(sum(n for v, n in quiet.items() if v in WRITE_VERBS) * 60 / idle, 2),
        "idle_reads_per_minute": round(sum(n for v, n in quiet.items() if v not in WRITE_VERBS) * 60 / idle, 2),
        "idle_cpu_seconds": round(after_idle.cpu_seconds - cpu, 1),
    }


@contextlib.contextmanager
def _watching(
    contender: Contender,
    api: kubernetes.client.ApiClient,
    namespace: str,
    count: int,
    converged: dict[str, float],
    timeout: float,
) -> Iterator[None]:
    """Records when each fleet first converges, from a watch started before the block; waits for all of
    them (or `timeout`) when the block ends."""
    custom = kubernetes.client.CustomObjectsApi(api)
    stream = kubernetes.watch.Watch()
    deadline = time.monotonic() + timeout

    def watch() -> None:
        while len(converged) < count and time.monotonic() < deadline:
            with contextlib.suppress(kubernetes.client.ApiException, OSError):
                for event in stream.stream(
                    custom.list_namespaced_custom_object, *contender.resource[:2], namespace, contender.resource[2],
                    timeout_seconds=max(1, int(deadline - time.monotonic())),
                ):  # fmt: skip
                    obj = event["object"]
                    name = obj["metadata"]["name"]
                    if name not in converged and contender.converged(obj):
                        converged[name] = time.monotonic()
                    if len(converged) == count:
                        stream.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield
    watcher.join(timeout=max(0.0, deadline - time.monotonic()))
    stream.stop()


def _create_all(
    contender: Contender,
    api: kubernetes.client.ApiClient,
    namespace: str,
    count: int,
    created: dict[str, float],
    arrival: float,
) -> None:
    """Create `count` fleets from 8 threads, the i-th no earlier than i x arrival / count seconds after the start
    (controllers compared at the same arrival rate); `created` gets when each one's creation returned."""
    names = [f"scale-{i:04d}" for i in range(count)]
    errors: list[BaseException] = []
    start = time.monotonic()

    def create(chunk: list[tuple[int, str]]) -> None:
        try:
            for index, name in chunk:
                time.sleep(max(0.0, start + index * arrival / count - time.monotonic()))
                contender.create(api, namespace, name)
                created[name] = time.monotonic()
        except BaseException as error:  # reported after every thread has ended
            errors.append(error)

    numbered = list(enumerate(names))
    threads = [threading.Thread(target=create, args=(numbered[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _delete_namespace(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """Delete the namespace and wait until it is gone (its pods free their GPUs for the next contender)."""
    with contextlib.suppress(kubernetes.client.ApiException):
        core.delete_namespace(namespace)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        try:
            core.read_namespace(namespace)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return
        time.sleep(5)
