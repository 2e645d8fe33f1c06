"""SpeculativeDeployment -> the Deployments and Services that run it. Pure: dicts in, dicts out.

Placement and ROCm needs follow AMD's device-plugin and vLLM's ROCm examples (shared/REFERENCE.md
section 2): `amd.com/gpu` limits, required affinity on the node labeller's product name, /dev/shm as
a memory emptyDir, the video group, and a start-up budget sized for model loading. The pods meet the Pod
Security Standard `restricted` (RuntimeDefault seccomp, no ServiceAccount token unless the template names a
ServiceAccount): a cluster's own admission keeps them so, and a relaxation is the template's, explicitly.
"""

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any, Literal

from specfleet.api.durations import parse_duration
from specfleet.api.problems import InvalidSpecError, Problem
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import (
    EndpointPickerRef,
    EndpointPickerTemplate,
    HeaderMatch,
    SpeculativeDeploymentSpec,
    SpeculativeMethod,
    SpeculativeSpec,
)
from specfleet.api.vocabulary import (
    ALWAYS_SERVED,
    ANNOTATION_HTTP_ROUTE,
    API_VERSION,
    FIELD_MANAGER,
    INFERENCE_GROUP,
    INFERENCEPOOL_API_VERSION,
    KIND,
    LABEL_CANDIDATE,
    LABEL_ENDPOINT_PICKER,
    LABEL_NAME,
    LABEL_REVISION,
    LABEL_TRACK,
    LABEL_TRAFFIC,
    SINGLE_TRACKS,
    Track,
)
from specfleet.hardware import NODE_FEATURE_LABEL, PRODUCT_NAME_LABEL
from specfleet.render.argv import VLLM_PORT, vllm_argv
from specfleet.render.podtemplate import fitted_pod

Manifest = dict[str, Any]

BackendKind = Literal["Service", "InferencePool"]
"""What the fleet's backendRefs on an HTTPRoute are: the tracks' Services, or their InferencePools."""

DEFAULT_IMAGE_REPOSITORY = "ghcr.io/specfleet/vllm-rocm"
HF_HOME = "/cache/huggingface"
SERVING_UID = 1000
PICKER_UID = 65532
"""The endpoint picker's user: distroless `nonroot`, as the Inference Extension's image runs."""
PICKER_HEALTH_PORT = 9003
PICKER_METRICS_PORT = 9090
PICKER_CONFIG_PATH = "/config"
REVISION_LENGTH = 10


def image(spec: SpeculativeDeploymentSpec) -> str:
    return spec.engine.image or f"{DEFAULT_IMAGE_REPOSITORY}:v{spec.engine.vllm_version}"


def revision(spec: SpeculativeDeploymentSpec) -> str:
    """A stable hash of what changes serving behaviour: image, command line, env and placement.

    Replicas, rollout settings and guardrails are left out, so changing them never starts a canary; an
    experiment's candidates are in, so new candidates start a new experiment.
    """
    behaviour = {
        "image": image(spec),
        "argv": vllm_argv(spec),
        "env": [e.model_dump(mode="json") for e in spec.engine.env],
        "gpus": [spec.accelerator.resource_name, spec.gpus_per_replica],
        "products": sorted(spec.accelerator.product_names),
        "nodeFeature": spec.accelerator.require_node_feature_label,
    }
    template = _template_behaviour(spec)
    if template:
        behaviour["template"] = template
    if spec.candidates:  # new candidates are a new experiment
        behaviour["candidates"] = [c.model_dump(mode="json", exclude_none=True) for c in spec.candidates]
    digest = hashlib.sha256(json.dumps(behaviour, sort_keys=True).encode()).hexdigest()
    return digest[:REVISION_LENGTH]


