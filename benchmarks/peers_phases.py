"""The phases of benchmarks/peers.py: fleets created and canaried on every controller at once, polled for when
each canary stops getting traffic (breach, A/A, Prometheus outage), and the fleet-scale phase."""

import argparse
import contextlib
import functools
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
import yaml
from prometheus_api_client import PrometheusConnect

from specfleet.api.vocabulary import GROUP, LABEL_TRACK, PLURAL, VERSION, Track

import fleetscale
from benchkit import background, free_port, wait_until
from peers_fleets import (
    AA_OBSERVE_SECONDS,
    ARGO,
    COLD_START_SECONDS,
    CONTROLLERS,
    FLAGGER,
    GOOD,
    OUTAGE_SECONDS,
    SETUPS,
    Fleet,
    argo_rollout,
    argo_template,
    drafter,
    flagger_canary,
    flagger_deployment,
    flagger_templates,
    fleets_of,
    pod_template,
    scenario,
    specfleet_fleet,
    speculative,
    stable_drafter,
    warmup_seconds,
)
from peers_install import controller_command
from peers_report import checkpoint, collect


@dataclass
class Run:
    """The cluster, clients and processes of one benchmark run."""

    cluster: Any
    namespaces: dict[str, str]
    sim_urls: dict[str, str]
    """One simulator per controller's namespace: one process could not serve hundreds of pods' scrapes."""
    custom: kubernetes.client.CustomObjectsApi
    core: kubernetes.client.CoreV1Api
    apps: kubernetes.client.AppsV1Api
    load: float

    def put_scenario(self, document: dict[str, Any]) -> dict[str, float]:
        """Every simulator takes the document, all at once (a busy one may take seconds: it advances every engine
        first); per controller, the moment (monotonic) its simulator had taken it: each one's own t0."""
        body = yaml.safe_dump(document).encode()

        def put(url: str) -> float:
            request = urllib.request.Request(f"{url}/scenario", data=body, method="PUT")
            for attempt in range(5):
                try:
                    urllib.request.urlopen(request, timeout=60).close()
                    return time.monotonic()
                except OSError:
                    if attempt == 4:
                        raise
                    time.sleep(2)
            raise AssertionError("unreachable")

        with ThreadPoolExecutor(len(self.sim_urls)) as pool:
            return dict(zip(self.sim_urls, pool.map(put, self.sim_urls.values()), strict=True))

    def delete(self, fleet: Fleet) -> None:
        """Delete a fleet once measured, so its pods stop costing the simulator (children go with their owner)."""
        ns = self.namespaces[fleet.controller]
        with contextlib.suppress(kubernetes.client.ApiException):
            if fleet.controller == "specfleet":
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, fleet.name)
            elif fleet.controller == "argo":
                self.custom.delete_namespaced_custom_object(*ARGO, ns, "rollouts", fleet.name)
                self.core.delete_namespaced_service(fleet.name, ns)
            else:
                self.custom.delete_namespaced_custom_object(*FLAGGER, ns, "canaries", fleet.name)
                self.apps.delete_namespaced_deployment(fleet.name, ns)

    # creating fleets

    def create(self, fleet: Fleet) -> None:
        ns = self.namespaces[fleet.controller]
        stable = stable_drafter(fleet.kind)
        if fleet.controller == "specfleet":
            body = specfleet_fleet(fleet.name, fleet.kind, fleet.setting, stable)
            retried(lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))
        elif fleet.controller == "argo":
            rollout = argo_rollout(fleet.name, fleet.kind, fleet.setting, stable)
            service = {
                "metadata": {"name": fleet.name},
                "spec": {"selector": {"app": fleet.name}, "ports": [{"port": 8000}]},
            }
            retried(lambda: self.custom.create_namespaced_custom_object(*ARGO, ns, "rollouts", rollout))
            retried(lambda: self.core.create_namespaced_service(ns, service))
        else:
            canary = flagger_canary(fleet.name, fleet.kind, fleet.setting)
            retried(lambda: self.apps.create_namespaced_deployment(ns, flagger_deployment(fleet.name, stable)))
            retried(lambda: self.custom.create_namespaced_custom_object(*FLAGGER, ns, "canaries", canary))

    def start_canary(self, fleet: Fleet) -> None:
        """Change the pods' config to the canary's: the drafter of this kind (the good fleets: the good one)."""
        ns = self.namespaces[fleet.controller]
        model = GOOD if fleet.kind == "good" else drafter(fleet.kind, fleet.setting)
        if fleet.controller == "specfleet":
            patch = {"spec": {"speculative": speculative(model)}}
            retried(lambda: self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, fleet.name, patch))
            return
        template = {"spec": {"template": pod_template(fleet.name, model)}}
        if fleet.controller == "argo":
            retried(lambda: self.custom.patch_namespaced_custom_object(*ARGO, ns, "rollouts", fleet.name, template))
        else:
            retried(lambda: self.apps.patch_namespaced_deployment(fleet.name, ns, template))

    # reading state

    def objects(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every fleet object by (controller, name)."""
        listed = {
            "specfleet": (GROUP, VERSION, PLURAL),
            "argo": (*ARGO, "rollouts"),
            "flagger": (*FLAGGER, "canaries"),
        }
        out = {}
        for controller, (group, version, plural) in listed.items():
            ns = self.namespaces[controller]
            items = retried(self.custom.list_namespaced_custom_object, group, version, ns, plural)
            for item in items["items"]:
                out[controller, item["metadata"]["name"]] = item
        return out

    def serving_pods(self, controller: str) -> list[dict[str, str]]:
        """Labels of the Ready, not terminating pods of a namespace: the pods a Service sends traffic to.

        Read as raw JSON: the client's model objects cost ~1 ms a pod, too slow to poll hundreds every second.
        """
        ns = self.namespaces[controller]
        response = retried(lambda: self.core.list_namespaced_pod(ns, _preload_content=False))
        pods = json.loads(response.data)["items"]
        return [
            dict(p["metadata"].get("labels") or {})
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])
        ]

    def selectors(self) -> dict[str, dict[str, str]]:
        ns = self.namespaces["specfleet"]
        response = retried(lambda: self.core.list_namespaced_service(ns, _preload_content=False))
        return {s["metadata"]["name"]: s["spec"].get("selector") or {} for s in json.loads(response.data)["items"]}


def retried(call: Callable[..., Any], *args: Any) -> Any:
    """An API call, again after a server error or timeout (a loaded 2-core machine's API server answers 504
    at times); a create answered 409 was made by an attempt that timed out."""
    for attempt in range(6):
        try:
            return call(*args)
        except kubernetes.client.ApiException as error:
            if error.status == 409:
                return None
            if attempt == 5 or (error.status or 500) < 500:
                raise
        except urllib3.exceptions.HTTPError:
            if attempt == 5:
                raise
        time.sleep(5)
    return None


def settled(controller: str, obj: dict[str, Any]) -> bool:
    """The stable is up and no canary runs: the moment a config change starts a canary."""
    status = obj.get("status") or {}
    if controller == "specfleet":
        return status.get("phase") == "Healthy"
    if controller == "argo":
        return status.get("phase") == "Healthy" and bool(status.get("stableRS"))
    return status.get("phase") == "Initialized"


def outcome(fleet: Fleet, obj: dict[str, Any]) -> str:
    """promoted, rolled back, or held (canary still live or paused)."""
    status = obj.get("status") or {}
    if fleet.controller == "specfleet":
        if status.get("phase") == "RolledBack" or status.get("rejectedRevision"):
            return "rolled back"
        promoted = status.get("stableRevision") not in (None, fleet.initial) and not status.get("canaryRevision")
        return "promoted" if promoted else "held"
    if fleet.controller == "argo":
        if status.get("abort") or status.get("phase") == "Degraded":
            return "rolled back"
        promoted = status.get("phase") == "Healthy" and status.get("stableRS") not in (None, fleet.initial)
        return "promoted" if promoted else "held"
    phase = status.get("phase")
    return {"Failed": "rolled back", "Succeeded": "promoted"}.get(phase, "held")


def canary_serving(run: Run, fleet: Fleet, pods: dict[str, list[dict[str, str]]], selectors: dict[str, Any]) -> bool:
    """Whether the canary still gets traffic: specfleet's Service still selects it; a peer still has a Ready
    canary pod (Argo's basic canary and Flagger's `<name>-canary` Service send traffic to every Ready one)."""
    if fleet.controller == "specfleet":
        return selectors.get(fleet.name, {}).get(LABEL_TRACK) != Track.STABLE
    if fleet.controller == "argo":
        return any(
            p.get("app") == fleet.name and p.get("rollouts-pod-template-hash") == fleet.canary_hash
            for p in pods["argo"]
        )
    return any(p.get("app") == fleet.name for p in pods["flagger"])


def start_fleets(run: Run, fleets: list[Fleet]) -> float:
    """Create the fleets, wait for their stables, start every canary; returns the moment they started."""
    for fleet in fleets:
        run.create(fleet)

    def all_settled() -> bool:
        objects = run.objects()
        return all(
            (f.controller, f.name) in objects and settled(f.controller, objects[f.controller, f.name]) for f in fleets
        )

    wait_until("every stable to be up", all_settled, 900)
    objects = run.objects()
    for fleet in fleets:
        status = objects[fleet.controller, fleet.name].get("status") or {}
        fleet.initial = status.get("stableRevision") if fleet.controller == "specfleet" else status.get("stableRS")
        run.start_canary(fleet)
    started = time.monotonic()

    def hashes_known() -> bool:
        objects = run.objects()
        for fleet in fleets:
            if fleet.controller == "argo":
                current = (objects[fleet.controller, fleet.name].get("status") or {}).get("currentPodHash")
                fleet.canary_hash = current if current != fleet.initial else None
        return all(f.canary_hash for f in fleets if f.controller == "argo")

    wait_until("Argo's canary ReplicaSets", hashes_known, 300)
    return started


def observe(run: Run, fleets: list[Fleet], t0: dict[str, float], until: Callable[[], bool], deadline: float) -> None:
    """Poll once a second: when each fleet's canary stops getting traffic (after its controller's `t0`), and
    outcomes at the end."""
    while time.monotonic() < deadline and not until():
        now = time.monotonic()
        pods = {c: run.serving_pods(c) for c in ("argo", "flagger")}
        selectors = run.selectors()
        for fleet in fleets:
            if fleet.rolled_back_at is None and not canary_serving(run, fleet, pods, selectors):
                fleet.rolled_back_at = now - t0[fleet.controller]
        time.sleep(1.0)
    objects = run.objects()
    for fleet in fleets:
        fleet.outcome = outcome(fleet, objects[fleet.controller, fleet.name])


def restart_prometheus_after(cluster: Any, seconds: float) -> None:
    """Stop the dev cluster's Prometheus (its pid file), wait, start it again with the same command."""
    from specfleet_workshop.devcluster import process
    from specfleet_workshop.devcluster.config import Layout

    layout = Layout(cluster.state_dir)
    record = process.read_record(layout.pid_file("prometheus"))
    if record is None:
        raise SystemExit("no Prometheus pid file")
    process.stop(layout.pid_file("prometheus"))
    time.sleep(seconds)
    process.start(list(record.command), layout.pid_file("prometheus"), layout.log_file("prometheus"))


