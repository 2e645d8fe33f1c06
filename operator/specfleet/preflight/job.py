"""The preflight Job of a canary revision: the serving image runs `python -m specfleet.preflight` once. Pure.

No GPU: it reads tokenizer and config files and does arithmetic. It lands where the serving pods may (same
affinity and tolerations), where the serving image is most likely pulled already, and sees the model cache
and hub token as they do. Its pods carry no `specfleet.io/name` label, so the fleet's Service never selects
them; `specfleet.io/preflight: <fleet>` marks them (and the Job) instead.
"""

from typing import Any

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import FIELD_MANAGER, LABEL_NAME, LABEL_PREFLIGHT, LABEL_REVISION
from specfleet.preflight.budget import gpu_budget
from specfleet.render.manifests import (
    HF_HOME,
    SERVING_UID,
    Manifest,
    child_metadata,
    image,
    model_cache_volume,
    node_affinity,
    serving_env,
)
from specfleet.render.podtemplate import scheduling

NAME_INFIX = "-preflight-"
MAX_NAME = 63
"""The Job controller copies the Job's name into a label of its pods: at most 63 characters."""
DEADLINE_SECONDS = 900
"""Image pull included: the serving image is large on a node that has not pulled it yet."""
TERMINATION_LOG = "/dev/termination-log"
RESOURCES = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
"""A tokenizer of 150k tokens loads in well under 1 GiB; the limit only bounds a runaway."""


def job_name(sdep: SpeculativeDeployment, rev: str) -> str:
    """`<fleet>-preflight-<revision>`, the fleet part cut to fit 63 characters."""
    room = MAX_NAME - len(NAME_INFIX) - len(rev)
    return f"{sdep.metadata.name[:room].rstrip('-.')}{NAME_INFIX}{rev}"


def preflight_labels(sdep: SpeculativeDeployment, rev: str) -> dict[str, str]:
    """The pods' labels: no `specfleet.io/name`, which the fleet's Service selects on."""
    return {
        "app.kubernetes.io/name": "specfleet-preflight",
        "app.kubernetes.io/instance": sdep.metadata.name,
        "app.kubernetes.io/component": "preflight",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
        "app.kubernetes.io/part-of": "specfleet",
        LABEL_PREFLIGHT: sdep.metadata.name,
        LABEL_REVISION: rev,
    }


def preflight_args(sdep: SpeculativeDeployment) -> list[str]:
    """The check's arguments: both models, and the memory budget as validation computes it from the spec."""
    spec = sdep.spec
    if spec.speculative.model is None:
        raise ValueError(f"{sdep.metadata.name}: method {spec.speculative.method} has no drafter model to check")
    args = ["--target", spec.model.name]
    if spec.model.revision:
        args += ["--target-revision", spec.model.revision]
    args += ["--drafter", spec.speculative.model]
    if spec.speculative.revision:
        args += ["--drafter-revision", spec.speculative.revision]
    memory = gpu_budget(spec)
    if memory is not None:
        args += ["--gpu", memory.gpu, "--gpu-budget-gib", f"{memory.budget_gib:.2f}"]
        args += ["--tensor-parallel-size", str(memory.tensor_parallel_size)]
        args += ["--draft-tensor-parallel-size", str(memory.draft_tensor_parallel_size)]
    for flag, size in (("--target-size-gib", spec.model.size_gib), ("--drafter-size-gib", spec.speculative.size_gib)):
        if size is not None:
            args += [flag, f"{size:g}"]
    return [*args, "--termination-log", TERMINATION_LOG]


def preflight_job(sdep: SpeculativeDeployment, rev: str, serving: dict[str, Any]) -> Manifest:
    """The Job checking the drafter of `serving` (the canary's serving part of the spec) for revision `rev`."""
    sdep = sdep.model_copy(update={"spec": sdep.spec.with_serving(serving)})
    spec = sdep.spec
    container = {
        "name": "preflight",
        "image": image(spec),
        "command": ["python3", "-m", "specfleet.preflight"],
        "args": preflight_args(sdep),
        "env": serving_env(spec),
        "resources": RESOURCES,
        "volumeMounts": [{"name": "model-cache", "mountPath": HF_HOME}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: Manifest = {
        "containers": [container],
        "volumes": [model_cache_volume(spec)],
        "restartPolicy": "Never",
        "tolerations": [t.model_dump(mode="json", exclude_none=True) for t in spec.accelerator.tolerations],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVING_UID,
            "runAsGroup": SERVING_UID,
            "fsGroup": SERVING_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    pod_spec.update(scheduling(spec.template, node_affinity(spec)))
    labels = preflight_labels(sdep, rev)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": child_metadata(sdep, job_name(sdep, rev), {**labels, LABEL_NAME: sdep.metadata.name}),
        "spec": {
            "backoffLimit": 0,
            # a pod lost with its node, or evicted, says nothing of the drafter: the Job makes another one
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