def _template_behaviour(spec: SpeculativeDeploymentSpec) -> dict[str, Any]:
    """The template as far as it can change what a pod runs: all of it but the pod labels."""
    if spec.template is None:
        return {}
    set_fields = spec.template.model_dump(mode="json", exclude_defaults=True, exclude={"metadata": {"labels"}})
    return {part: value for part, value in set_fields.items() if value}


def child_name(sdep: SpeculativeDeployment, track: Track | None = None, candidate: int | None = None) -> str:
    """The fleet's Service, a track's Deployment (and Service), or a side-by-side candidate's Deployment."""
    name = sdep.metadata.name if track is None else f"{sdep.metadata.name}-{track.value}"
    return name if candidate is None else f"{name}-{candidate}"


def selector_labels(
    sdep: SpeculativeDeployment, track: Track | None = None, candidate: int | None = None
) -> dict[str, str]:
    """Labels that select the fleet's pods (one track, one candidate's slice, or all): never the revision."""
    labels = {LABEL_NAME: sdep.metadata.name}
    if track is not None:
        labels[LABEL_TRACK] = track.value
    if candidate is not None:
        labels[LABEL_CANDIDATE] = str(candidate)
    return labels


def fleet_selector(sdep: SpeculativeDeployment) -> str:
    """The label selector string the scale subresource reports."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(sdep).items())


def _common_labels(sdep: SpeculativeDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": sdep.metadata.name,
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
        "app.kubernetes.io/part-of": "specfleet",
    }


def child_metadata(sdep: SpeculativeDeployment, name: str, labels: dict[str, str]) -> Manifest:
    meta: Manifest = {"name": name, "namespace": sdep.metadata.namespace, "labels": labels}
    if sdep.metadata.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": sdep.metadata.name,
                "uid": sdep.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def shm_size_gib(spec: SpeculativeDeploymentSpec) -> int:
    """8 GiB as in AMD's example, plus 2 GiB per extra tensor-parallel rank (RCCL buffers live there)."""
    return spec.storage.shm_size_gib or 8 + 2 * (spec.engine.tensor_parallel_size - 1)


def startup_budget_seconds(spec: SpeculativeDeploymentSpec) -> int:
    """How long loading may take: 10 minutes plus 10 s per GiB of weights (target and drafter), or 30 min."""
    if spec.engine.startup_timeout_seconds:
        return spec.engine.startup_timeout_seconds
    sizes = [s for s in (spec.model.size_gib, spec.speculative.size_gib) if s is not None]
    if not sizes:
        return 1800
    return int(600 + 10 * sum(sizes))


def _probe(period: int, failures: int, timeout: int) -> Manifest:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def serving_env(spec: SpeculativeDeploymentSpec) -> list[Manifest]:
    env: list[Manifest] = [{"name": "HF_HOME", "value": HF_HOME}]
    secret = spec.storage.hf_token_secret
    if secret is not None:
        env += [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}
            for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
        ]
    return env + [e.model_dump(mode="json") for e in spec.engine.env]


def node_affinity(spec: SpeculativeDeploymentSpec) -> Manifest | None:
    expressions = []
    if spec.accelerator.product_names:
        expressions.append(
            {"key": PRODUCT_NAME_LABEL, "operator": "In", "values": list(spec.accelerator.product_names)}
        )
    if spec.accelerator.require_node_feature_label:
        expressions.append({"key": NODE_FEATURE_LABEL, "operator": "In", "values": ["true"]})
    if not expressions:
        return None
    terms = [{"matchExpressions": expressions}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def model_cache_volume(spec: SpeculativeDeploymentSpec) -> Manifest:
    """The Hugging Face cache, mounted at HF_HOME: the claim when one is named, else a fresh emptyDir."""
    claim = spec.storage.model_cache_claim
    cache: Manifest = {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
    return {"name": "model-cache", **cache}


def _volumes(spec: SpeculativeDeploymentSpec) -> list[Manifest]:
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_size_gib(spec)}Gi"}},
        model_cache_volume(spec),
    ]


