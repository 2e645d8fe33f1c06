"""Chaos: canaries of every kind while faults strike at random moments, every canary checked when it ends.

A real Prometheus, the simulator, GPU nodes and two operator replicas with leader election, all the run's
own: the faults strike only them, so the short version runs beside other tests on a shared dev cluster
(API server and etcd restarts, `--component-restarts`, strike the whole cluster: the benchmark's own).
Canaries run in waves (`--parallel` at a time), one per fleet; each fleet is created on a plain stable
config and changed once. Every other fleet splits its traffic with an HTTPRoute of its own
(Gateway API's CRD is installed; no gateway controller), the others by replicas behind one Service.
What each kind has, and its undisturbed outcome:

    good        EAGLE-3 drafter, alpha 0.8, k 4                  -> Promoted
    bad         a drafter with alpha 0.3                         -> RolledBack
    turns-bad   alpha 0.8, turned to 0.3 once its canary is live  -> RolledBack
    a-a         the stable config, one environment variable more -> Promoted
    never-ready wants an MI355X node the cluster does not have    -> Aborted (progress deadline)
    swap        EAGLE-3 as good, on a full pool of its own (two    -> Promoted
                replicas on a 2-GPU node): maxSurge 0 swaps pods
    prometheus-gone  EAGLE-3 as good, its spec.prometheus.url       -> Paused, then aborted by the run
                refusing every query                                  (RolledBack with --fallbacks tolerant)

Faults, one every `--fault-every` seconds on average while `--parallel` fleets are live (more slowly as fewer
are): SIGKILL of the operator's leader or of its standby
(restarted a moment later), Prometheus stopped (SIGSTOP) for 30 s-3 min, the API server or etcd
restarted (`--component-restarts`), a child edited or deleted by hand (the stable Deployment scaled,
the fleet Service or the canary Deployment deleted, the HTTPRoute's weights sent to the canary), a second
writer annotating a fleet in a tight loop (409s for the operator), a node holding a canary pod deleted
(put back later), the scrapes of one fleet's canary, stable or both broken for 30 s-3 min (its pods'
/metrics answer HTTP 500s or an HTML page: the simulator's `scrape_faults`). The fallbacks (`--fallbacks`):
`default` writes none, so the API server fills in the product's own (onNoData Rollback after 30 minutes,
onProviderError Pause after 10); `tolerant` rolls back after 10 and 5. Either acts later than any outage
lasts, so a good canary is held while its evidence is missing, never rolled back; only a fleet whose
Prometheus is gone for good is paused (or rolled back). A Pass needs evidence that shows the canary within
every guardrail (~1,700 canary requests for the error rate, ~3.5 min at the load here), and a canary or a
stable pod that is replaced (a node deleted, a child deleted) starts its fleet's evidence over: a fault
stream much denser than that leaves a good canary no time to be shown good, and `onNoData` rolls it back,
as it would for any canary that cannot be measured.

When a canary ends, an invariant checker reads the cluster: outcome as undisturbed, one history entry
per canary, a promotion only on "all steps passed", exactly one stable Deployment at the stable revision
with `replicas` (hand edits reverted), the Service selecting it, the HTTPRoute sending everything to the
stable track's Service, no canary child left, no orphan.

    python benchmarks/chaos.py --canaries 100          # ~30 min on 2 cores
    python benchmarks/chaos.py --quick                 # one canary of each kind, each fault once, ~12 min

Prints the figures as JSON: faults injected by kind, invariant violations (the list), outcomes that
matched, leader takeover after SIGKILL (median, max), recovery after API server / etcd restarts.
`--output FILE` writes them with every canary's and every fault's record (docs/data/ keeps committed runs).
"""

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
import yaml

from specfleet.api.vocabulary import GROUP, LABEL_NAME, LABEL_REVISION, LABEL_TRACK, PLURAL, VERSION, Track
from specfleet_workshop.devcluster.gateway import install_httproute_crd
from specfleet_workshop.devcluster.nodes import pool_of_its_own

from benchkit import PrivatePrometheus, cluster_session, free_port, one_replica_fleet