SCRAPED = (
    'sum by (namespace) (sum_over_time(up{{job="file-sd"}}[{seconds}s]))'
    ' / sum by (namespace) (count_over_time(up{{job="file-sd"}}[{seconds}s]))'
)
"""The share of the simulated pods' scrapes that succeeded, per controller's namespace, over the run: a loading
pod's 503 counts as a failure here, as it does for every controller's queries."""
TIMED_OUT = (
    'sum by (namespace) (count_over_time((up{{job="file-sd"}} == 0 and scrape_duration_seconds{{job="file-sd"}}'
    " >= {slow})[{seconds}s:{interval}s]))"
    ' / sum by (namespace) (count_over_time(up{{job="file-sd"}}[{seconds}s]))'
)
"""The share of the simulated pods' scrapes that Prometheus gave up on, per namespace: failed after at least
`slow` seconds, where a not-yet-Ready pod's 503 fails at once. Read at the scrape interval, one sample a scrape."""
SCRAPE_INTERVAL = 5.0
"""The dev cluster's Prometheus scrape interval, which is also its scrape timeout."""
MIN_ANSWERED = 0.95
"""Below this share of scrapes answered in time the run measured an overloaded machine, not the controllers: a
pod whose scrapes time out has no series, and a peer reads an empty answer as a failed measurement (Argo
Rollouts, Flagger) where specfleet holds. A loading pod's 503 is an answer: real vLLM has no /metrics before it
is up either, and every controller meets it alike."""
SIMULATOR_NICE = -5
"""The simulators' scheduling priority: they stand in for GPU nodes, whose /metrics do not wait for the control
plane's CPU; on 2 cores at the default priority a burst of the controllers' and Prometheus' work outlasted the
scrape timeout. Needs CAP_SYS_NICE (root); without it they run at the default priority and the run says so."""


