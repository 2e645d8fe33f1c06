"""A stand-in Gateway API data plane for the simulator: fleet-level load routed by the users' HTTPRoutes.

As kwok stands in for kubelets, this stands in for a gateway (Envoy Gateway, Istio, an inference gateway):
it reads the HTTPRoutes a scenario's `gateway` streams name and the Services their rules send to, and routes
each arrival of a stream the way a Gateway API implementation would:

- the rule: the first rule whose `matches` the request's headers satisfy, rules with more header matches
  first (the Gateway API's precedence among rules of one route that differ only in headers); a rule
  without `matches` matches every request;
- the backend: one of the rule's `backendRefs` at random in proportion to its `weight` (default 1; 0 never);
- a copy for each `RequestMirror` filter of the rule, with its `percent` (or `fraction`; 100% when neither
  is set) chance, to the mirror's backend, whose answer is discarded;
- the pod: one of the backend Service's Ready pods (its selector over the pods' labels), at random as
  kube-proxy picks; for an InferencePool backend (`inference.networking.k8s.io`, kind `InferencePool`, its
  `spec.selector.matchLabels`), the Ready pod with the shortest queue (waiting and running requests), as an
  endpoint picker would, ties at random.

A request whose backend has no Ready pod is counted as unserved (a gateway's 503). Counts are kept per stream
and backend, user-facing and mirrored apart: what a test asks the gateway, never what Prometheus shows.

Pure: the HTTPRoute and Service documents come in as JSON (`Routes.from_documents`), the pods as labels.
"""

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HTTPROUTE_GROUP = "gateway.networking.k8s.io"
HTTPROUTE_VERSION = "v1"
HTTPROUTE_PLURAL = "httproutes"
INFERENCE_GROUP = "inference.networking.k8s.io"
INFERENCE_VERSION = "v1"
INFERENCEPOOL_PLURAL = "inferencepools"
SERVICE, INFERENCE_POOL = "Service", "InferencePool"


@dataclass(frozen=True)
class Backend:
    """A Service (or an InferencePool) a rule sends to or mirrors to."""

    namespace: str
    name: str
    kind: str = SERVICE


@dataclass(frozen=True)
class HeaderMatch:
    """An `Exact` header match (names compared case-insensitively, as HTTP header names are)."""

    name: str
    value: str

    def holds(self, headers: Mapping[str, str]) -> bool:
        wanted = self.name.lower()
        return any(key.lower() == wanted and value == self.value for key, value in headers.items())


@dataclass(frozen=True)
class Rule:
    """One HTTPRoute rule as the stand-in honours it."""

    matches: tuple[tuple[HeaderMatch, ...], ...]
    """Each entry is one `matches[]` item (all its headers must hold); empty: every request."""
    backends: tuple[tuple[Backend, int], ...]
    mirrors: tuple[tuple[Backend, float], ...]
    """Mirror backends and the share (0 to 1) of the rule's requests copied to each."""

    def accepts(self, headers: Mapping[str, str]) -> bool:
        return not self.matches or any(all(h.holds(headers) for h in match) for match in self.matches)

    @property
    def specificity(self) -> int:
        return max((len(match) for match in self.matches), default=0)


def _backend(ref: Mapping[str, Any], namespace: str) -> Backend | None:
    """A backendRef to a core Service or an InferencePool (the kinds the stand-in serves), in the route's
    namespace by default."""
    kind = (ref.get("group", ""), ref.get("kind", SERVICE))
    if kind not in (("", SERVICE), (INFERENCE_GROUP, INFERENCE_POOL)) or not ref.get("name"):
        return None
    return Backend(str(ref.get("namespace") or namespace), str(ref["name"]), kind[1])


def _mirror_share(mirror: Mapping[str, Any]) -> float:
    """`percent`, or `fraction` (numerator / denominator, default 100), of requests mirrored; all when unset."""
    if mirror.get("percent") is not None:
        return max(0.0, min(1.0, float(mirror["percent"]) / 100))
    fraction = mirror.get("fraction")
    if isinstance(fraction, Mapping):
        denominator = float(fraction.get("denominator") or 100)
        return max(0.0, min(1.0, float(fraction.get("numerator") or 0) / denominator))
    return 1.0


def parse_rules(route: Mapping[str, Any]) -> tuple[Rule, ...]:
    """An HTTPRoute document's rules, most specific first (a stable sort keeps the route's order otherwise)."""
    namespace = str((route.get("metadata") or {}).get("namespace") or "")
    rules = []
    for rule in (route.get("spec") or {}).get("rules") or []:
        matches = tuple(
            tuple(
                HeaderMatch(str(h["name"]), str(h["value"]))
                for h in match.get("headers") or []
                if h.get("type", "Exact") == "Exact"
            )
            for match in rule.get("matches") or []
        )
        backends = tuple(
            (backend, int(ref.get("weight", 1)))
            for ref in rule.get("backendRefs") or []
            if (backend := _backend(ref, namespace)) is not None
        )
        mirrors = tuple(
            (backend, _mirror_share(f["requestMirror"]))
            for f in rule.get("filters") or []
            if f.get("type") == "RequestMirror"
            and isinstance(f.get("requestMirror"), Mapping)
            and (backend := _backend(f["requestMirror"].get("backendRef") or {}, namespace)) is not None
        )
        rules.append(Rule(matches, backends, mirrors))
    return tuple(sorted(rules, key=lambda r: -r.specificity))