EXPECTED = {
    "good": "Promoted",
    "bad": "RolledBack",
    "turns-bad": "RolledBack",
    "a-a": "Promoted",
    "never-ready": "Aborted",
    "swap": "Promoted",
    "prometheus-gone": "Aborted",
}
"""Each kind's undisturbed outcome under the product's default fallbacks (`expected` gives it under others)."""
PAUSES = ("prometheus-gone",)
"""Kinds whose canary must first be Paused (`onProviderError`'s default action): the run checks the pause, then
aborts it as its owner would (`kubectl specfleet abort`), which is what its history then records."""
SWAP_REPLICAS = 2
"""A swap fleet's replicas: every GPU of its own node (`pool_of_its_own`)."""
POOL_PRODUCT = "AMD_Instinct_MI300X_OAM_chaos"
"""The product name of the run's own MI300X nodes: only its fleets accept it, so a node it deletes holds no
one else's pods."""
GOOD_DRAFTER = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
PLAIN = {"method": "none"}
EAGLE3 = {"method": "eagle3", "model": GOOD_DRAFTER, "revision": "main", "numSpeculativeTokens": 4}
SCENARIO_DEFAULTS = {"acceptance": 0.8, "load": 8.0, "output_tokens": 128, "noise": 0.05}
FALLBACKS: dict[str, dict[str, Any]] = {
    # the product's own: nothing written, so the API server fills in onNoData Rollback after 30m and
    # onProviderError Pause after 10m, as it does for a user who leaves them out
    "default": {},
    # every outage held, then rolled back rather than left for a human: no canary waits on anyone
    "tolerant": {
        "onNoData": {"after": "10m", "action": "Rollback"},
        "onProviderError": {"after": "5m", "action": "Rollback"},
    },
}
ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 50, "pause": {"duration": "30s"}}],
    "analysis": {"interval": "10s", "window": "60s"},
    "guardrails": {"minDraftTokens": 200, "minRequests": 50},
    "progressDeadline": "2m",
}
"""The rollout of every fleet, before its fallbacks (`rollout_of`)."""
GONE_PROMETHEUS = "http://127.0.0.1:9"
"""Where a `prometheus-gone` fleet's Prometheus was: the discard port, on which nothing listens here (every query
is refused at once)."""
LEASE = "specfleet-chaos"
HTTPROUTE = ("gateway.networking.k8s.io", "v1")
API_TROUBLE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a call to an API server that is restarting (or to one that refuses the call) raises: try again later."""
FAULTS = (
    "kill-leader",
    "kill-standby",
    "stop-prometheus",
    "edit-child",
    "second-writer",
    "delete-node",
    "break-scrapes",
)
NEEDS_A_CANARY = ("edit-child", "second-writer", "delete-node", "break-scrapes")
COMPONENT_FAULTS = ("restart-kube-apiserver", "restart-etcd")


def rollout_of(fallbacks: str) -> dict[str, Any]:
    """Every fleet's rollout with the named fallbacks (`FALLBACKS`)."""
    return {**ROLLOUT, "analysis": {**ROLLOUT["analysis"], **FALLBACKS[fallbacks]}}


def expected(kind: str, fallbacks: str) -> str:
    """The undisturbed outcome of `kind`: a fleet whose Prometheus is gone is rolled back by a Rollback
    `onProviderError`, and paused (then aborted by the run) by the default Pause."""
    if kind in PAUSES and FALLBACKS[fallbacks].get("onProviderError", {}).get("action") == "Rollback":
        return "RolledBack"
    return EXPECTED[kind]


def canary_spec(kind: str, name: str) -> dict[str, Any]:
    """The spec change that makes the canary of a fleet of `kind` (its stable is plain, one MI300X GPU)."""
    if kind in ("good", "swap", "prometheus-gone"):
        return {"speculative": EAGLE3}
    if kind == "bad":
        return {"speculative": {**EAGLE3, "model": f"bad/{name}"}}
    if kind == "turns-bad":
        return {"speculative": {**EAGLE3, "model": f"victim/{name}"}}
    if kind == "a-a":
        return {"engine": {"tensorParallelSize": 1, "env": [{"name": "CHAOS_A_A", "value": "1"}]}}
    if kind == "never-ready":
        return {"accelerator": {"productNames": ["AMD_Instinct_MI355X_OAM"]}}
    raise ValueError(kind)


def scenario(victims: set[str], broken: dict[str, str] | None = None) -> dict[str, Any]:
    """The simulator's world: good drafters at 0.8; `bad/*` and the turned victims at 0.3; the scrapes of the
    pods matching each `broken` glob answer as it says (`error` or `garbage`)."""
    pairs = [{"target": "*", "drafter": f"victim/{name}", "acceptance": 0.3} for name in sorted(victims)]
    faults = [{"pod": glob, "answer": answer} for glob, answer in sorted((broken or {}).items())]
    return {
        "defaults": SCENARIO_DEFAULTS,
        "pairs": [*pairs, {"target": "*", "drafter": "bad/*", "acceptance": 0.3}],
        "scrape_faults": faults,
    }


class World:
    """The simulator's scenario as the run changes it. The driver turns drafters bad, the injector breaks and
    mends scrapes; each change sends the whole document, under one lock, so neither undoes the other's."""

    def __init__(self, sim_url: str, scenario_file: Path) -> None:
        self.sim_url = sim_url
        self.victims: set[str] = set()
        self.broken: dict[str, str] = {}
        self._lock = threading.Lock()
        scenario_file.write_text(yaml.safe_dump(scenario(self.victims)))

    def turn_bad(self, name: str) -> None:
        with self._lock:
            self.victims.add(name)
            self._publish()

    def break_scrapes(self, glob: str, answer: str) -> None:
        with self._lock:
            self.broken[glob] = answer
            self._publish()

    def mend_scrapes(self, glob: str) -> None:
        with self._lock:
            self.broken.pop(glob, None)
            self._publish()

    def _publish(self) -> None:
        body = yaml.safe_dump(scenario(self.victims, self.broken)).encode()
        request = urllib.request.Request(f"{self.sim_url}/scenario", data=body, method="PUT")
        urllib.request.urlopen(request, timeout=10).close()