def pod_labels(
    sdep: SpeculativeDeployment, track: Track, rev: str, always_served: bool = False, candidate: int | None = None
) -> dict[str, str]:
    """A track's pod labels; `always_served` marks pods the fleet Service keeps while the canary has no traffic."""
    labels = {**_common_labels(sdep), **selector_labels(sdep, track, candidate), LABEL_REVISION: rev}
    return {**labels, LABEL_TRAFFIC: ALWAYS_SERVED} if always_served else labels


def pod_template(
    sdep: SpeculativeDeployment, track: Track, rev: str, always_served: bool = False, candidate: int | None = None
) -> Manifest:
    spec = sdep.spec
    gpus = {spec.accelerator.resource_name: str(spec.gpus_per_replica)}
    argv = vllm_argv(spec)
    container = {
        "name": "vllm",
        "image": image(spec),
        "command": argv[:2],
        "args": argv[2:],
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "env": serving_env(spec),
        "resources": {"limits": gpus, "requests": dict(gpus)},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": HF_HOME},
        ],
        "startupProbe": _probe(period=10, failures=math.ceil(startup_budget_seconds(spec) / 10), timeout=5),
        "readinessProbe": _probe(period=5, failures=3, timeout=3),
        "livenessProbe": _probe(period=15, failures=4, timeout=10),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: Manifest = {
        "containers": [container],
        "volumes": _volumes(spec),
        "tolerations": [t.model_dump(mode="json", exclude_none=True) for t in spec.accelerator.tolerations],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVING_UID,
            "runAsGroup": SERVING_UID,
            "fsGroup": SERVING_UID,
            "supplementalGroups": list(spec.accelerator.supplemental_groups),
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 60,
        "enableServiceLinks": False,
    }
    affinity = node_affinity(spec)
    if affinity:
        pod_spec["affinity"] = affinity
    labels = pod_labels(sdep, track, rev, always_served, candidate)
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(VLLM_PORT),
        "prometheus.io/path": "/metrics",
    }
    return fitted_pod({"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}, spec.template)


def rolling_update(spec: SpeculativeDeploymentSpec) -> Manifest:
    """How a track's Deployment replaces its own pods (a promotion changes stable's template in place): one
    new pod at a time on top, or within `rollout.maxSurge` / `maxUnavailable` when they are set, so that a
    promotion on a full GPU pool asks for no GPU the fleet does not hold."""
    limits = spec.move_limits()
    surge, unavailable = limits if limits is not None else (1, 0)
    return {"maxSurge": surge, "maxUnavailable": unavailable}


def deployment(
    sdep: SpeculativeDeployment,
    track: Track,
    rev: str,
    replicas: int,
    *,
    always_served: bool = False,
    candidate: int | None = None,
) -> Manifest:
    """One track's Deployment (or one side-by-side candidate's). Its selector leaves out the revision, so
    promotion can change it in place."""
    selector = selector_labels(sdep, track, candidate)
    labels = {**_common_labels(sdep), **selector, LABEL_REVISION: rev}
    deadline = int(parse_duration(sdep.spec.rollout.progress_deadline).total_seconds())
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(sdep, child_name(sdep, track, candidate), labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(sdep.spec)},
            "revisionHistoryLimit": 2,
            "progressDeadlineSeconds": deadline,
            "template": pod_template(sdep, track, rev, always_served, candidate),
        },
    }


