"""The simulator process: per-pod engines, one loopback HTTP server (`routes`), file_sd targets, runtime control.

    sim = Simulator(load_scenario(text), file_sd_dir=info.file_sd_dir, api_client=info.api_client(),
                    namespaces=["team-a"], seed=1).start()
    sim.url                     # http://127.0.0.1:<port>
    sim.set_scenario(load_scenario(other))   # or PUT <url>/scenario
    sim.restart("team-a", "llama-canary-0")  # or POST <url>/pods/team-a/llama-canary-0/restart
    sim.stop()

Simulated time is wall time: engines advance to "now" when scraped, once a second on a ticker, and
before a scenario change (so the old knobs hold until the moment of the change). The scenario's `gateway`
streams are routed (`sim.gateway`, the HTTPRoutes and Services read once a second) up to "now" before any
engine advances to it. A completion request
joins its pod's engine and its thread sleeps until each engine step that emits its tokens has ended
(`streams`).
"""

import dataclasses
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import kubernetes

from specfleet.api.vocabulary import LABEL_NAME
from specfleet.hardware import BY_PRODUCT_NAME, MI300X, PRODUCT_NAME_LABEL, GpuProduct
from specfleet_workshop.fleetpods.kubelet import PreflightKubelet
from specfleet_workshop.fleetpods.loopback import LoopbackServer, parse_listen
from specfleet_workshop.fleetpods.pods import PodArgsError, PodInfo, parse_pod, runs_vllm
from specfleet_workshop.fleetpods.targets import target_group, write_atomic
from specfleet_workshop.fleetpods.watch import KubePodSource
from specfleet_workshop.sim import completions, model
from specfleet_workshop.sim.completions import CompletionError, CompletionRequest
from specfleet_workshop.sim.engine import MAX_WAITING, Engine, EngineConfig, configure
from specfleet_workshop.sim.exposition import families, rendered
from specfleet_workshop.sim.gateway import (
    HTTPROUTE_GROUP,
    HTTPROUTE_PLURAL,
    HTTPROUTE_VERSION,
    INFERENCE_GROUP,
    INFERENCE_POOL,
    INFERENCE_VERSION,
    INFERENCEPOOL_PLURAL,
    Backend,
    Routes,
    StreamState,
    fleets_behind,
    parse_rules,
    route_request,
    routing_of,
    selects,
)
from specfleet_workshop.sim.routes import DEFAULT_PORT, OpenAIRoute, handler_for, metrics_path, openai_base_path
from specfleet_workshop.sim.scenario import (
    GatewayStream,
    Scenario,
    ScenarioError,
    ScrapeAnswer,
    load_scenario,
    resolve,
    scrape_fault,
)
from specfleet_workshop.sim.streams import CompletionStream

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
MAX_COMPLETIONS = 256
"""Completion requests served at once (each holds a thread while it streams); more are answered 503."""
FALLBACK_GPU = MI300X
"""Used for pods on nodes without a known `amd.com/gpu.product-name` label."""
SCRAPE_FAULT_ANSWERS: dict[ScrapeAnswer, tuple[HTTPStatus, bytes]] = {
    "error": (HTTPStatus.INTERNAL_SERVER_ERROR, b"internal server error\n"),
    "garbage": (
        HTTPStatus.OK,
        b"<html><head><title>502 Bad Gateway</title></head>\n<body>upstream reset</body></html>\n",
    ),
}
"""What a broken exporter answers: an error status, or a 200 whose body (a proxy's error page) Prometheus
cannot parse. Either way the scrape fails and `up` is 0 for the target."""


def gpu_of(node_labels: dict[str, str]) -> GpuProduct:
    return BY_PRODUCT_NAME.get(node_labels.get(PRODUCT_NAME_LABEL, ""), FALLBACK_GPU)


@dataclass
class SimulatedPod:
    """A pod and, once it is Ready, its engine."""

    info: PodInfo
    gpu: GpuProduct
    config: EngineConfig
    matched: int | None
    engine: Engine | None = None
    created: float = 0.0
    """Wall-clock start of the engine: the `_created` samples."""
    restarts: int = 0
    """Engines started again in this pod (`Simulator.restart`)."""


