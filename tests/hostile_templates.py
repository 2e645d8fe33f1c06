"""Templates a fleet's author could use to get pods they may not create, and the field each refusal must name.

Shared by the unit tests (the operator's check, `specfleet validate`) and the integration tests (the chart's
ValidatingAdmissionPolicy on a real API server, a tenant bound only to `edit`), so both halves of every
check in `specfleet.render.policy` are held to the same table.
"""

from dataclasses import dataclass
from typing import Any

from specfleet.render.policy import TemplatePolicy

SIDECAR = {"name": "helper", "image": "busybox:1.36", "command": ["sleep", "infinity"]}
RESTRICTED_SIDECAR: dict[str, Any] = {
    **SIDECAR,
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}
"""A sidecar that meets restricted: it says it never escalates and drops every capability."""
PRIVILEGED = {**SIDECAR, "securityContext": {"privileged": True}}
"""Privileged as a pod admits it (privileged with allowPrivilegeEscalation false is refused as a contradiction)."""


def _sidecar(security: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A template with one sidecar that meets restricted but for `security` (its securityContext) and `fields`."""
    merged = {**RESTRICTED_SIDECAR["securityContext"], **(security or {})}
    return {"spec": {"containers": [{**RESTRICTED_SIDECAR, **fields, "securityContext": merged}]}}


def _pod_security(**fields: Any) -> dict[str, Any]:
    return {"spec": {"securityContext": fields}}


@dataclass(frozen=True)
class Hostile:
    """A `spec.template` and what refusing it must name; `level` is the lowest policy that refuses it."""

    name: str
    template: dict[str, Any]
    field: str
    level: TemplatePolicy = TemplatePolicy.BASELINE


ESCALATIONS = [
    Hostile(
        "privileged sidecar",
        {"spec": {"containers": [PRIVILEGED]}},
        "spec.template.spec.containers[0].securityContext.privileged",
    ),
    Hostile(
        "privileged init container",
        {"spec": {"initContainers": [PRIVILEGED]}},
        "spec.template.spec.initContainers[0].securityContext.privileged",
    ),
    Hostile(
        "SYS_ADMIN added",
        _sidecar(security={"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}),
        "spec.template.spec.containers[0].securityContext.capabilities.add",
    ),
    Hostile(
        "host port",
        _sidecar(ports=[{"containerPort": 9000}, {"containerPort": 22, "hostPort": 2222}]),
        "spec.template.spec.containers[0].ports[*].hostPort",
    ),
    Hostile(
        "hostPath volume",
        {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
        "spec.template.spec.volumes[0].hostPath",
    ),
    Hostile(
        "unsafe sysctl",
        _pod_security(
            sysctls=[{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}]
        ),
        "spec.template.spec.securityContext.sysctls",
    ),
    Hostile(
        "pod seccomp Unconfined (the ROCm opt-in)",
        _pod_security(seccompProfile={"type": "Unconfined"}),
        "spec.template.spec.securityContext.seccompProfile.type",
    ),
    Hostile(
        "container seccomp Unconfined",
        _sidecar(security={"seccompProfile": {"type": "Unconfined"}}),
        "spec.template.spec.containers[0].securityContext.seccompProfile.type",
    ),
    Hostile(
        "unmasked /proc",
        _sidecar(security={"procMount": "Unmasked"}),
        "spec.template.spec.containers[0].securityContext.procMount",
    ),
    Hostile(
        "pod AppArmor Unconfined",
        _pod_security(appArmorProfile={"type": "Unconfined"}),
        "spec.template.spec.securityContext.appArmorProfile.type",
    ),
    Hostile(
        "container AppArmor Unconfined",
        _sidecar(security={"appArmorProfile": {"type": "Unconfined"}}),
        "spec.template.spec.containers[0].securityContext.appArmorProfile.type",
    ),
    Hostile(
        "AppArmor unconfined by annotation",
        {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/helper": "unconfined"}}},
        "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/",
    ),
    Hostile(
        "pod SELinux type spc_t",
        _pod_security(seLinuxOptions={"type": "spc_t"}),
        "spec.template.spec.securityContext.seLinuxOptions",
    ),
    Hostile(
        "container SELinux user",
        _sidecar(security={"seLinuxOptions": {"user": "system_u"}}),
        "spec.template.spec.containers[0].securityContext.seLinuxOptions",
    ),
    Hostile(
        "pod Windows host process",
        _pod_security(windowsOptions={"hostProcess": True}),
        "spec.template.spec.securityContext.windowsOptions.hostProcess",
    ),
    Hostile(
        "container Windows host process",
        _sidecar(security={"windowsOptions": {"hostProcess": True}}),
        "spec.template.spec.containers[0].securityContext.windowsOptions.hostProcess",
    ),
    Hostile(
        "sidecar that may escalate",
        {"spec": {"containers": [{**SIDECAR, "securityContext": {"capabilities": {"drop": ["ALL"]}}}]}},
        "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "sidecar keeping its capabilities",
        {"spec": {"containers": [{**SIDECAR, "securityContext": {"allowPrivilegeEscalation": False}}]}},
        "spec.template.spec.containers[0].securityContext.capabilities.drop",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "sidecar adding CHOWN",
        _sidecar(security={"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}),
        "spec.template.spec.containers[0].securityContext.capabilities.add",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "root pod",
        _pod_security(runAsUser=0),
        "spec.template.spec.securityContext.runAsUser",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "pod may run as root",
        _pod_security(runAsNonRoot=False),
        "spec.template.spec.securityContext.runAsNonRoot",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "root sidecar",
        _sidecar(security={"runAsUser": 0}),
        "spec.template.spec.containers[0].securityContext.runAsUser",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "sidecar that may run as root",
        _sidecar(security={"runAsNonRoot": False}),
        "spec.template.spec.containers[0].securityContext.runAsNonRoot",
        TemplatePolicy.RESTRICTED,
    ),
    Hostile(
        "NFS volume",
        {"spec": {"volumes": [{"name": "share", "nfs": {"server": "10.0.0.1", "path": "/models"}}]}},
        "spec.template.spec.volumes[0]",
        TemplatePolicy.RESTRICTED,
    ),
]
"""One template per check of `specfleet.render.policy.CHECKS` (a unit test holds the table to that)."""

HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
"""PodSpec fields a template has no place for: the CRD's schema refuses them at every level."""