def service(
    sdep: SpeculativeDeployment,
    track: Track | None = None,
    *,
    canary_traffic: bool = True,
    holdback_traffic: bool = False,
    route: str | None = None,
) -> Manifest:
    """The fleet's Service, or one track's (for route weights).

    The fleet Service splits traffic by Ready replicas across every track; without canary traffic it
    selects the stable track alone (with `holdback_traffic`, the pods labelled always-served: stable's and
    the holdback's), which is how an abort takes traffic away before the canary goes. A track's Service
    names the HTTPRoute (`route`, namespace/name) it was made for in an annotation.
    """
    selector = selector_labels(sdep, track)
    if track is None and not canary_traffic:
        always = {**selector_labels(sdep), LABEL_TRAFFIC: ALWAYS_SERVED}
        selector = always if holdback_traffic else selector_labels(sdep, Track.STABLE)
    metadata = child_metadata(sdep, child_name(sdep, track), {**_common_labels(sdep), **selector_labels(sdep, track)})
    if route is not None:
        metadata["annotations"] = {ANNOTATION_HTTP_ROUTE: route}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def inference_pool(
    sdep: SpeculativeDeployment, track: Track, picker: EndpointPickerRef, route: str | None = None
) -> Manifest:
    """One track's InferencePool (Gateway API Inference Extension v1), named like the track's Service: the track's
    pods by their labels, on the serving port, with the track's endpoint picker (`<endpointPickerRef.name>-<track>`:
    a picker serves one pool). One pool per track, so a canary's pods never join stable's pool (an endpoint
    picker's predictions assume a pool of identical configs). Like a track's Service, it names the HTTPRoute
    (`route`, namespace/name) it was made for in an annotation."""
    metadata = child_metadata(sdep, child_name(sdep, track), {**_common_labels(sdep), **selector_labels(sdep, track)})
    if route is not None:
        metadata["annotations"] = {ANNOTATION_HTTP_ROUTE: route}
    return {
        "apiVersion": INFERENCEPOOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": selector_labels(sdep, track)},
            "targetPorts": [{"number": VLLM_PORT}],
            "endpointPickerRef": {
                "name": f"{picker.name}-{track.value}",
                "port": {"number": picker.port},
                "failureMode": picker.failure_mode.value,
            },
        },
    }


def picker_name(sdep: SpeculativeDeployment, track: Track) -> str:
    """The endpoint picker the fleet runs for a track's pool: its Deployment and Service."""
    return f"{sdep.metadata.name}-epp-{track.value}"