@dataclass(frozen=True)
class Routes:
    """What the stand-in knows of the cluster: the routes' rules and their backends' selectors."""

    rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    """By route, `namespace/name`."""
    selectors: Mapping[Backend, Mapping[str, str]] = field(default_factory=dict)
    """Each backend's selector (a Service's, an InferencePool's `matchLabels`); one that does not exist has none
    and no pods."""

    def backends(self) -> set[Backend]:
        """Every Service the routes send or mirror to."""
        return {
            backend
            for rules in self.rules.values()
            for rule in rules
            for backend in (*(b for b, _ in rule.backends), *(b for b, _ in rule.mirrors))
        }


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


@dataclass(frozen=True)
class Delivery:
    """Where one request (and its copies) went."""

    served: tuple[Backend, str] | None
    """The backend and pod (`namespace/name`) that answered the user, None when none could (no rule, no pod)."""
    backend: Backend | None
    """The backend the rule picked (also when it had no Ready pod)."""
    mirrored: tuple[tuple[Backend, str], ...] = ()
    """Copies sent, whose answers are discarded."""


def _pick(backend: Backend, pods: Sequence[str], rng: random.Random, queue: Callable[[str], int]) -> str:
    """A Service's pod at random; an InferencePool's with the shortest queue (ties at random)."""
    if backend.kind == INFERENCE_POOL:
        shortest = min(queue(pod) for pod in pods)
        pods = [pod for pod in pods if queue(pod) == shortest]
    return rng.choice(list(pods))


def route_request(
    rules: Sequence[Rule],
    headers: Mapping[str, str],
    ready_pods: Mapping[Backend, Sequence[str]],
    rng: random.Random,
    queue: Callable[[str], int] = lambda pod: 0,
) -> Delivery:
    """Pick the rule, the backend by weight, a Ready pod of it, and the mirrors' copies, for one request
    (`queue`: a pod's waiting and running requests, for an InferencePool's endpoint picker)."""
    rule = next((r for r in rules if r.accepts(headers)), None)
    if rule is None:
        return Delivery(served=None, backend=None)
    weighted = [(backend, weight) for backend, weight in rule.backends if weight > 0]
    backend = None
    if weighted:
        backend = rng.choices([b for b, _ in weighted], weights=[w for _, w in weighted])[0]
    pods = ready_pods.get(backend, ()) if backend is not None else ()
    served = (backend, _pick(backend, pods, rng, queue)) if backend is not None and pods else None
    mirrored = []
    for mirror, share in rule.mirrors:
        copies = ready_pods.get(mirror, ())
        if copies and rng.random() < share:
            mirrored.append((mirror, _pick(mirror, copies, rng, queue)))
    return Delivery(served=served, backend=backend, mirrored=tuple(mirrored))


def routing_of(rules: Sequence[Rule], headers: Mapping[str, str]) -> dict[str, Any]:
    """How the stand-in routes a request with `headers` now: the weights and mirror shares of the rule it takes."""
    rule = next((r for r in rules if r.accepts(headers)), None)
    if rule is None:
        return {"weights": {}, "mirrors": {}}
    return {
        "weights": {f"{b.namespace}/{b.name}": weight for b, weight in rule.backends},
        "mirrors": {f"{b.namespace}/{b.name}": share for b, share in rule.mirrors},
    }


@dataclass
class BackendCounts:
    """Requests of one stream that a backend got."""

    served: int = 0
    """User-facing requests it answered."""
    unserved: int = 0
    """User-facing requests the rule picked it for while it had no Ready pod (a 503)."""
    mirrored: int = 0
    """Copies it got from a RequestMirror filter (never seen by a user)."""


@dataclass
class StreamCounts:
    """One gateway stream's requests: by backend Service name (`namespace/name`), and those no rule took."""

    requests: int = 0
    unrouted: int = 0
    backends: dict[str, BackendCounts] = field(default_factory=dict)

    def add(self, delivery: Delivery) -> None:
        self.requests += 1
        if delivery.backend is None:
            self.unrouted += 1
        else:
            counts = self.backends.setdefault(f"{delivery.backend.namespace}/{delivery.backend.name}", BackendCounts())
            if delivery.served is None:
                counts.unserved += 1
            else:
                counts.served += 1
        for backend, _ in delivery.mirrored:
            self.backends.setdefault(f"{backend.namespace}/{backend.name}", BackendCounts()).mirrored += 1

    def document(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "unrouted": self.unrouted,
            "backends": {
                name: {"served": c.served, "unserved": c.unserved, "mirrored": c.mirrored}
                for name, c in sorted(self.backends.items())
            },
        }


@dataclass
class StreamState:
    """A stream's own Poisson arrivals and what became of them."""

    rng: random.Random
    next_arrival: float
    counts: StreamCounts = field(default_factory=StreamCounts)


def fleets_behind(routes: Routes, name_label: str) -> frozenset[tuple[str, str]]:
    """(namespace, fleet) of every fleet whose Services the routes send or mirror to, by the fleet label
    (`name_label`) in the Services' selectors: their pods take only the gateway's requests."""
    return frozenset(
        (backend.namespace, selector[name_label])
        for backend, selector in routes.selectors.items()
        if name_label in selector and backend in routes.backends()
    )