def initial_fleet(canary: "Canary", fallbacks: str = "default") -> dict[str, Any]:
    """A plain one-replica fleet; a turns-bad one pauses 3 minutes, so it cannot pass before it turns; a
    prometheus-gone one asks a Prometheus that is not there."""
    rollout = rollout_of(fallbacks)
    extra: dict[str, Any] = {}
    if canary.kind == "turns-bad":
        rollout = {**rollout, "steps": [{"weight": 50, "pause": {"duration": "3m"}}]}
    if canary.kind == "prometheus-gone":
        extra["prometheus"] = {"url": GONE_PROMETHEUS}
    if canary.routed:
        rollout = {**rollout, "trafficRouting": {"httpRoute": {"name": canary.name}}}
    if canary.kind == "swap":
        rollout = {**rollout, "maxSurge": 0, "maxUnavailable": 1}
        accelerator = {"productNames": [full_pool_product(canary.name)]}
        return one_replica_fleet(
            canary.name, PLAIN, replicas=SWAP_REPLICAS, rollout=rollout, engine={"tensorParallelSize": 1},
            accelerator=accelerator,
        )  # fmt: skip
    accelerator = {"productNames": [POOL_PRODUCT]}
    return one_replica_fleet(canary.name, PLAIN, rollout=rollout, engine={"tensorParallelSize": 1},
                             accelerator=accelerator, **extra)  # fmt: skip


