"""`spec.template` laid into the pods specfleet renders. Pure: dicts in, dicts out.

specfleet's own parts win wherever both set something (the API model refuses a template that tries), and
node selection is combined rather than replaced: a pod must sit on the accelerator's nodes *and* on the
nodes the template asks for.
"""

import copy
from typing import Any

from specfleet.api.template import PodTemplate

Manifest = dict[str, Any]
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def fitted_pod(pod: Manifest, template: PodTemplate | None) -> Manifest:
    """`pod` (a pod template: metadata and spec, the vLLM container first) with the user's template laid in."""
    if template is None:
        return pod
    pod = copy.deepcopy(pod)
    meta, spec, extra = pod["metadata"], pod["spec"], template.spec
    meta["labels"] = {**template.metadata.labels, **meta["labels"]}
    meta["annotations"] = {**template.metadata.annotations, **meta.get("annotations", {})}
    spec.update(scheduling(template, spec.get("affinity")))
    if extra.service_account_name:  # named for its token (workload identity): the ServiceAccount's own
        spec["serviceAccountName"] = extra.service_account_name  # automount setting decides, never widened here
        spec.pop("automountServiceAccountToken", None)
    if extra.security_context:
        spec["securityContext"] = {**spec.get("securityContext", {}), **extra.security_context}
    spec["volumes"] = [*spec.get("volumes", []), *extra.volumes]
    vllm, *others = spec["containers"]
    spec["containers"] = [_fitted_vllm(vllm, template), *others, *extra.containers]
    if extra.init_containers:
        spec["initContainers"] = [*spec.get("initContainers", []), *extra.init_containers]
    return pod


def scheduling(template: PodTemplate | None, affinity: Manifest | None) -> Manifest:
    """The pod-spec fields that decide where a pod may run and what it may pull, for any pod of the fleet
    (the preflight Job's too): pull secrets, priority, node selector, and `affinity` (specfleet's) combined
    with the template's."""
    if template is None:
        return {"affinity": affinity} if affinity else {}
    extra = template.spec
    fields: Manifest = {}
    if extra.image_pull_secrets:
        fields["imagePullSecrets"] = [ref.model_dump(mode="json") for ref in extra.image_pull_secrets]
    if extra.priority_class_name:
        fields["priorityClassName"] = extra.priority_class_name
    if extra.node_selector:
        fields["nodeSelector"] = dict(extra.node_selector)
    combined = combined_affinity(affinity, extra.affinity)
    if combined:
        fields["affinity"] = combined
    return fields


def combined_affinity(ours: Manifest | None, theirs: dict[str, Any] | None) -> Manifest | None:
    """Both affinities at once: each of the template's required node terms also gets specfleet's expressions
    (terms are ORed, a term's expressions ANDed); everything else of the template is kept as written."""
    if not theirs:
        return ours
    merged = copy.deepcopy(theirs)
    if not ours:
        return merged
    our_terms = ours["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    our_expressions = [e for term in our_terms for e in term.get("matchExpressions", [])]
    required = merged.setdefault("nodeAffinity", {}).setdefault(REQUIRED, {})
    terms = required.get("nodeSelectorTerms") or [{}]  # none: the accelerator's terms alone
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*term.get("matchExpressions", []), *our_expressions]} for term in terms
    ]
    return merged


def _fitted_vllm(container: Manifest, template: PodTemplate) -> Manifest:
    """The vLLM container with the template's CPU, memory and mounts; its GPU resource stays specfleet's."""
    resources = template.vllm.resources
    mine = container["resources"]
    container["resources"] = {
        "limits": {**{k: str(v) for k, v in resources.limits.items()}, **mine["limits"]},
        "requests": {**{k: str(v) for k, v in resources.requests.items()}, **mine["requests"]},
    }
    mounts = [m.model_dump(mode="json", exclude_none=True) for m in template.vllm.volume_mounts]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    return container
