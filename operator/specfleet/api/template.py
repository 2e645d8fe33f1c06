"""`spec.template`: what a cluster needs of the vLLM pods that is not about serving the model.

Pod labels and annotations, a service account, image pull secrets, a priority class, node selection on
top of the accelerator's, volumes, sidecars, the pod's security context, and the vLLM container's CPU and
memory. specfleet owns the rest (the vLLM command line, the GPU resource, its own labels, volumes and
mount paths): the rules below refuse a template that would override any of it, naming the field.

Complex Kubernetes types (affinity, a volume, a container, a security context) are kept as the objects a
user writes, checked by the API server when the operator applies the Deployment (and by a server-side
dry-run in the integration tests), so the CRD stays small and follows every Kubernetes version.
"""

import re
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue, WithJsonSchema

from specfleet.api.base import ApiModel, Rule
from specfleet.hardware import PRODUCT_NAME_LABEL

OWNED_LABEL_PREFIX = "specfleet.io/"
OWNED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
)
"""Pod labels specfleet sets itself (with every `specfleet.io/` label): selectors and dashboards rely on them."""
OWNED_ANNOTATIONS = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path")
"""Pod annotations specfleet sets so that Prometheus scrapes vLLM's /metrics."""
OWNED_VOLUMES = ("dshm", "model-cache")
OWNED_MOUNT_PATHS = ("/dev/shm", "/cache/huggingface")
VLLM_CONTAINER = "vllm"
OWNED_SECURITY_CONTEXT_KEYS = ("supplementalGroups",)
"""Set from `accelerator.supplementalGroups` (the groups that may open /dev/kfd and /dev/dri); the CEL half of
the rule names the one key."""

QUANTITY_PATTERN = r"^[+]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$"
QUANTITY_MESSAGE = "must be a Kubernetes quantity such as 4, 500m or 64Gi"
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"


def _quantity(value: int | str) -> str:
    text = str(value)
    if isinstance(value, bool) or len(text) > 64 or not re.match(QUANTITY_PATTERN, text):
        raise ValueError(QUANTITY_MESSAGE)
    return text


Quantity = Annotated[
    int | str,
    AfterValidator(_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 64,
            "x-kubernetes-validations": [
                {"rule": "type(self) == int ? self >= 0 : isQuantity(self)", "message": QUANTITY_MESSAGE}
            ],
        }
    ),
]
"""A Kubernetes resource quantity (`4`, `500m`, `64Gi`)."""