def endpoint_picker(sdep: SpeculativeDeployment, track: Track, template: EndpointPickerTemplate) -> list[Manifest]:
    """The Deployment and Service of the endpoint picker of one track's InferencePool, from the user's template, as
    the Inference Extension's chart deploys one: started on that pool alone (`--pool-name`, `--pool-namespace`), its
    ext-proc port behind the Service the pool names (`endpointPickerRef`), gRPC health probes. The pod meets Pod
    Security `restricted` whatever the template says (the template has no field that could relax it), and has no
    ServiceAccount token unless the template names a ServiceAccount, whose own setting then decides, as the vLLM
    pods. Its pods carry neither the fleet's name nor a track label, so no Service or pool of the fleet selects
    them; the Deployment and Service carry the fleet's name, so the operator owns and prunes them as its other
    children."""
    name = picker_name(sdep, track)
    selector = {LABEL_ENDPOINT_PICKER: name}
    pod_labels = {**_common_labels(sdep), "app.kubernetes.io/name": "endpoint-picker", **selector}
    labels = {**pod_labels, LABEL_NAME: sdep.metadata.name}
    pool = child_name(sdep, track)
    probe = {"grpc": {"port": PICKER_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 10}
    ours = ["--pool-name", pool, "--pool-namespace", sdep.metadata.namespace, "--grpc-port", str(template.port)]
    ours += ["--grpc-health-port", str(PICKER_HEALTH_PORT), "--metrics-port", str(PICKER_METRICS_PORT)]
    container: Manifest = {
        "name": "epp",
        "image": template.image,
        "args": [*ours, *template.args],
        "ports": [
            {"name": "grpc", "containerPort": template.port, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": PICKER_METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [
            *(e.model_dump(mode="json") for e in template.env),
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "initialDelaySeconds": 5},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }
    resources = template.resources
    if resources.requests or resources.limits:
        container["resources"] = {
            part: {k: str(v) for k, v in values.items()}
            for part, values in (("requests", resources.requests), ("limits", resources.limits))
            if values
        }
    pod_spec: Manifest = {
        "containers": [container],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": PICKER_UID,
            "runAsGroup": PICKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 130,  # the extension's: as long as the longest request it may be routing
    }
    if template.service_account_name:  # the picker watches its pool with this identity: the ServiceAccount's own
        pod_spec["serviceAccountName"] = template.service_account_name  # automount setting decides, never widened
        del pod_spec["automountServiceAccountToken"]
    if template.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [ref.model_dump(mode="json") for ref in template.image_pull_secrets]
    if template.config_map is not None:
        pod_spec["volumes"] = [{"name": "config", "configMap": {"name": template.config_map.name}}]
        container["volumeMounts"] = [{"name": "config", "mountPath": PICKER_CONFIG_PATH, "readOnly": True}]
    deployment_ = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(sdep, name, labels),
        "spec": {
            "replicas": 1,  # one per pool: several need the picker's own leader election and other probes
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
    ext_proc = {"name": "grpc-ext-proc", "port": template.port, "targetPort": "grpc", "protocol": "TCP"}
    ports = [  # as the extension's chart names them: gateways find the ext-proc port by its protocol
        {**ext_proc, "appProtocol": "http2"},
        {"name": "http-metrics", "port": PICKER_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
    ]
    service_ = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(sdep, name, labels),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }
    return [deployment_, service_]


def canary_replicas(total: int, weight: int) -> int:
    """Replicas that carry `weight` percent of `total`, at least one so the canary can be measured."""
    return max(1, round(total * weight / 100))


def render(sdep: SpeculativeDeployment, track: Track = Track.STABLE) -> list[Manifest]:
    """Everything one track needs, as `specfleet render` prints it: Service(s) and the Deployment.

    The holdback is rendered on its `NoSpeculation` reference (a `PreviousStable` one needs the fleet's
    status, which only the operator has).
    """
    spec, always = sdep.spec, sdep.spec.holdback_replicas > 0
    if track is Track.CANDIDATE:
        if not spec.candidates:
            raise InvalidSpecError([Problem("spec.autoTune.candidates", "none to render for track candidate")])
        slices = []
        for index in range(len(spec.candidates)):
            tried = spec.candidate_spec(index)
            shown = sdep.model_copy(update={"spec": tried})
            replicas = canary_replicas(spec.main_replicas, spec.rollout.steps[0].share)
            slices.append(deployment(shown, track, revision(tried), replicas, candidate=index))
        return [service(sdep), *slices]
    if track is Track.HOLDBACK:
        control = spec.model_copy(
            update={"speculative": SpeculativeSpec(method=SpeculativeMethod.NONE), "auto_tune": None}
        )
        shown = sdep.model_copy(update={"spec": control})
        held = deployment(shown, track, revision(control), max(1, spec.holdback_replicas), always_served=True)
        return [service(sdep), service(sdep, track), held]
    if track is Track.STABLE:
        replicas = spec.main_replicas
    else:
        replicas = canary_replicas(spec.main_replicas, spec.rollout.steps[0].share)
    rendered = deployment(sdep, track, revision(spec), replicas, always_served=always and track is Track.STABLE)
    return [service(sdep), service(sdep, track), rendered]


def route_rules(
    sdep: SpeculativeDeployment,
    rules: list[dict[str, Any]],
    canary_weight: int,
    holdback_weight: int = 0,
    route_namespace: str | None = None,
    canary_mirror: int = 0,
    canary_header: HeaderMatch | None = None,
    backend_kind: BackendKind = "Service",
) -> list[dict[str, Any]]:
    """An HTTPRoute's rules with the fleet's backend weights set: canary w, holdback h, stable the rest.

    Only backendRefs to this fleet's track Services (`backend_kind` InferencePool: its track InferencePools) are
    touched: by name, in the fleet's namespace (a ref without a namespace is in the route's, `route_namespace`,
    default the fleet's); a rule that sends to the stable backend gains a canary (holdback) ref of the same kind
    while that track takes traffic and loses it afterwards. In a shadow step (`canary_mirror` percent) such a rule
    also gets the Gateway API's `RequestMirror` filter copying that share of its requests to the canary backend,
    and loses it afterwards; the route's other filters stay.
    With `canary_header`, each such rule gets a twin (`<fleet>-canary-header-<n>`) that sends the requests
    carrying the header to the canary alone; the twins go when it is None.
    """
    names = {track: child_name(sdep, track) for track in SINGLE_TRACKS}
    weights = {Track.CANARY: canary_weight, Track.HOLDBACK: min(holdback_weight, 100 - canary_weight)}
    here = route_namespace or sdep.metadata.namespace

    group = INFERENCE_GROUP if backend_kind == "InferencePool" else ""

    def fleets(ref: dict[str, Any]) -> bool:
        of_kind = ref.get("group", "") == group and ref.get("kind", "Service") == backend_kind
        return of_kind and ref.get("name") in names.values() and ref.get("namespace", here) == sdep.metadata.namespace

    def mirrors_to_canary(rule_filter: dict[str, Any]) -> bool:
        ref = (rule_filter.get("requestMirror") or {}).get("backendRef") or {}
        return rule_filter.get("type") == "RequestMirror" and fleets(ref) and ref.get("name") == names[Track.CANARY]

    pinned = f"{sdep.metadata.name}-canary-header-"
    updated, twins = [], []
    for rule in rules:
        if str(rule.get("name", "")).startswith(pinned):
            continue
        refs = [dict(ref) for ref in rule.get("backendRefs") or []]
        stable_refs = [ref for ref in refs if fleets(ref) and ref.get("name") == names[Track.STABLE]]
        if not stable_refs:
            updated.append(rule)
            continue
        others = [ref for ref in refs if not fleets(ref)]
        mine = [{**stable_refs[0], "weight": 100 - sum(weights.values())}]
        mine += [{**stable_refs[0], "name": names[t], "weight": w} for t, w in weights.items() if w > 0]
        written = {key: value for key, value in rule.items() if key != "filters"} | {"backendRefs": others + mine}
        filters = [f for f in rule.get("filters") or [] if not mirrors_to_canary(f)]
        if canary_mirror > 0:
            target = {k: v for k, v in stable_refs[0].items() if k != "weight"} | {"name": names[Track.CANARY]}
            filters.append({"type": "RequestMirror", "requestMirror": {"backendRef": target, "percent": canary_mirror}})
        if filters:
            written["filters"] = filters
        updated.append(written)
        if canary_header is not None:
            twins.append(_header_twin(rule, stable_refs[0], names[Track.CANARY], canary_header, mirrors_to_canary))
    return updated + [{**twin, "name": f"{pinned}{n}"} for n, twin in enumerate(twins)]


def _header_twin(
    rule: dict[str, Any],
    stable_ref: dict[str, Any],
    canary: str,
    header: HeaderMatch,
    mirrors_to_canary: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """A copy of a rule sending to stable whose matches also need `header`, sending to the canary alone."""
    wanted = {"type": "Exact", "name": header.name, "value": header.value}
    matches = [{**match, "headers": [*(match.get("headers") or []), wanted]} for match in rule.get("matches") or [{}]]
    twin = {key: value for key, value in rule.items() if key not in ("name", "backendRefs", "filters", "matches")}
    twin["matches"] = matches
    twin["backendRefs"] = [{**{k: v for k, v in stable_ref.items() if k != "weight"}, "name": canary}]
    filters = [f for f in rule.get("filters") or [] if f.get("type") != "RequestMirror" or not mirrors_to_canary(f)]
    if filters:
        twin["filters"] = filters
    return twin