Shares = dict[str, float | None]


def scrape_shares(prometheus_url: str, namespaces: dict[str, str], seconds: float) -> dict[str, Shares]:
    """Per controller, the share of its pods' scrapes that succeeded and the share answered in time (not given
    up on by Prometheus) in the last `seconds` (None: none seen)."""
    prometheus = PrometheusConnect(prometheus_url)

    def per_controller(query: str) -> Shares:
        shares = {row["metric"].get("namespace"): float(row["value"][1]) for row in prometheus.custom_query(query)}
        return {controller: shares.get(namespace) for controller, namespace in namespaces.items()}

    window = round(seconds)
    succeeded = per_controller(SCRAPED.format(seconds=window))
    timed_out = per_controller(
        TIMED_OUT.format(seconds=window, interval=round(SCRAPE_INTERVAL), slow=SCRAPE_INTERVAL / 2)
    )
    answered = {
        controller: None if succeeded[controller] is None else 1 - (timed_out[controller] or 0.0)
        for controller in namespaces
    }
    return {"succeeded": succeeded, "answered": answered}


def rollback_phases(args: argparse.Namespace, cluster: Any, api: Any, binaries: dict[str, Path],
                    specfleet_namespace: str, work: Path) -> dict[str, Any]:  # fmt: skip
    """Breach and good, A/A (per setting), then outage fleets, every controller at once with its simulator."""
    settings = tuple(args.settings)
    measured = tuple(dict.fromkeys([*settings, *(args.outage_settings or ())]))
    core = kubernetes.client.CoreV1Api(api)
    suffix = specfleet_namespace.rpartition("-")[2]
    namespaces = {"specfleet": specfleet_namespace, "argo": f"argo-{suffix}", "flagger": f"flagger-{suffix}"}
    for ns in (namespaces["argo"], namespaces["flagger"]):
        core.create_namespace({"metadata": {"name": ns}})
    custom = kubernetes.client.CustomObjectsApi(api)
    for setting in measured:
        custom.create_namespaced_custom_object(
            *ARGO, namespaces["argo"], "analysistemplates",
            argo_template(namespaces["argo"], setting, cluster.prometheus_url),
        )  # fmt: skip
    for template in flagger_templates(namespaces["flagger"], cluster.prometheus_url):
        custom.create_namespaced_custom_object(*FLAGGER, namespaces["flagger"], "metrictemplates", template)
    run = Run(cluster, namespaces, {c: f"http://127.0.0.1:{free_port()}" for c in CONTROLLERS}, custom, core,
              kubernetes.client.AppsV1Api(api), args.load)  # fmt: skip
    scenario_file = work / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario(args.load, breach=False, cold=False)))
    sims = {
        f"sim-{controller}": [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario_file),
                              "--kubeconfig", str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir),
                              "--listen", run.sim_urls[controller].removeprefix("http://"), "--seed", "13",
                              "--namespace", namespaces[controller]]
        for controller in CONTROLLERS
    }  # fmt: skip
    controllers = {c: controller_command(c, binaries, cluster, namespaces[c])[0] for c in CONTROLLERS}
    environments = {"argo": {"POD_NAMESPACE": namespaces["argo"]}}
    done: list[Fleet] = []
    started = time.monotonic()
    with background(sims | controllers, work, keep=args.keep, environments=environments,
                    nice=dict.fromkeys(sims, SIMULATOR_NICE)):  # fmt: skip
        for url in run.sim_urls.values():
            wait_until(f"the simulator at {url}", lambda url=url: _ready(url, "/healthz"), 180)
        for setting in settings:
            breach_and_good = [*fleets_of("breach", args.trials, (setting,)),
                               *fleets_of("good", args.side_trials, (setting,))]  # fmt: skip
            breach_phase(run, breach_and_good, setting, args)
            done += breach_and_good
            checkpoint(done, measured, args.json)
            aa = fleets_of("aa", args.trials, (setting,))
            aa_phase(run, aa, setting)
            done += aa
            checkpoint(done, measured, args.json)
        outage = fleets_of("outage", args.side_trials, tuple(args.outage_settings or settings))
        outage_phase(run, outage, args)
        done += outage
        shares = scrape_shares(cluster.prometheus_url, namespaces, time.monotonic() - started)
    return collect(done, measured) | {"scraped": shares}


