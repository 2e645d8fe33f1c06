"""What the operator may reach on a fleet's behalf, as pure functions: which Prometheus URLs a fleet may name
(the admin's allow-list; the fleet's bearer token goes with every query), whether another namespace consents to
its HTTPRoute being written (a Gateway API ReferenceGrant), whether a route still sends to a Service, and whether
the operator may write the InferencePools a fleet routes through.

A fleet is written by a tenant; the operator acts with its own, wider, identity. Each function here keeps that
identity from becoming the tenant's: a URL is admitted only under a prefix an admin listed, a route in another
namespace only when that namespace said so, and a Service is never deleted from under a route that uses it.
"""

import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specfleet.api.vocabulary import GROUP, INFERENCEPOOL_API_VERSION, KIND

PROMETHEUS_URL_FIELD = "spec.prometheus.url"
NOTIFICATION_ALLOW_FLAG = "--allow-notification-url"
ROUTE_FIELD = "spec.rollout.trafficRouting.httpRoute"
ROUTE_NAMESPACE_FIELD = f"{ROUTE_FIELD}.namespace"
INFERENCE_POOL_FIELD = "spec.rollout.trafficRouting.inferencePool"
INFERENCE_POOL_CRD = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases (manifests.yaml, InferencePool v1)"
)
GATEWAY_GROUP = "gateway.networking.k8s.io"
DEFAULT_PORTS = {"http": 80, "https": 443}
_PLAIN = frozenset(string.ascii_letters + string.digits + "-._~/:[]!$&'()*+,;=")
"""The characters a plain base URL needs (RFC 3986 unreserved, sub-delims, ':', '/', IPv6 brackets). Left out:
'@' (userinfo: `http://prom.svc@evil` reaches evil), '?' and '#' (a query or fragment may carry a credential and
is no part of a base URL), '%' (escapes hide dot segments and delimiters), '\\' (some clients read it as '/'),
whitespace, controls and anything not ASCII (look-alike hosts)."""


class UrlRefusedError(ValueError):
    """A URL that cannot name a Prometheus the operator asks on a fleet's behalf; the message says why."""


@dataclass(frozen=True)
class UrlPrefix:
    """scheme://host:port/path, where a URL is admitted when it has the same scheme, host and port and its path
    is this path or below it, segment by segment (`/tenant-a` admits `/tenant-a/x`, never `/tenant-ab`)."""

    scheme: str
    host: str
    port: int
    path: str
    """Without its trailing '/': '' admits every path."""

    def admits(self, url: "UrlPrefix") -> bool:
        same_origin = (url.scheme, url.host, url.port) == (self.scheme, self.host, self.port)
        return same_origin and (url.path == self.path or url.path.startswith(f"{self.path}/"))

    @property
    def shown(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.path}/"


def parse_prefix(text: str) -> UrlPrefix:
    """A plain base URL (no userinfo, query, fragment, escapes or dot segments) as a prefix, or UrlRefusedError."""
    if not text or not set(text) <= _PLAIN:
        raise UrlRefusedError(
            "only a plain http(s)://host[:port][/path] is taken: no userinfo (@), query (?), fragment (#), "
            "%-escapes, backslashes, spaces or non-ASCII"
        )
    return _prefix(text)