LabelKey = Annotated[str, Field(min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]
ResourceName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^([a-z0-9.-]+/)?[a-z0-9_.-]+$")]
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
ShortName = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


def _named(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    name = value.get("name")
    if not isinstance(name, str) or not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name) or len(name) > 63:
        raise ValueError("needs a `name`: a DNS label of at most 63 characters")
    return value


NamedObject = Annotated[
    dict[str, JsonValue],
    AfterValidator(_named),
    WithJsonSchema(
        {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "description": "Its name, a DNS label unique in the list (how the pod spec refers to it).",
                    "maxLength": 63,
                    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                }
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    ),
]
"""A named Kubernetes object as in a PodSpec (a volume, a container), checked by the API server as one."""
KubeObject = Annotated[
    dict[str, JsonValue], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
PodSecurityContext = Annotated[
    dict[str, JsonValue],
    WithJsonSchema(
        {
            "type": "object",
            "properties": {
                "supplementalGroups": {
                    "type": "array",
                    "description": "Refused here: set from `accelerator.supplementalGroups`.",
                    "maxItems": 8,
                    "items": {"type": "integer"},
                }
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    ),
]
"""A PodSpec `securityContext`; `supplementalGroups` is declared so that a rule can refuse it."""


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


class PodMetadata(ApiModel):
    """Labels and annotations added to every vLLM pod of the fleet (all tracks)."""

    labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] = {}
    """Extra pod labels (cost allocation, log routing). Not part of the revision: changing only labels rolls
    the pods in place without a canary. `specfleet.io/*` and the `app.kubernetes.io/*` labels specfleet sets
    are refused."""
    annotations: Annotated[dict[LabelKey, Annotated[str, Field(max_length=65_536)]], Field(max_length=64)] = {}
    """Extra pod annotations (service-mesh injection, log routing). Part of the revision, so a change is
    canaried: annotations can change what runs in the pod (a sidecar injector acts on them). The
    `prometheus.io/*` annotations specfleet sets are refused."""

    rules = (
        Rule(
            cel=f"!has(self.labels) || self.labels.all(k, !k.startsWith('{OWNED_LABEL_PREFIX}') && "
            f"!(k in {_cel_list(OWNED_LABELS)}))",
            message=f"labels must not set {OWNED_LABEL_PREFIX}* or {', '.join(OWNED_LABELS)}: specfleet sets them "
            "and selects pods by them",
            field_path=".labels",
            holds=lambda m: not [k for k in m.labels if k.startswith(OWNED_LABEL_PREFIX) or k in OWNED_LABELS],
        ),
        Rule(
            cel=f"!has(self.annotations) || self.annotations.all(k, !(k in {_cel_list(OWNED_ANNOTATIONS)}))",
            message=f"annotations must not set {', '.join(OWNED_ANNOTATIONS)}: specfleet sets them so that "
            "Prometheus scrapes vLLM",
            field_path=".annotations",
            holds=lambda m: not set(m.annotations) & set(OWNED_ANNOTATIONS),
        ),
    )


class LocalObjectReference(ApiModel):
    """An object in the fleet's namespace, by name."""

    name: Name
    """The object's name."""


class PodSpecTemplate(ApiModel):
    """Pod-level settings merged into the vLLM pods specfleet renders (the names are a PodSpec's)."""

    service_account_name: Name | None = None
    """The pods' ServiceAccount (e.g. for workload identity to a model store), its token mounted as that
    ServiceAccount's `automountServiceAccountToken` says. Unset: the namespace's `default`, and no token in
    the pods."""
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=16)] = []
    """Secrets holding registry credentials for the vLLM image (and any sidecar's)."""
    priority_class_name: Name | None = None
    """The pods' PriorityClass, e.g. one that lets serving preempt batch jobs on the GPU nodes."""
    node_selector: Annotated[dict[LabelKey, LabelValue], Field(max_length=32)] = {}
    """Node labels the pods require, on top of the accelerator's product names (set those in
    `accelerator.productNames`, not here)."""
    affinity: KubeObject | None = None
    """A PodSpec `affinity`. Its required node terms are combined with the accelerator's (a node must match
    both); preferred terms, pod affinity and anti-affinity are used as given."""
    security_context: PodSecurityContext | None = None
    """A PodSpec `securityContext`, laid over specfleet's (non-root uid 1000, RuntimeDefault seccomp: the
    Pod Security Standard `restricted`). `seccompProfile: {type: Unconfined}` here is the opt-in for hosts
    whose ROCm needs it: it needs the operator's template policy `privileged` (the default, `baseline`,
    refuses it) and a namespace that allows it. `supplementalGroups` comes from
    `accelerator.supplementalGroups`."""
    volumes: Annotated[list[NamedObject], Field(max_length=32)] = []
    """Extra volumes (PodSpec `volumes`), for sidecars or for `vllm.volumeMounts`; `dshm` and `model-cache`
    are specfleet's. `hostPath` needs the operator's template policy `privileged`."""
    containers: Annotated[list[NamedObject], Field(max_length=8)] = []
    """Extra containers (sidecars) next to `vllm`, as PodSpec `containers`. What they may ask for (privileges,
    capabilities, host ports, seccomp...) is bounded by the operator's template policy (docs/install.md)."""
    init_containers: Annotated[list[NamedObject], Field(max_length=8)] = []
    """Containers that run to completion before vLLM starts, as PodSpec `initContainers`."""

    rules = (
        Rule(
            cel=f"!has(self.nodeSelector) || !('{PRODUCT_NAME_LABEL}' in self.nodeSelector)",
            message=f"nodeSelector must not set {PRODUCT_NAME_LABEL}: list the products in accelerator.productNames",
            field_path=".nodeSelector",
            holds=lambda s: PRODUCT_NAME_LABEL not in s.node_selector,
        ),
        Rule(
            cel=f"!has(self.volumes) || self.volumes.all(v, !(v.name in {_cel_list(OWNED_VOLUMES)}))",
            message=f"volumes must not be named {' or '.join(OWNED_VOLUMES)}: specfleet mounts those",
            field_path=".volumes",
            holds=lambda s: not {v["name"] for v in s.volumes} & set(OWNED_VOLUMES),
        ),
        Rule(
            cel="(!has(self.containers) || self.containers.all(c, c.name != 'vllm')) && "
            "(!has(self.initContainers) || self.initContainers.all(c, c.name != 'vllm'))",
            message="containers must not be named vllm: specfleet renders the vLLM container (set its CPU, "
            "memory and mounts in template.vllm)",
            field_path=".containers",
            holds=lambda s: VLLM_CONTAINER not in {c["name"] for c in [*s.containers, *s.init_containers]},
        ),
        Rule(
            cel="!has(self.securityContext) || !has(self.securityContext.supplementalGroups)",
            message="securityContext.supplementalGroups is set from accelerator.supplementalGroups (the groups "
            "that may open the GPU devices): set it there",
            field_path=".securityContext",
            holds=lambda s: not set(s.security_context or {}) & set(OWNED_SECURITY_CONTEXT_KEYS),
        ),
    )


class ResourceRequirements(ApiModel):
    """CPU, memory and other non-GPU resources of the vLLM container."""

    requests: Annotated[dict[ResourceName, Quantity], Field(max_length=16)] = {}
    """What the scheduler reserves, e.g. `{cpu: 16, memory: 128Gi}`."""
    limits: Annotated[dict[ResourceName, Quantity], Field(max_length=16)] = {}
    """Upper bounds, e.g. `{memory: 160Gi}` (a memory limit below the model's host memory needs gets the pod
    OOM-killed while loading)."""


class VolumeMount(ApiModel):
    """Where a volume of `template.spec.volumes` appears in the vLLM container."""

    name: ShortName
    """The volume's name."""
    mount_path: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^/")]
    """Absolute path in the container; `/dev/shm` and `/cache/huggingface` are specfleet's."""
    read_only: bool | None = None
    """Mount read-only."""
    sub_path: Annotated[str, Field(max_length=1024)] | None = None
    """A path inside the volume to mount instead of its root."""


class VllmContainer(ApiModel):
    """Additions to the vLLM container. Its image, command line, ports, probes and GPU resource are
    specfleet's (set them through `engine`, `model`, `speculative` and `accelerator`)."""

    resources: ResourceRequirements = ResourceRequirements()
    """CPU and memory requests and limits. The GPU resource (`accelerator.resourceName`) is set from
    `accelerator.count` and is refused here."""
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=32)] = []
    """Extra mounts of `template.spec.volumes` into the vLLM container."""

    rules = (
        Rule(
            cel=f"!has(self.volumeMounts) || self.volumeMounts.all(m, !(m.mountPath in {_cel_list(OWNED_MOUNT_PATHS)})"
            f" && !(m.name in {_cel_list(OWNED_VOLUMES)}))",
            message=f"volumeMounts must not use {' or '.join(OWNED_MOUNT_PATHS)} or the volumes "
            f"{' and '.join(OWNED_VOLUMES)}: specfleet mounts them",
            field_path=".volumeMounts",
            holds=lambda c: (
                not [m for m in c.volume_mounts if m.mount_path in OWNED_MOUNT_PATHS or m.name in OWNED_VOLUMES]
            ),
        ),
    )


class PodTemplate(ApiModel):
    """How the vLLM pods fit the cluster: labels, annotations, pod settings and the vLLM container's
    resources. Everything except `metadata.labels` is part of the revision (a change is canaried)."""

    metadata: PodMetadata = PodMetadata()
    """Extra labels and annotations of the pods."""
    spec: PodSpecTemplate = PodSpecTemplate()
    """Extra pod settings: service account, pull secrets, priority, node selection, volumes, sidecars."""
    vllm: VllmContainer = VllmContainer()
    """Additions to the vLLM container: CPU and memory, extra volume mounts."""

    rules = (
        Rule(
            cel="!has(self.vllm.volumeMounts) || self.vllm.volumeMounts.all(m, has(self.spec.volumes) && "
            "self.spec.volumes.exists(v, v.name == m.name))",
            message="vllm.volumeMounts[].name must name a volume of template.spec.volumes",
            field_path=".vllm.volumeMounts",
            holds=lambda t: {m.name for m in t.vllm.volume_mounts} <= {v["name"] for v in t.spec.volumes},
        ),
    )

    def is_empty(self) -> bool:
        return self == PodTemplate()