def scale_phase(args: argparse.Namespace, cluster: Any, api: Any, binaries: dict[str, Path], work: Path) -> dict[
    str, Any]:  # fmt: skip
    """`--scale` fleets of each controller, one controller at a time (see fleetscale.py)."""
    figures = {}
    for controller in args.scale_controllers:
        namespace = f"scale-{controller}-{free_port()}"
        command, ready_url = controller_command(controller, binaries, cluster, namespace)
        serving = functools.partial(serve, controller, command, ready_url, {"POD_NAMESPACE": namespace}, work)
        say(f"scale: {args.scale} {controller} fleets")
        figures[controller] = fleetscale.measure(
            SCALE_CONTENDERS[controller](cluster.prometheus_url), args.scale, api, namespace, serving,
            cluster.state_dir / "logs" / "audit.log", args.idle, timeout=1800, arrival=args.scale_arrival,
        )  # fmt: skip
        say(f"scale: {controller}: {json.dumps(figures[controller])}")
    return figures


@contextlib.contextmanager
def serve(controller: str, command: list[str], ready_url: str, environment: dict[str, str], work: Path) -> Iterator[
    int]:  # fmt: skip
    """Run one controller until the block ends; yields its pid once `ready_url` answers."""
    with background({controller: command}, work, environments={controller: environment}) as [process]:
        wait_until(f"{controller} serving {ready_url}", lambda: _ready(ready_url, ""), 120)
        yield process.pid