def _prefix(text: str) -> UrlPrefix:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:  # an unclosed IPv6 bracket, a port that is no number
        raise UrlRefusedError(f"not a URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlRefusedError("the scheme must be http or https")
    if not parts.hostname:
        raise UrlRefusedError("no host")
    segments = parts.path.split("/")
    if any(segment in (".", "..") for segment in segments):
        raise UrlRefusedError("dot segments (. or ..) in the path")
    return UrlPrefix(scheme, parts.hostname.lower(), DEFAULT_PORTS[scheme] if port is None else port,
                     parts.path.rstrip("/"))  # fmt: skip


def prometheus_allow_list(own: str | None, allowed: Iterable[str]) -> tuple[UrlPrefix, ...]:
    """The prefixes a fleet's `spec.prometheus.url` may be under: the operator's own `--prometheus-url` (its
    userinfo, query and fragment are the admin's and are dropped: a fleet's URL never carries them) and each
    `--allow-prometheus-url`, which must be plain (UrlRefusedError names the one that is not)."""
    prefixes = []
    if own:
        parts = urlsplit(own)
        prefixes.append(_prefix(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"))
    for entry in allowed:
        try:
            prefixes.append(parse_prefix(entry))
        except UrlRefusedError as error:
            raise UrlRefusedError(f"allowed Prometheus URL {_shown_text(entry)!r}: {error}") from None
    return tuple(prefixes)


def admitted(url: str, allowed: Sequence[UrlPrefix | str]) -> bool:
    return prometheus_refusal(url, allowed) is None


def prometheus_refusal(url: str, allowed: Sequence[UrlPrefix | str]) -> str | None:
    """Why the operator must not ask the Prometheus a fleet names at `url` (nor send it the fleet's token),
    naming the field and the allow-list; None when a prefix admits it. Strings in `allowed` are parsed as
    `--allow-prometheus-url` entries (tests); the shell passes `prometheus_allow_list`'s prefixes."""
    prefixes = [p if isinstance(p, UrlPrefix) else parse_prefix(p) for p in allowed]
    shown = _shown_text(url)
    try:
        parsed = parse_prefix(url)
    except UrlRefusedError as error:
        return f"{PROMETHEUS_URL_FIELD} {shown!r} is refused ({error}); {_allow_list_said(prefixes)}"
    if any(prefix.admits(parsed) for prefix in prefixes):
        return None
    return f"{PROMETHEUS_URL_FIELD} {shown!r} is not admitted: {_allow_list_said(prefixes)}"


def _allow_list_said(prefixes: Sequence[UrlPrefix]) -> str:
    listed = ", ".join(p.shown for p in prefixes)
    held = "no request was made and no token sent (an admin adds a prefix with `specfleet run --allow-prometheus-url`"
    held += ", the chart's operator.allowedPrometheusUrls)"
    if not prefixes:
        return f"the operator's Prometheus allow-list is empty (no --prometheus-url either); {held}"
    return f"the operator's Prometheus allow-list admits only URLs under {listed}; {held}"


def _shown_text(url: str) -> str:
    """A URL as a refusal repeats it: whatever precedes its last '@' (userinfo, maybe a password holding '?' or
    '#') and whatever follows a '?' or '#' (a query or fragment may hold a credential) replaced by '[…]', controls
    replaced, at most 200 characters."""
    scheme, sep, _ = url.partition("://")
    if "@" in url:
        url = f"{scheme}{sep}[…]@{url.rpartition('@')[2]}" if sep else f"[…]@{url.rpartition('@')[2]}"
    for cut in "?#":
        head, found, _ = url.partition(cut)
        url = head + ("[…]" if found else "")
    url = "".join(c if c.isprintable() else "?" for c in url)
    return url if len(url) <= 200 else url[:199] + "…"


def target_refusal(field: str, url: str, allowed: Sequence[UrlPrefix]) -> str | None:
    """Why the operator must not send a namespace's notifications to `url` (a tenant names it, the operator sends
    from inside the cluster), naming the field; None when a prefix of the admin's allow-list admits it. The query
    is the target's own (a Teams workflow's signature) and is sent, never checked or shown; the rest must be a
    plain URL under a prefix, as a fleet's Prometheus URL must. Only `redacted(url)` is ever repeated."""
    base = url.partition("?")[0]
    listed = ", ".join(p.shown for p in allowed)
    held = f"nothing is sent there (an admin adds a prefix with `specfleet run {NOTIFICATION_ALLOW_FLAG}`, the "
    held += "chart's notifications.allowedUrls)"
    try:
        parsed = parse_prefix(base)
    except UrlRefusedError as error:
        return f"{field} {redacted(url)!r} is refused ({error}); {held}"
    if any(prefix.admits(parsed) for prefix in allowed):
        return None
    if not allowed:
        return f"{field} {redacted(url)!r} is not admitted: the operator's notification allow-list is empty; {held}"
    return f"{field} {redacted(url)!r} is not admitted: the allow-list admits only URLs under {listed}; {held}"


def redacted(url: str) -> str:
    """A target URL as a log line or a refusal may show it: its scheme, host and port, never its userinfo, path,
    query or fragment (where webhook and chat URLs keep their tokens); `scheme://[…]` when the host itself may be
    a token (`slack://TOKEN/...`), `[…]` when it is no URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "[…]"
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or not set(parts.hostname) <= _PLAIN:
        return f"{scheme}://[…]" if scheme.isalnum() else "[…]"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown = f"{scheme}://{host}{'' if port is None else f':{port}'}"
    return shown + ("/[…]" if (parts.path not in ("", "/") or parts.query or parts.fragment) else "/")


def grants_route(grants: Iterable[Mapping[str, Any]], fleet_namespace: str, route: str) -> bool:
    """Whether one of the ReferenceGrants (all in the route's namespace) lets SpeculativeDeployments of
    `fleet_namespace` refer to the HTTPRoute `route`: `from` {group specfleet.io, kind SpeculativeDeployment,
    namespace}, `to` {group gateway.networking.k8s.io, kind HTTPRoute, name absent or `route`}, as Gateway API
    grants a route's reference to a Service in another namespace. Malformed grants grant nothing."""
    for grant in grants:
        spec = grant.get("spec") if isinstance(grant, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        froms, tos = _entries(spec.get("from")), _entries(spec.get("to"))
        from_fleets = any(
            f.get("group") == GROUP and f.get("kind") == KIND and f.get("namespace") == fleet_namespace for f in froms
        )
        to_route = any(
            t.get("group") == GATEWAY_GROUP and t.get("kind") == "HTTPRoute" and t.get("name") in (None, "", route)
            for t in tos
        )
        if from_fleets and to_route:
            return True
    return False


def _entries(value: object) -> list[Mapping[str, Any]]:
    return [entry for entry in value if isinstance(entry, Mapping)] if isinstance(value, list) else []


def references_service(
    route: Mapping[str, Any], namespace: str, service: str, kind: tuple[str, str] = ("", "Service")
) -> bool:
    """Whether an HTTPRoute sends to (or mirrors to) the Service `namespace`/`service` in any rule (`kind`: another
    backend kind, as (group, kind), such as an InferencePool). A backendRef without a namespace is in the route's
    own; without group and kind it is a core Service."""
    meta = route.get("metadata") if isinstance(route.get("metadata"), Mapping) else {}
    route_namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    spec = route.get("spec") if isinstance(route.get("spec"), Mapping) else {}
    rules = spec.get("rules") if isinstance(spec, Mapping) else None
    for rule in _entries(rules):
        refs = _entries(rule.get("backendRefs"))
        for holder in [rule, *refs]:
            for filter_ in _entries(holder.get("filters")):
                mirror = filter_.get("requestMirror")
                if isinstance(mirror, Mapping) and isinstance(mirror.get("backendRef"), Mapping):
                    refs.append(mirror["backendRef"])
        for ref in refs:
            of_kind = (ref.get("group") or "", ref.get("kind") or "Service") == kind
            if of_kind and ref.get("name") == service and ref.get("namespace", route_namespace) == namespace:
                return True
    return False


def http_route_refusal(*, served: bool) -> str | None:
    """Why a fleet whose traffic an HTTPRoute splits is held (None: the route can be written): the API server
    serves no HTTPRoute kind. Split by replica ratio instead, a weighted step would give the canary another share
    than the spec says and a shadow step no mirrored request, so the fleet waits and says which CRD to install."""
    if served:
        return None
    return (
        f"{ROUTE_FIELD}: the API server serves no HTTPRoute kind ({GATEWAY_GROUP}/v1): install Gateway API's CRDs "
        "(standard channel), or remove httpRoute to split by replica ratio; the fleet is held as it stands (no canary "
        "starts or moves) until then"
    )


def inference_pools_refusal(*, owned: bool, served: bool) -> str | None:
    """Why a fleet whose route sends to InferencePools is held (None: its pools can be written): the operator was
    not started to own InferencePools (`owned`: `--inference-pools`, which the chart pairs with the permissions),
    or the API server serves no InferencePool v1 kind (`served`). Held, the fleet's canary gets no pool and so no
    request, and the status and a Warning event say which of the two to fix, rather than a route silently naming
    pools nobody writes."""
    held = "the fleet is held as it stands (no canary starts or moves) until then"
    if not owned:
        return (
            f"{INFERENCE_POOL_FIELD}: this operator does not own InferencePools: start it with --inference-pools "
            f"(the chart's value inferencePools.enabled=true, which also grants the permissions); {held}"
        )
    if not served:
        return (
            f"{INFERENCE_POOL_FIELD}: the API server serves no InferencePool kind ({INFERENCEPOOL_API_VERSION}): "
            f"install the Gateway API Inference Extension's CRDs ({INFERENCE_POOL_CRD}); {held}"
        )
    return None