def pool(namespace: str, canaries: int, parallel: int) -> list[dict[str, Any]]:
    """The run's own MI300X nodes: a GPU for the stable and the canary pod of every canary in flight, and a
    node to spare for the pods of a deleted one."""
    in_flight = min(canaries, parallel)
    return pool_of_its_own(f"chaos-{namespace}", POOL_PRODUCT, -(-2 * in_flight // 8) + 1, network=64)


def full_pool_product(name: str) -> str:
    """The product name of a swap fleet's own node: no other fleet accepts it."""
    return f"AMD_Instinct_MI300X_OAM_{name}"


def full_pool(canary: "Canary") -> list[dict[str, Any]]:
    """The node a swap fleet fills: one, with exactly its replicas' GPUs."""
    index = int(canary.name[1:4])
    return pool_of_its_own(f"full-{canary.name}", full_pool_product(canary.name), 1, SWAP_REPLICAS, network=index)


def route(name: str, weights: dict[str, int] | None = None) -> dict[str, Any]:
    """The user's HTTPRoute of a routed fleet: its stable track's Service, or the backends and weights given."""
    refs = [{"name": backend, "port": 8000, "weight": weight} for backend, weight in (weights or {}).items()]
    return {
        "apiVersion": "/".join(HTTPROUTE),
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"rules": [{"backendRefs": refs or [{"name": f"{name}-stable", "port": 8000}]}]},
    }


@dataclass
class Canary:
    name: str
    kind: str
    routed: bool = False
    """Traffic split by an HTTPRoute named after the fleet, not by replicas behind the fleet Service."""
    state: str = "creating"
    revision: str | None = None
    started: float = 0.0
    outcome: str | None = None
    violations: list[str] = field(default_factory=list)
    expected: str = ""
    """The undisturbed outcome under the run's fallbacks (`expected`); the kind's default one when empty."""
    paused: str | None = None
    """Why the canary was Paused, when it was (the run then aborts it, as its owner would)."""
    reason: str | None = None
    """The reason its history entry gives for the outcome."""
    times: dict[str, float] = field(default_factory=dict)
    """Seconds from the run's start at which it was created, changed, paused, ended and checked."""

    def __post_init__(self) -> None:
        self.expected = self.expected or EXPECTED[self.kind]


def check_invariants(
    canary: Canary,
    obj: dict[str, Any],
    deployments: list[Any],
    services: list[Any],
    route: dict[str, Any] | None = None,
) -> list[str]:
    """What must hold once a canary has ended (pure over what was read from the cluster; `route` is the
    routed fleet's HTTPRoute)."""
    status, spec, problems = obj.get("status") or {}, obj["spec"], []
    history = status.get("history") or []
    mine = [h for h in history if h["revision"] == canary.revision]
    if len(mine) != 1:
        problems.append(f"{len(mine)} history entries for canary {canary.revision}")
    outcome = mine[-1]["outcome"] if mine else None
    if outcome != canary.expected:
        why = f": {mine[-1]['reason']}" if mine and mine[-1].get("reason") else ""
        paused = f" (paused before: {canary.paused})" if canary.paused else ""
        problems.append(f"outcome {outcome}, undisturbed {canary.expected}{why}{paused}")
    if canary.kind in PAUSES and canary.expected == EXPECTED[canary.kind] and not canary.paused:
        problems.append("never paused: a canary whose Prometheus is gone must wait for its owner")
    if outcome == "Promoted" and mine[-1]["reason"] != "all steps passed":
        problems.append(f"promoted without every step passing: {mine[-1]['reason']}")
    if status.get("canaryRevision") or status.get("retiringRevision"):
        problems.append("a canary is still in status")
    stable = [d for d in deployments if (d.metadata.labels or {}).get(LABEL_TRACK) == Track.STABLE]
    others = [d.metadata.name for d in deployments if d not in stable]
    if len(stable) != 1 or others:
        problems.append(f"Deployments: stable {[d.metadata.name for d in stable]}, others {others}")
    elif stable[0].metadata.labels.get(LABEL_REVISION) != status.get("stableRevision"):
        problems.append("the stable Deployment is not at status.stableRevision")
    elif stable[0].spec.replicas != spec.get("replicas", 1):
        problems.append(f"stable Deployment replicas {stable[0].spec.replicas} != {spec.get('replicas', 1)}")
    fleet_service = [s for s in services if s.metadata.name == canary.name]
    if len(fleet_service) != 1 or (fleet_service[0].spec.selector or {}).get(LABEL_TRACK) != Track.STABLE:
        problems.append("the fleet Service does not select the stable track alone")
    expected = {canary.name, f"{canary.name}-stable"} if canary.routed else {canary.name}
    if any(s.metadata.name not in expected for s in services):
        problems.append(
            f"other Services left: {[s.metadata.name for s in services if s.metadata.name not in expected]}"
        )
    if canary.routed:
        refs = [r for rule in (route or {}).get("spec", {}).get("rules") or [] for r in rule.get("backendRefs") or []]
        weights = {r["name"]: r.get("weight", 1) for r in refs}
        if weights != {f"{canary.name}-stable": 100}:
            problems.append(f"the HTTPRoute does not send everything to the stable track: {weights or route}")
    return problems


def check_paused(canary: Canary, obj: dict[str, Any], deployments: list[Any]) -> list[str]:
    """What must hold of a canary the operator has Paused (pure over what was read): a pause for Prometheus
    errors only, the canary held as it was (in status, its Deployment there, nothing recorded for it) and
    stable unchanged, not promoted."""
    status, problems = obj.get("status") or {}, []
    if canary.kind not in PAUSES:
        problems.append(f"paused, undisturbed {canary.expected}: {canary.paused}")
    elif not (canary.paused or "").startswith("Prometheus errors for"):
        problems.append(f"paused for another reason than Prometheus errors: {canary.paused}")
    elif f"Prometheus at {GONE_PROMETHEUS}:" not in canary.paused:
        problems.append(f"paused without asking the gone Prometheus (refused before a query?): {canary.paused}")
    if status.get("canaryRevision") != canary.revision:
        problems.append(f"paused, but the canary in status is {status.get('canaryRevision')}, not {canary.revision}")
    if status.get("stableRevision") == canary.revision:
        problems.append("paused, but the canary is the stable revision (promoted)")
    if any(h["revision"] == canary.revision for h in status.get("history") or []):
        problems.append("paused, but an outcome is already recorded for the canary")
    tracks = {(d.metadata.labels or {}).get(LABEL_TRACK): d for d in deployments}
    if Track.CANARY not in tracks:
        problems.append("paused, but the canary Deployment is gone")
    stable = tracks.get(Track.STABLE)
    if stable is None or stable.metadata.labels.get(LABEL_REVISION) != status.get("stableRevision"):
        problems.append("paused, but the stable Deployment is not at status.stableRevision")
    return problems


def paused_reason(status: dict[str, Any]) -> str | None:
    """Why the operator paused the rollout for its owner (the Progressing condition's message), when the phase is
    Paused. A pause for no baseline is not one: the operator lifts it by itself once stable has a Ready pod again
    (a node lost with stable's pods), so an owner would wait, and so does the run."""
    if status.get("phase") != "Paused":
        return None
    conditions = [c for c in status.get("conditions") or [] if c.get("type") == "Progressing"]
    if conditions and conditions[0].get("reason") == "NoBaseline":
        return None
    return conditions[0].get("message", "") if conditions else ""


class Replica:
    """One process (an operator replica, the simulator); operators are SIGKILLed and started again."""

    def __init__(self, name: str, command: list[str], logs: Path) -> None:
        self.command, self.log = command, logs / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def identities(self) -> set[str]:
        """Identities this replica's processes held the lease as (from its log)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return {line.rsplit(" ", 1)[-1] for line in text.splitlines() if "acquired by" in line}


@contextlib.contextmanager
def replicas(name: str, commands: list[list[str]], logs: Path) -> Iterator[list[Replica]]:
    """`name-0`, `name-1`...: started, and stopped when the block ends."""
    started = [Replica(f"{name}-{i}", command, logs) for i, command in enumerate(commands)]
    try:
        for replica in started:
            replica.start()
        yield started
    finally:
        for replica in started:
            replica.stop()


def fault_gap_factor(parallel: int, live: int, rounds: int = 0) -> float:
    """Faults come `parallel / live` times more slowly when fewer than `--parallel` fleets are live, so each fleet
    meets them at the same rate to the end of a run: otherwise the last fleet of a run takes every fault (its
    evidence started over again and again, every Prometheus stop counted against its fallbacks), which no fleet
    meets undisturbed or on a real cluster. A run of `--rounds` deals a bounded number of faults, which cannot
    pile onto its last fleet: they come at `--fault-every` throughout, so a short run strikes every kind while
    its canaries still run."""
    if rounds:
        return 1.0
    return parallel / min(parallel, max(1, live))


def undoing(undo: Callable[[], None], errors: list[str], tries: int = 30, pause: float = 2.0) -> Callable[[], None]:
    """`undo`, tried again until it succeeds (an overloaded simulator or API server times out): a fault whose end
    failed once would otherwise stay in force for the rest of the run (scrapes broken for good); one that never
    ends is reported in `errors`."""

    def attempt() -> None:
        for n in range(tries):
            try:
                undo()
                return
            except Exception as error:  # any failure of the undo is retried, then reported
                if n == tries - 1:
                    errors.append(f"a fault could not be ended: {error!r}")
                time.sleep(pause)

    return attempt


class Injector:
    """Strikes one random fault every `every` seconds on average until stopped; records what it did."""

    def __init__(
        self,
        args: argparse.Namespace,
        cluster: Any,
        namespace: str,
        ops: list[Replica],
        live: Callable[[], list[Canary]],
        world: World,
        prometheus: PrivatePrometheus,
        work: Path,
    ) -> None:
        self.args, self.cluster, self.namespace, self.ops, self.live = args, cluster, namespace, ops, live
        self.world, self.prometheus = world, prometheus
        self.api = cluster.api_client()
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.coordination = kubernetes.client.CoordinationV1Api(self.api)
        self.random = random.Random(args.seed)
        self.faults: Counter[str] = Counter()
        self.edits: Counter[str] = Counter()
        self.broken_scrapes: Counter[str] = Counter()
        self.deleted_nodes: list[str] = []
        self.undo: list[threading.Timer] = []
        """Faults that end later (Prometheus continued, a node put back): all ended at once by `finish`."""
        self.takeovers: list[float] = []
        self.recoveries: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.records: list[dict[str, Any]] = []
        """Every fault dealt, struck or not: kind, when (seconds from the start), what it struck, or why not."""
        self.began = time.monotonic()
        self.stop = threading.Event()
        self.fatal: str | None = None
        """Why the run cannot go on (a control-plane component that would not come back)."""
        self.log = (work / "faults.log").open("a")
        self.kinds = FAULTS + (COMPONENT_FAULTS if args.component_restarts else ())

    def run(self) -> None:
        """Kinds are dealt from a shuffled deck, so every kind strikes as often as the others (and a short run
        strikes each); one that could not be struck (nothing to strike yet) is tried again next. With
        `--rounds`, the deck is dealt that many times, then the canaries finish in peace."""
        deck: list[str] = []
        dealt = 0
        while not self.stop.wait(self.random.expovariate(1 / self.args.fault_every) * self.thinning()):
            if not deck:  # dealt from the end: the kinds that need a live canary first, while there are some
                if self.args.rounds and dealt >= self.args.rounds:
                    return
                dealt += 1
                deck = sorted(self.random.sample(self.kinds, len(self.kinds)), key=lambda k: k in NEEDS_A_CANARY)
            kind = deck.pop()
            at = round(time.monotonic() - self.began, 1)
            try:
                target = getattr(self, kind.replace("-", "_"))()
                self.faults[kind] += 1
                self.records.append({"kind": kind, "at_seconds": at, "target": target, "struck": True})
                print(f"{time.strftime('%H:%M:%S')} {kind} {target}", file=self.log, flush=True)
            except Exception as error:  # a fault that could not be struck is reported, not fatal
                self.errors.append(f"{kind}: {error}")
                self.records.append({"kind": kind, "at_seconds": at, "struck": False, "why_not": str(error)})
                deck.append(kind)
                print(f"{time.strftime('%H:%M:%S')} {kind} not struck: {error}", file=self.log, flush=True)
            if self.fatal:
                return

    def thinning(self) -> float:
        """How much longer the next gap is than `--fault-every` (`fault_gap_factor` of the fleets live now)."""
        return fault_gap_factor(self.args.parallel, len(self.live()), self.args.rounds)

    def holder(self) -> str | None:
        try:
            return self.coordination.read_namespaced_lease(LEASE, self.namespace).spec.holder_identity
        except API_TROUBLE:
            return None

    def _kill(self, leader: bool) -> str:
        holder = self.holder()
        if holder is None:
            raise RuntimeError("no lease holder yet")
        leading = [r for r in self.ops if holder in r.identities()]
        victims = leading if leader else [r for r in self.ops if r not in leading]
        if not victims:
            raise RuntimeError("no such replica")
        victim = victims[0]
        target = f"{victim.log.stem} (holder {holder})" if leader else victim.log.stem
        killed = time.monotonic()
        victim.kill()
        time.sleep(self.random.uniform(1, 5))
        victim.start()
        if leader:
            while self.holder() in (None, holder):
                if time.monotonic() - killed > 120:
                    raise RuntimeError("no takeover within 120 s")
                time.sleep(0.2)
            self.takeovers.append(time.monotonic() - killed)
        return target

    def kill_leader(self) -> str:
        return self._kill(leader=True)

    def kill_standby(self) -> str:
        return self._kill(leader=False)

    def stop_prometheus(self) -> str:
        pid = self.prometheus.process.pid
        seconds = self.random.uniform(30, 180) if not self.args.quick else 30
        os.kill(pid, signal.SIGSTOP)
        self._later(seconds, lambda: os.kill(pid, signal.SIGCONT))
        return f"prometheus for {seconds:.0f} s"

    def edit_child(self) -> str:
        live = [c for c in self.live() if c.state in ("healthy", "canary")]
        if not live:
            raise RuntimeError("no fleet to edit")
        canary = self.random.choice(live)
        edits = ["scale-stable", "delete-service", "delete-canary"] + (["route-to-canary"] if canary.routed else [])
        what = self.random.choice(edits)
        if what == "scale-stable":
            body = {"spec": {"replicas": 3}}
            self.apps.patch_namespaced_deployment(f"{canary.name}-stable", self.namespace, body)
        elif what == "delete-service":
            self.core.delete_namespaced_service(canary.name, self.namespace)
        elif what == "route-to-canary":
            weights = {f"{canary.name}-stable": 0, f"{canary.name}-canary": 100}
            body = {"spec": route(canary.name, weights)["spec"]}
            self.custom.patch_namespaced_custom_object(*HTTPROUTE, self.namespace, "httproutes", canary.name, body)
        else:
            self.apps.delete_namespaced_deployment(f"{canary.name}-canary", self.namespace)
        self.edits[what] += 1
        return f"{canary.name}: {what}"

    def second_writer(self) -> str:
        live = [c for c in self.live() if c.state == "canary"]
        if not live:
            raise RuntimeError("no canary to race")
        name = self.random.choice(live).name
        for n in range(20):
            body = {"metadata": {"annotations": {"chaos.specfleet.io/touch": str(n)}}}
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, body)
            time.sleep(0.1)
        return name

    def delete_node(self) -> str:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_TRACK}={Track.CANARY}").items
        nodes = sorted({p.spec.node_name for p in pods if p.spec.node_name})
        if not nodes:
            raise RuntimeError("no canary pod on a node")
        node = self.core.read_node(self.random.choice(nodes))
        manifest = self.api.sanitize_for_serialization(node)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            manifest["metadata"].pop(key, None)
        held = manifest.get("status") or {}  # capacity lives in status (kwok nodes have no kubelet to report it)
        manifest["status"] = {k: held[k] for k in ("capacity", "allocatable") if k in held}
        self.core.delete_node(node.metadata.name)
        self.deleted_nodes.append(node.metadata.name)

        def put_back() -> None:
            with contextlib.suppress(*API_TROUBLE):
                self.core.create_node(manifest)

        self._later(60, put_back)
        held = sorted(p.metadata.name for p in pods if p.spec.node_name == node.metadata.name)
        return f"{node.metadata.name} (canary pods {', '.join(held)})"

    def break_scrapes(self) -> str:
        live = [c for c in self.live() if c.state == "canary"]
        if not live:
            raise RuntimeError("no canary whose scrapes to break")
        name = self.random.choice(live).name
        track = self.random.choice(["canary-", "stable-", ""])
        answer = self.random.choice(["error", "garbage"])
        glob = f"{self.namespace}/{name}-{track}*"
        self.world.break_scrapes(glob, answer)
        self.broken_scrapes[f"{track or 'both-'}{answer}"] += 1
        seconds = self.random.uniform(30, 180) if not self.args.quick else 30
        self._later(seconds, lambda: self.world.mend_scrapes(glob))
        return f"{glob} answering {answer} for {seconds:.0f} s"

    def _later(self, seconds: float, undo: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, undoing(undo, self.errors))
        self.undo.append(timer)
        timer.start()

    def finish(self) -> None:
        """Stop striking and end every fault still in force now, so nothing stays stopped or deleted."""
        self.stop.set()
        self.log.close()
        for timer in self.undo:
            if timer.is_alive():
                timer.cancel()
                timer.function(*timer.args)

    def _restart(self, component: str) -> str:
        """Stop a control-plane component and start it again with its recorded command line (data kept).

        Starting is retried for two minutes (its port may linger in TIME_WAIT); a component that cannot be
        started again ends the whole run, as nothing after it would measure the operator.
        """
        from specfleet_workshop.devcluster.cluster import ClusterError, start_component, stop_component

        began = time.monotonic()
        stop_component(self.cluster.state_dir, component)
        time.sleep(self.random.uniform(2, 10))
        while True:
            try:
                start_component(self.cluster.state_dir, component)
                break
            except ClusterError as error:
                if time.monotonic() - began > 120:
                    self.fatal = f"{component} could not be started again: {error}"
                    raise
                time.sleep(5)
        self.recoveries.setdefault(component, []).append(time.monotonic() - began)
        return f"{component} (back after {time.monotonic() - began:.1f} s)"

    def restart_kube_apiserver(self) -> str:
        return self._restart("kube-apiserver")

    def restart_etcd(self) -> str:
        return self._restart("etcd")


def play(args: argparse.Namespace, cluster: Any, namespace: str, work: Path) -> dict[str, Any]:
    """Run the canaries with the injector striking; returns the figures."""
    api = cluster.api_client()
    custom, core, apps = (kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api),
                          kubernetes.client.AppsV1Api(api))  # fmt: skip
    kinds = list(args.kinds) if args.quick else [args.kinds[i % len(args.kinds)] for i in range(args.canaries)]
    random.Random(args.seed).shuffle(kinds)
    canaries = [Canary(f"c{i:03d}-{kind}", kind, routed=i % 2 == 1, expected=expected(kind, args.fallbacks))
                for i, kind in enumerate(kinds)]  # fmt: skip
    install_httproute_crd(cluster)
    scenario_file, targets = work / "scenario.yaml", work / "file_sd"
    targets.mkdir(exist_ok=True)
    sim_url = f"http://127.0.0.1:{free_port()}"
    world = World(sim_url, scenario_file)
    sim = [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario_file), "--kubeconfig",
           str(cluster.kubeconfig), "--file-sd-dir", str(targets), "--namespace", namespace,
           "--listen", sim_url.removeprefix("http://"), "--seed", str(args.seed)]  # fmt: skip
    nodes = pool(namespace, len(canaries), args.parallel)
    began = time.monotonic()
    try:
        for node in nodes:
            created(core.create_node, node)
        with PrivatePrometheus(targets, work / "prometheus") as prometheus, replicas("simulator", [sim], work):
            operator = [sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "",
                        "--kubeconfig", str(cluster.kubeconfig), "--prometheus-url", prometheus.url,
                        "--leader-election", f"{namespace}/{LEASE}", "--resync", "30",
                        # admitted, so a prometheus-gone fleet meets a dead Prometheus, not the allow-list's refusal
                        "--allow-prometheus-url", GONE_PROMETHEUS]  # fmt: skip
            with replicas("operator", [operator, operator], work) as ops:

                def live() -> list[Canary]:
                    return [c for c in canaries if c.state != "done"]

                injector = Injector(args, cluster, namespace, ops, live, world, prometheus, work)
                striker = threading.Thread(target=injector.run, daemon=True)
                striker.start()
                try:
                    drive(args, canaries, custom, core, apps, namespace, world, lambda: injector.fatal, began)
                finally:
                    injector.stop.set()
                    striker.join(timeout=300)
                    injector.finish()
    finally:
        for node in nodes:
            with contextlib.suppress(*API_TROUBLE):
                core.delete_node(node["metadata"]["name"])
    matched = [c for c in canaries if c.outcome == c.expected]
    return {
        "settings": {
            "canaries": len(canaries), "parallel": args.parallel, "fault_every_seconds": args.fault_every,
            "component_restarts": args.component_restarts, "seed": args.seed, "fallbacks": args.fallbacks,
            "kinds": list(args.kinds), "rollout": rollout_of(args.fallbacks),
        },
        "seconds": round(time.monotonic() - began),
        "faults": dict(sorted(injector.faults.items())),
        "child_edits": dict(sorted(injector.edits.items())),
        "broken_scrapes": dict(sorted(injector.broken_scrapes.items())),
        "deleted_nodes": injector.deleted_nodes,
        "faults_not_struck": injector.errors[:20],
        "run_ended_early": injector.fatal,
        "outcomes_matching": f"{len(matched)}/{len(canaries)}",
        "outcomes": dict(Counter(f"{c.kind}: {c.outcome}" for c in canaries)),
        "paused": {c.name: c.paused for c in canaries if c.paused},
        "invariant_violations": [f"{c.name}: {v}" for c in canaries for v in c.violations],
        "leader_takeover_seconds": summary(injector.takeovers),
        "restart_recovery_seconds": {k: summary(v) for k, v in injector.recoveries.items()},
        "canary_records": [record(c) for c in canaries],
        "fault_records": injector.records,
    }  # fmt: skip


def record(canary: Canary) -> dict[str, Any]:
    """One canary as the raw output keeps it."""
    times = canary.times
    changed, ended_at = times.get("changed"), times.get("ended")
    return {
        "name": canary.name, "kind": canary.kind, "routed": canary.routed, "revision": canary.revision,
        "expected": canary.expected, "outcome": canary.outcome, "reason": canary.reason, "paused": canary.paused,
        "seconds_from_start": times,
        "change_to_outcome_seconds": round(ended_at - changed, 1) if changed is not None and ended_at else None,
        "violations": canary.violations,
    }  # fmt: skip


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def drive(args: argparse.Namespace, canaries: list[Canary], custom: Any, core: Any, apps: Any, namespace: str,
          world: World, fatal: Callable[[], str | None], began: float | None = None) -> None:  # fmt: skip
    """Move every canary through create -> Healthy -> changed -> (paused -> aborted) -> ended -> checked ->
    deleted, `parallel` at once."""
    began = time.monotonic() if began is None else began

    def mark(c: Canary, moment: str) -> None:
        c.times[moment] = round(time.monotonic() - began, 1)

    deadline = time.monotonic() + args.timeout
    abort_later: list[Canary] = []
    while any(c.state != "done" for c in canaries):
        if time.monotonic() > deadline or fatal():
            why = fatal() or f"did not end within {args.timeout}s"
            for c in canaries:
                if c.state not in ("done", "creating"):
                    c.violations.append(f"{why} (state {c.state})")
                c.state = "done"
            return
        active = [c for c in canaries if c.state not in ("creating", "done")]
        for c in canaries:
            if c.state == "creating" and len(active) < args.parallel:
                with contextlib.suppress(*API_TROUBLE):
                    if c.routed:
                        created(custom.create_namespaced_custom_object, *HTTPROUTE, namespace, "httproutes",
                                route(c.name))  # fmt: skip
                    for node in full_pool(c) if c.kind == "swap" else ():
                        created(core.create_node, node)
                    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                           initial_fleet(c, args.fallbacks))  # fmt: skip
                    c.state, c.started = "starting", time.monotonic()
                    mark(c, "created")
                    active.append(c)
        try:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        except API_TROUBLE:
            time.sleep(2)  # the API server may be restarting
            continue
        objects = {o["metadata"]["name"]: o for o in items}
        for c in canaries:
            obj = objects.get(c.name)
            status = (obj or {}).get("status") or {}
            if c.state == "starting" and status.get("phase") == "Healthy":
                c.revision = None
                with contextlib.suppress(*API_TROUBLE):
                    custom.patch_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, c.name, {"spec": canary_spec(c.kind, c.name)}
                    )
                    c.state = "canary"
                    mark(c, "changed")
            elif c.state == "canary" and c.revision is None and status.get("canaryRevision"):
                c.revision = status["canaryRevision"]
            elif c.state == "canary" and c.kind == "turns-bad" and c.name not in world.victims and judged(status, c):
                world.turn_bad(c.name)  # its drafter turns bad after its first analysis
            elif c.state == "canary" and c.revision and ended(status, c.revision):
                entry = next(h for h in status["history"] if h["revision"] == c.revision)
                c.outcome, c.reason = entry["outcome"], entry.get("reason")
                c.state = "settling"
                c.started = time.monotonic()
                mark(c, "ended")
            elif c.state == "canary" and c.revision and c.paused is None and (why := paused_reason(status)) is not None:
                # held for a human: check what the pause must keep, then abort as the fleet's owner would
                try:
                    deployments = apps.list_namespaced_deployment(namespace, label_selector=f"{LABEL_NAME}={c.name}")
                except API_TROUBLE:
                    continue
                c.paused = why
                mark(c, "paused")
                c.violations += check_paused(c, obj or {}, deployments.items)
                abort_later.append(c)
            elif c.state == "settling" and time.monotonic() - c.started > 45 and obj is not None:
                selector = f"{LABEL_NAME}={c.name}"
                try:
                    deployments = apps.list_namespaced_deployment(namespace, label_selector=selector).items
                    services = core.list_namespaced_service(namespace, label_selector=selector).items
                    routed = c.routed and custom.get_namespaced_custom_object(*HTTPROUTE, namespace, "httproutes",
                                                                              c.name)  # fmt: skip
                except API_TROUBLE:
                    continue
                c.violations += check_invariants(c, obj, deployments, services, routed or None)
                with contextlib.suppress(*API_TROUBLE):
                    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, c.name)
                    if c.routed:
                        custom.delete_namespaced_custom_object(*HTTPROUTE, namespace, "httproutes", c.name)
                    for node in full_pool(c) if c.kind == "swap" else ():
                        core.delete_node(node["metadata"]["name"])
                c.state = "done"
                print(f"{c.name}: {c.outcome} {'OK' if not c.violations else c.violations}", file=sys.stderr)
        for c in list(abort_later):
            with contextlib.suppress(*API_TROUBLE):
                stamp = f"user revision={c.revision} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
                body = {"metadata": {"annotations": {"specfleet.io/abort": stamp}}}
                custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, c.name, body)
                abort_later.remove(c)
        time.sleep(1)


def created(create: Callable[..., Any], *args: Any) -> None:
    """A create that may have been made already by an attempt whose answer was lost (409 is success)."""
    try:
        create(*args)
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise


def judged(status: dict[str, Any], canary: Canary) -> bool:
    return ((status.get("lastAnalysis") or {}).get("revision")) == canary.revision is not None


def ended(status: dict[str, Any], revision: str) -> bool:
    """The canary's outcome is recorded and it has left the rollout (retired, traffic off)."""
    recorded = any(h["revision"] == revision for h in status.get("history") or [])
    return recorded and not status.get("canaryRevision") and not status.get("retiringRevision")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--canaries", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=15, help="canaries in flight at once")
    parser.add_argument(
        "--fault-every",
        type=float,
        default=20.0,
        help="mean seconds between faults while --parallel fleets are live; the gaps grow as fewer are",
    )
    parser.add_argument("--component-restarts", action="store_true", help="also restart kube-apiserver and etcd")
    parser.add_argument(
        "--rounds", type=int, default=0, help="deal every kind of fault this many times, then stop (0: until the end)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="one canary of each kind, each kind of fault once, every 8 s"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fallbacks", choices=sorted(FALLBACKS), default="default",
        help="the rollouts' onNoData/onProviderError: the product's defaults (Rollback after 30m, Pause after 10m) "
        "or tolerant (Rollback after 10m and 5m)",
    )  # fmt: skip
    parser.add_argument(
        "--kinds", type=lambda text: text.split(","), default=list(EXPECTED),
        help=f"comma-separated kinds of canary to deal (default all: {','.join(EXPECTED)})",
    )  # fmt: skip
    parser.add_argument("--output", type=Path, help="also write the figures with every canary's and fault's record")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up on canaries not ended by then")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-chaos")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args(argv)
    unknown = set(args.kinds) - set(EXPECTED)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {','.join(EXPECTED)}")
    if args.quick:
        args.fault_every, args.rounds, args.timeout = 8.0, 1, min(args.timeout, 1200.0)
    return args


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="specfleet-chaos-"))
    print(f"logs in {work}", file=sys.stderr)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with cluster_session(args.state_dir, 1, keep=args.keep) as (cluster, namespace):  # the run brings its own nodes
        figures = play(args, cluster, namespace, work)
    raw = figures.pop("canary_records"), figures.pop("fault_records")
    print(json.dumps(figures, indent=2))
    if args.output:
        command = ["python", "benchmarks/chaos.py", *sys.argv[1:]]
        document = {
            "command": " ".join(command),
            "started": started,
            **figures,
            "canary_records": raw[0],
            "fault_records": raw[1],
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