def scale_contenders() -> dict[str, Callable[[str], fleetscale.Contender]]:
    """Each controller's fleet for the scale phase: one replica of the good EAGLE-3 config, a stable only."""

    def specfleet(prometheus_url: str) -> fleetscale.Contender:
        def create(api: Any, namespace: str, name: str) -> None:
            body = specfleet_fleet(name, "scale", "tuned", GOOD)
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, GROUP, VERSION,
                    namespace, PLURAL, body)  # fmt: skip

        return fleetscale.Contender("specfleet", (GROUP, VERSION, PLURAL), create, lambda api, ns: None,
                                    lambda obj: settled("specfleet", obj))  # fmt: skip

    def argo(prometheus_url: str) -> fleetscale.Contender:
        def prepare(api: Any, namespace: str) -> None:
            template = argo_template(namespace, "tuned", prometheus_url)
            kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                *ARGO, namespace, "analysistemplates", template
            )

        def create(api: Any, namespace: str, name: str) -> None:
            rollout = argo_rollout(name, "scale", "tuned", GOOD)
            rollout["spec"]["replicas"] = 1
            service = {"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [{"port": 8000}]}}
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, *ARGO, namespace,
                    "rollouts", rollout)  # fmt: skip
            retried(kubernetes.client.CoreV1Api(api).create_namespaced_service, namespace, service)

        return fleetscale.Contender("argo", (*ARGO, "rollouts"), create, prepare, lambda obj: settled("argo", obj))

    def flagger(prometheus_url: str) -> fleetscale.Contender:
        def prepare(api: Any, namespace: str) -> None:
            for template in flagger_templates(namespace, prometheus_url):
                kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                    *FLAGGER, namespace, "metrictemplates", template
                )

        def create(api: Any, namespace: str, name: str) -> None:
            retried(kubernetes.client.AppsV1Api(api).create_namespaced_deployment, namespace,
                    flagger_deployment(name, GOOD))  # fmt: skip
            retried(kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object, *FLAGGER, namespace,
                    "canaries", flagger_canary(name, "scale", "tuned"))  # fmt: skip

        return fleetscale.Contender("flagger", (*FLAGGER, "canaries"), create, prepare,
                                    lambda obj: settled("flagger", obj))  # fmt: skip

    return {"specfleet": specfleet, "argo": argo, "flagger": flagger}