class Simulator:
    """All simulated pods, the HTTP server, the file_sd file, and (optionally) the Kubernetes watch."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        file_sd_dir: Path | None = None,
        api_client: kubernetes.client.ApiClient | None = None,
        namespaces: Sequence[str] = (),
        listen: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT),
        seed: int = 0,
        scenario_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_completions: int = MAX_COMPLETIONS,
        model_cache: Path | None = None,
    ) -> None:
        parse_listen(f"{listen[0]}:{listen[1]}")
        self.listen = listen
        self.file_sd_dir = file_sd_dir
        self.seed = seed
        self.scenario_file = scenario_file
        self.clock = clock
        self._scenario = scenario
        self._scenario_stamp = self._file_stamp()
        self._pods: dict[str, SimulatedPod] = {}
        self.lock = threading.RLock()
        """Held for every look at the pods and their engines (the completion streams take it too)."""
        self.stopping = threading.Event()
        """Set by `stop()`: the ticker, the target writes and the streams end."""
        self._server: LoopbackServer | None = None
        self._source = (
            KubePodSource(api_client, namespaces, self, label_selector=None) if api_client is not None else None
        )
        self._kubelet = PreflightKubelet(api_client, model_cache) if api_client is not None else None
        """Runs the preflight Jobs' pods (`model_cache`: their HF_HOME here; see sim/kubelet.py)."""
        self._written: str | None = None
        self._completion_slots = threading.BoundedSemaphore(max_completions)
        self.max_completions = max_completions
        self._turns: dict[tuple[str, str, str], int] = {}
        """Round-robin position per track (namespace, sdep, track) for the track completions route."""
        self._api_client = api_client
        self._routes = Routes()
        """The gateway streams' HTTPRoutes and backend Services, as last read."""
        self._streams: list[tuple[GatewayStream, StreamState]] = []
        self._take_streams(scenario, self.clock())

    # lifecycle

    def start(self) -> "Simulator":
        """Bind the HTTP server, start serving, the ticker and the pod watch. Returns self."""
        self._server = LoopbackServer(self.listen, handler_for(self))
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="sim-http", daemon=True
        ).start()
        threading.Thread(target=self._tick, name="sim-tick", daemon=True).start()
        if self._api_client is not None:
            threading.Thread(target=self._read_routes_forever, name="sim-gateway", daemon=True).start()
        self._write_targets()
        if self._source is not None:
            self._source.start()
        log.info("serving %s", self.url)
        return self

    def stop(self) -> None:
        """Stop serving and remove this simulator's file_sd file (Prometheus drops the targets)."""
        self.stopping.set()
        if self._source is not None:
            self._source.stop()
        if self._kubelet is not None:
            self._kubelet.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self.lock:  # after stopping is set, so no target write can follow the unlink
            if self.targets_file is not None:
                self.targets_file.unlink(missing_ok=True)

    def __enter__(self) -> "Simulator":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """host:port actually bound (the port is chosen by the OS when 0 was asked for)."""
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return f"{self.listen[0]}:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def targets_file(self) -> Path | None:
        """`<file_sd_dir>/specfleet-sim-<port>.json`: one file per simulator, so several can share the directory."""
        if self.file_sd_dir is None or self._server is None:
            return None
        return self.file_sd_dir / f"specfleet-sim-{self._server.server_address[1]}.json"

    # scenario

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    def set_scenario(self, scenario: Scenario) -> None:
        """Replace the whole document: engines run to now on the old knobs, then continue on the new ones."""
        with self.lock:
            now = self.clock()
            self._route_arrivals(now)
            self._scenario = scenario
            self._take_streams(scenario, now)
            for pod in self._pods.values():
                pod.config, pod.matched = self._configure(pod.info, pod.gpu)
                if pod.engine is not None:
                    pod.engine.advance_to(now)
                    pod.engine.reconfigure(pod.config, now)
        log.info("scenario replaced (%d pairs)", len(scenario.pairs))

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.scenario_file.stat() if self.scenario_file else None
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size) if stat else None

    def reload_scenario_file(self) -> bool:
        """Take the scenario file if it changed since last read and is valid (the ticker calls this every second)."""
        with self.lock:
            stamp = self._file_stamp()
            if stamp is None or stamp == self._scenario_stamp or self.scenario_file is None or stamp[1] == 0:
                return False  # unchanged, gone, or truncated by an editor about to write it
            self._scenario_stamp = stamp
            try:
                scenario = load_scenario(self.scenario_file.read_text())
            except (OSError, ScenarioError) as error:
                log.error("%s not reloaded, keeping the current scenario: %s", self.scenario_file, error)
                return False
            self.set_scenario(scenario)
            return True

    # pods (the PodSink interface of KubePodSource; tests may call these directly)

    def upsert_pod(self, pod: dict[str, Any], node_labels: dict[str, str]) -> None:
        """Add or update a pod from its API JSON; a Running pod gets a target, a Ready one an engine.

        Preflight Jobs' pods go to the kubelet stand-in; pods without a vLLM container (the watch sees every
        pod) are ignored quietly; a vLLM pod whose arguments cannot be read is reported.
        """
        if (self._kubelet is not None and self._kubelet.takes(pod, node_labels)) or not runs_vllm(pod):
            return
        try:
            info = parse_pod(pod)
        except PodArgsError as error:
            metadata = pod.get("metadata") or {}
            log.warning("not simulating %s/%s: %s", metadata.get("namespace"), metadata.get("name"), error)
            return
        with self.lock:
            if not info.running:
                if self._pods.pop(info.key, None) is not None:
                    log.info("pod %s stopped running", info.key)
            else:
                known = self._pods.get(info.key)
                if known is None or known.info.uid != info.uid:
                    gpu = gpu_of(node_labels)
                    config, matched = self._configure(info, gpu)
                    known = self._pods[info.key] = SimulatedPod(info=info, gpu=gpu, config=config, matched=matched)
                    log.info("pod %s on %s: pair %s", info.key, gpu.short_name, matched)
                known.info = info
                if info.ready and known.engine is None:
                    rng = random.Random(f"{self.seed}/{info.key}")
                    known.engine = Engine(known.config, info.args.histogram_buckets, rng, self.clock())
                    known.created = time.time()
            self._write_targets()

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            if self._pods.pop(f"{namespace}/{name}", None) is not None:
                log.info("pod %s/%s gone", namespace, name)
            self._write_targets()

    def replace_pods(self, namespace: str | None, pods: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
        """A fresh listing of one namespace (None: all): forget the pods it no longer has."""
        listed = {"{namespace}/{name}".format(**(pod.get("metadata") or {})) for pod, _ in pods}
        with self.lock:
            for key, known in list(self._pods.items()):
                if (namespace is None or known.info.namespace == namespace) and key not in listed:
                    del self._pods[key]
            for pod, labels in pods:
                self.upsert_pod(pod, labels)
            self._write_targets()

    def _configure(self, info: PodInfo, gpu: GpuProduct) -> tuple[EngineConfig, int | None]:
        params = resolve(self._scenario, info.identity)
        if (info.namespace, info.labels.get(LABEL_NAME)) in fleets_behind(self._routes, LABEL_NAME):
            params = dataclasses.replace(params, load=0.0)  # its requests come through the gateway
        return configure(info.args, params, gpu), params.matched

    def restart(self, namespace: str, name: str) -> bool:
        """vLLM's process in the pod starts again, as after a container restart: a fresh engine whose counters
        and histograms start from 0 (with a new `_created`), under the same target, so Prometheus sees the same
        series reset. Requests in flight on the old engine end with it. False for an unknown or unready pod."""
        with self.lock:
            pod = self._pods.get(f"{namespace}/{name}")
            if pod is None or pod.engine is None:
                return False
            pod.restarts += 1
            rng = random.Random(f"{self.seed}/{pod.info.key}/{pod.restarts}")
            pod.engine = Engine(pod.config, pod.info.args.histogram_buckets, rng, self.clock())
            pod.created = time.time()
        log.info("pod %s/%s restarted its engine (restart %d)", namespace, name, pod.restarts)
        return True

    # output

    def metrics(self, namespace: str, name: str) -> tuple[HTTPStatus, bytes]:
        """The pod's exposition, advanced to now; 404 for an unknown pod, 503 before it is Ready, and what the
        scenario's `scrape_faults` say for a pod whose endpoint is broken (its engine still advances)."""
        with self.lock:
            pod = self._pods.get(f"{namespace}/{name}")
            if pod is None:
                return HTTPStatus.NOT_FOUND, b"no such simulated pod\n"
            if pod.engine is None:
                return HTTPStatus.SERVICE_UNAVAILABLE, b"engine not ready\n"
            self._route_arrivals(self.clock())
            pod.engine.advance_to(self.clock())
            fault = scrape_fault(self._scenario, namespace, name)
            if fault is not None:
                return SCRAPE_FAULT_ANSWERS[fault]
            snapshot = families(
                pod.engine.metrics, pod.info.args.served_model_name, pod.info.args.speculative is not None, pod.created
            )
        return HTTPStatus.OK, rendered(snapshot)  # outside the lock: the families hold copies of the numbers

    # OpenAI endpoints

    def _serving_pod(self, route: OpenAIRoute) -> SimulatedPod:
        """The pod that answers: the route's own, or the next Ready pod of the track in turn (call with the lock)."""
        if route.pod is not None:
            pod = self._pods.get(f"{route.namespace}/{route.pod}")
            if pod is None:
                raise CompletionError(HTTPStatus.NOT_FOUND, f"no simulated pod {route.namespace}/{route.pod}")
            if pod.engine is None:
                raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, f"pod {pod.info.key} is not Ready")
            return pod
        members = sorted(
            (
                pod
                for pod in self._pods.values()
                if pod.info.namespace == route.namespace
                and pod.info.labels.get(LABEL_NAME) == route.sdep
                and pod.info.track == route.track
            ),
            key=lambda pod: pod.info.name,
        )
        what = f"{route.namespace}/{route.sdep} track {route.track}"
        if not members:
            raise CompletionError(HTTPStatus.NOT_FOUND, f"no simulated pod of {what}")
        ready = [pod for pod in members if pod.engine is not None]
        if not ready:
            raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, f"no Ready pod of {what}")
        key = (route.namespace, route.sdep or "", route.track or "")
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return ready[turn % len(ready)]

    def models(self, route: OpenAIRoute) -> dict[str, Any]:
        """`GET .../v1/models`: the model the route's pod serves. CompletionError (404, 503) as for completions."""
        with self.lock:
            pod = self._serving_pod(route)
            return completions.models(pod.info.args.served_model_name, int(pod.created))

    def open_completion(self, route: OpenAIRoute, request: CompletionRequest) -> CompletionStream:
        """Submit a completion to the serving pod's engine; CompletionError says why not (404, 400, 503).

        The caller must `close()` the stream (it aborts an unfinished request and frees its slot).
        """
        if not self._completion_slots.acquire(blocking=False):
            busy = f"the simulator serves at most {self.max_completions} completions at once"
            raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, busy)
        try:
            with self.lock:
                pod = self._serving_pod(route)
                args = pod.info.args
                completions.check_model(request, (args.served_model_name, args.model))
                completions.check_length(request, args.max_model_len)
                engine = pod.engine
                assert engine is not None  # _serving_pod returns Ready pods only
                self._route_arrivals(self.clock())
                engine.advance_to(self.clock())
                if engine.metrics.waiting >= MAX_WAITING:
                    raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, f"pod {pod.info.key} is overloaded")
                client = engine.submit(self.clock(), request.prompt_tokens, request.max_tokens, request.ignore_eos)
                divergence = resolve(self._scenario, pod.info.identity).divergence
        except BaseException:
            self._completion_slots.release()
            raise
        return CompletionStream(self, pod.info, engine, client, request, divergence)

    def serves(self, key: str, engine: Engine) -> bool:
        """Whether `engine` still runs the pod `key` (a completion stream asks, with the lock)."""
        pod = self._pods.get(key)
        return pod is not None and pod.engine is engine

    def release_completion(self) -> None:
        """Free the slot `open_completion` took for a stream that is closed."""
        self._completion_slots.release()

    def describe(self) -> list[dict[str, Any]]:
        """What `GET /pods` shows: each pod, the pair it matched, and what the model predicts for it."""
        with self.lock:
            return [self._describe(pod) for pod in self._pods.values()]

    def _describe(self, pod: SimulatedPod) -> dict[str, Any]:
        info, config = pod.info, pod.config
        spec = info.args.speculative
        single = model.StepLoad(decode_requests=1, spec_tokens=config.k, prefill_tokens=0, context_tokens=0)
        step = config.step_seconds(single)
        expectation = config.expectation
        return {
            "namespace": info.namespace,
            "pod": info.name,
            "track": info.track,
            "ready": pod.engine is not None,
            "metrics_path": metrics_path(info.namespace, info.name),
            "openai_base_path": openai_base_path(info.namespace, info.name),
            "node": info.node_name,
            "gpu": pod.gpu.short_name,
            "model": info.args.model,
            "served_model_name": info.args.served_model_name,
            "method": spec.method if spec else None,
            "drafter": spec.model if spec else None,
            "k": config.k,
            "matched_pair": pod.matched,
            "acceptance": config.acceptance if spec else None,
            "acceptance_spread": config.acceptance_spread if spec else None,
            "per_position_acceptance": list(config.rates),
            "expected_per_position_acceptance": list(expectation.per_position) if expectation else [],
            "expected_draft_tokens": expectation.draft_tokens if expectation else None,
            "expected_acceptance_rate": expectation.acceptance_rate if expectation else None,
            "expected_mean_acceptance_length": config.expected_tokens_per_draft,
            "draft_cost": config.draft_cost,
            "draft_pass_overhead_seconds": config.draft_pass_overhead,
            "single_request_step_seconds": step,
            "load": config.load,
        }

    def _write_targets(self) -> None:
        """Rewrite the file_sd file when the set of targets changed."""
        path = self.targets_file
        if path is None or self.stopping.is_set():
            return
        with self.lock:
            groups = [
                target_group(pod.info, self.address, metrics_path(pod.info.namespace, pod.info.name))
                for pod in self._pods.values()
            ]
            text = json.dumps(sorted(groups, key=lambda g: g["labels"]["__metrics_path__"]), indent=1)
            if text != self._written:
                write_atomic(path, text)
                self._written = text

    def _tick(self) -> None:
        while not self.stopping.wait(TICK_SECONDS):
            self.reload_scenario_file()
            with self.lock:
                now = self.clock()
                self._route_arrivals(now)
                for pod in self._pods.values():
                    if pod.engine is not None:
                        pod.engine.advance_to(now)

    # the stand-in gateway

    def gateway(self) -> list[dict[str, Any]]:
        """What `GET /gateway` shows: each stream's route, headers and where its requests went so far."""
        with self.lock:
            self._route_arrivals(self.clock())
            return [
                {
                    "route": stream.route,
                    "headers": stream.headers,
                    "load": stream.load,
                    "routing": routing_of(self._routes.rules.get(stream.route, ()), stream.headers),
                    **state.counts.document(),
                }
                for stream, state in self._streams
            ]

    def _take_streams(self, scenario: Scenario, now: float) -> None:
        """The scenario's streams; one that did not change keeps its arrivals and counts."""
        kept = {stream.model_dump_json(): state for stream, state in self._streams}
        self._streams = []
        for index, stream in enumerate(scenario.gateway):
            state = kept.get(stream.model_dump_json())
            if state is None:
                rng = random.Random(f"{self.seed}/gateway/{index}")
                state = StreamState(rng, now + rng.expovariate(stream.load))
            self._streams.append((stream, state))

    def _route_arrivals(self, now: float) -> None:
        """Route every gateway arrival up to `now` to its pods' engines (call with the lock, before any engine
        advances to `now`, so each engine sees its arrivals in time order)."""
        if not self._streams:
            return
        ready: dict[Backend, list[str]] = {}
        for backend, selector in self._routes.selectors.items():
            ready[backend] = sorted(
                key
                for key, pod in self._pods.items()
                if pod.engine is not None
                and pod.info.namespace == backend.namespace
                and selects(selector, pod.info.labels)
            )
        for stream, state in self._streams:
            rules = self._routes.rules.get(stream.route, ())
            while state.next_arrival <= now:
                arrival = state.next_arrival
                delivery = route_request(rules, stream.headers, ready, state.rng, self._queue)
                state.counts.add(delivery)
                for _, key in (*([delivery.served] if delivery.served else []), *delivery.mirrored):
                    engine = self._pods[key].engine
                    assert engine is not None  # ready pods only
                    engine.arrive(arrival)
                state.next_arrival += state.rng.expovariate(stream.load)

    def _queue(self, key: str) -> int:
        """A Ready pod's waiting and running requests (call with the lock)."""
        engine = self._pods[key].engine
        return 0 if engine is None else engine.metrics.waiting + engine.metrics.running

    def _read_routes_forever(self) -> None:
        while not self.stopping.wait(TICK_SECONDS):
            try:
                routes = self._read_routes()
            except (kubernetes.client.ApiException, OSError) as error:
                log.warning("gateway: routes not read, keeping the last ones: %s", error)
                continue
            self.set_routes(routes)

    def _read_routes(self) -> Routes:
        """The streams' HTTPRoutes and every Service they send or mirror to (a missing one: no rules, no pods)."""
        assert self._api_client is not None
        custom = kubernetes.client.CustomObjectsApi(self._api_client)
        core = kubernetes.client.CoreV1Api(self._api_client)
        rules = {}
        for route in {stream.route for stream, _ in self._streams}:
            namespace, _, name = route.partition("/")
            try:
                document = custom.get_namespaced_custom_object(
                    HTTPROUTE_GROUP, HTTPROUTE_VERSION, namespace, HTTPROUTE_PLURAL, name
                )
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
                continue
            rules[route] = parse_rules(document if isinstance(document, dict) else {})
        read = Routes(rules=rules)
        selectors = {}
        for backend in read.backends():
            try:
                if backend.kind == INFERENCE_POOL:
                    pool = custom.get_namespaced_custom_object(
                        INFERENCE_GROUP, INFERENCE_VERSION, backend.namespace, INFERENCEPOOL_PLURAL, backend.name
                    )
                    matched = ((pool if isinstance(pool, dict) else {}).get("spec") or {}).get("selector") or {}
                    selectors[backend] = dict(matched.get("matchLabels") or {})
                else:
                    service = core.read_namespaced_service(backend.name, backend.namespace)
                    selectors[backend] = dict((service.spec.selector if service.spec else None) or {})
            except kubernetes.client.ApiException as error:
                if error.status != 404:  # a missing backend (or InferencePool kind) has no pods
                    raise
        return Routes(rules=rules, selectors=selectors)

    def set_routes(self, routes: Routes) -> None:
        """New routes (the route reader calls this; tests may too): arrivals so far go by the old ones; a pod
        whose fleet came behind a route (or left it) takes its per-pod load off (or back) from now on."""
        with self.lock:
            now = self.clock()
            self._route_arrivals(now)
            before = fleets_behind(self._routes, LABEL_NAME)
            self._routes = routes
            changed = before ^ fleets_behind(routes, LABEL_NAME)
            for pod in self._pods.values():
                if (pod.info.namespace, pod.info.labels.get(LABEL_NAME)) in changed:
                    pod.config, pod.matched = self._configure(pod.info, pod.gpu)
                    if pod.engine is not None:
                        pod.engine.advance_to(now)
                        pod.engine.reconfigure(pod.config, now)