SCALE_CONTENDERS = scale_contenders()


def breach_phase(run: Run, fleets: list[Fleet], setting: str, args: argparse.Namespace) -> None:
    """Breach and good fleets of one setting: the breach drafters turn bad once every canary was judged good."""
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    started = start_fleets(run, fleets)
    say(f"{setting}: {len(fleets)} breach and good canaries started")
    time.sleep(max(0.0, started + warmup_seconds((setting,)) - time.monotonic()))
    objects = run.objects()
    breach = [f for f in fleets if f.kind == "breach"]
    for fleet in breach:
        if outcome(fleet, objects[fleet.controller, fleet.name]) == "rolled back":
            fleet.notes.append("rolled back before the breach")
    breached = run.put_scenario(scenario(run.load, breach=True, cold=False))
    t0 = max(breached.values())
    say(f"{setting}: breach at {t0 - started:.0f} s after the canaries started")
    minimum_end = started + max(SETUPS[c, setting].hold for c in CONTROLLERS) + 120
    observe(
        run, fleets, breached,
        until=lambda: time.monotonic() > minimum_end and all(f.rolled_back_at is not None for f in breach),
        deadline=t0 + args.observe,
    )  # fmt: skip
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    for fleet in fleets:
        run.delete(fleet)


def aa_phase(run: Run, fleets: list[Fleet], setting: str) -> None:
    """A/A canaries whose pods get no load for their first minute (a cold start), observed for 10 intervals of
    the slowest controller's specfleet-equal setting (10 minutes documented, 3 tuned)."""
    run.put_scenario(scenario(run.load, breach=False, cold=True))
    started = start_fleets(run, fleets)
    say(f"{setting}: {len(fleets)} A/A canaries started")
    time.sleep(max(0.0, started + COLD_START_SECONDS - time.monotonic()))
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    watch = AA_OBSERVE_SECONDS[setting]
    observe(run, fleets, dict.fromkeys(CONTROLLERS, started), until=lambda: False, deadline=started + watch)
    for fleet in fleets:
        run.delete(fleet)


def outage_phase(run: Run, fleets: list[Fleet], args: argparse.Namespace) -> None:
    """Live, healthy canaries (every setting at once); Prometheus stopped for 2 minutes 90 s into the analysis."""
    run.put_scenario(scenario(run.load, breach=False, cold=False))
    started = start_fleets(run, fleets)
    say(f"outage: {len(fleets)} canaries started")
    time.sleep(max(0.0, started + 90 - time.monotonic()))
    outage_start = time.monotonic()
    restart_prometheus_after(run.cluster, OUTAGE_SECONDS)
    wait_until("Prometheus back", lambda: _ready(run.cluster.prometheus_url), 120)
    say("outage: Prometheus is back")
    observe(run, fleets, dict.fromkeys(CONTROLLERS, outage_start), until=lambda: False,
            deadline=time.monotonic() + args.after_outage)  # fmt: skip


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def _ready(url: str, path: str = "/-/ready") -> bool:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
