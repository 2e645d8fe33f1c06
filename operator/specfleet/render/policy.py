"""What `spec.template` may carry into the pods the operator creates: the operator's template policy.

A fleet's author may not be allowed to run privileged pods in their namespace, but the operator that renders
their template into Deployments acts with its own rights; without a check, `spec.template` would be a way to
get pods the author could not create. The policy is one of the Pod Security Standards' levels, picked by the
cluster's admin (`specfleet run --template-policy`, the chart's `templatePolicy`):

- `privileged`: no check (the template is trusted as much as the pods it makes);
- `baseline` (the default): no privileged container, added capability beyond baseline's, host port,
  hostPath volume, unsafe sysctl, seccomp or AppArmor `Unconfined`, non-default /proc mount, custom SELinux
  user, role or type, or Windows host process;
- `restricted`: baseline, and the restricted level's volume types, no privilege escalation, no root user,
  and every sidecar dropping all capabilities (adding none but NET_BIND_SERVICE).

Host namespaces (`hostNetwork`, `hostPID`, `hostIPC`) and the other pod fields a template does not model
are refused by the CRD's schema at every level. specfleet's own parts of the pods meet `restricted` already;
only what the template adds is judged.

Each check is written once here, as a Python predicate and as the CEL expression the chart's
ValidatingAdmissionPolicy evaluates against the same object at admission (`admission_validations`), each
naming the field it refuses. The operator applies the Python half on every pass, so a cluster without the
admission policy still never gets an escalating pod from a fleet.
"""

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specfleet.api.problems import Problem


class TemplatePolicy(StrEnum):
    """The Pod Security Standard level that what a template adds to the pods must meet."""

    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"

    def includes(self, level: "TemplatePolicy") -> bool:
        """Whether a check of `level` applies under this policy (restricted includes baseline)."""
        order = list(TemplatePolicy)
        return level is not TemplatePolicy.PRIVILEGED and order.index(self) >= order.index(level)


DEFAULT_POLICY = TemplatePolicy.BASELINE

BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
"""The container runtime's default capabilities: what baseline lets a container add."""
RESTRICTED_CAPABILITIES = ("NET_BIND_SERVICE",)
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
"""Namespaced sysctls the kubelet allows by default: they cannot reach other pods or the node."""
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
"""The AppArmor profile of one container, set by annotation (the field's predecessor, still honoured)."""

TEMPLATE = "spec.template"
CONTAINER_LISTS = ("containers", "initContainers")
"""The template's lists of containers (sidecars); the vLLM container is specfleet's, and meets restricted."""


def _at(value: Any, *keys: str) -> Any:
    """`value[k1][k2]...`, or None where a key is missing or a level is not a mapping (odd data is no crash)."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


@dataclass(frozen=True)
class Check:
    """One thing a template must not add, at one level, in Python and in CEL.

    `scope` says what the check looks at: `pod` the template's `spec.securityContext`, `container` each sidecar's
    (and init container's) object, `volume` each volume, `annotation` each pod annotation. `holds` (given that
    part; a (key, value) pair for an annotation) and `cel` (over `s`, `c`, `v`, or the key `k` of the annotations
    `a`) are true when that part is allowed; `field` is the path inside it that the message names.
    """

    level: TemplatePolicy
    scope: str
    field: str
    message: str
    holds: Callable[[Any], bool]
    cel: str

    def refused(self, template: Mapping[str, Any]) -> list[str]:
        """The fields of `template` (a `spec.template`) this check refuses."""
        return [_field(path, self) for path, part in _parts(template, self) if not self.holds(part)]


def _pod(field: str, message: str, holds: Callable[[Any], bool], cel: str, level: TemplatePolicy) -> Check:
    return Check(level, "pod", field, message, holds, cel)


def _container(field: str, message: str, holds: Callable[[Any], bool], cel: str, level: TemplatePolicy) -> Check:
    return Check(level, "container", field, message, holds, cel)


def _not_unconfined(profile: Any) -> bool:
    return bool(_at(profile, "type") != "Unconfined")


def _selinux_holds(options: Any) -> bool:
    return (
        _at(options, "type") in (None, *SELINUX_TYPES)
        and _at(options, "user") in (None, "")
        and _at(options, "role") in (None, "")
    )


def _selinux_cel(owner: str) -> str:
    options = f"{owner}.?seLinuxOptions"
    return (
        f"{options}.?type.orValue('') in {_cel_list(SELINUX_TYPES)} && "
        f"{options}.?user.orValue('') == '' && {options}.?role.orValue('') == ''"
    )


def _added(security: Any) -> list[Any]:
    return _items(_at(security, "capabilities", "add"))


BASELINE, RESTRICTED = TemplatePolicy.BASELINE, TemplatePolicy.RESTRICTED
SELINUX_MESSAGE = f"must set no user or role, and no type but {', '.join(SELINUX_TYPES[1:])}"

CHECKS: tuple[Check, ...] = (
    _pod(
        "securityContext.seccompProfile.type",
        "must not be Unconfined",
        lambda s: _not_unconfined(_at(s, "seccompProfile")),
        "s.?seccompProfile.?type.orValue('') != 'Unconfined'",
        BASELINE,
    ),
    _pod(
        "securityContext.appArmorProfile.type",
        "must not be Unconfined",
        lambda s: _not_unconfined(_at(s, "appArmorProfile")),
        "s.?appArmorProfile.?type.orValue('') != 'Unconfined'",
        BASELINE,
    ),
    _pod(
        "securityContext.seLinuxOptions",
        SELINUX_MESSAGE,
        lambda s: _selinux_holds(_at(s, "seLinuxOptions")),
        _selinux_cel("s"),
        BASELINE,
    ),
    _pod(
        "securityContext.sysctls",
        f"may set only {', '.join(SAFE_SYSCTLS)}",
        lambda s: all(_at(x, "name") in SAFE_SYSCTLS for x in _items(_at(s, "sysctls"))),
        f"s.?sysctls.orValue([]).all(x, x.?name.orValue('') in {_cel_list(SAFE_SYSCTLS)})",
        BASELINE,
    ),
    _pod(
        "securityContext.windowsOptions.hostProcess",
        "must not be true (a Windows host process)",
        lambda s: _at(s, "windowsOptions", "hostProcess") is not True,
        "s.?windowsOptions.?hostProcess.orValue(false) != true",
        BASELINE,
    ),
    _pod(
        "securityContext.runAsNonRoot",
        "must not be false",
        lambda s: _at(s, "runAsNonRoot") is not False,
        "s.?runAsNonRoot.orValue(true) != false",
        RESTRICTED,
    ),
    _pod(
        "securityContext.runAsUser",
        "must not be 0 (root)",
        lambda s: _at(s, "runAsUser") != 0,
        "s.?runAsUser.orValue(1) != 0",
        RESTRICTED,
    ),
    _container(
        "securityContext.privileged",
        "must not be true (a privileged container)",
        lambda c: _at(c, "securityContext", "privileged") is not True,
        "c.?securityContext.?privileged.orValue(false) != true",
        BASELINE,
    ),
    _container(
        "securityContext.capabilities.add",
        f"may add only {', '.join(BASELINE_CAPABILITIES)}",
        lambda c: all(x in BASELINE_CAPABILITIES for x in _added(_at(c, "securityContext"))),
        f"c.?securityContext.?capabilities.?add.orValue([]).all(x, x in {_cel_list(BASELINE_CAPABILITIES)})",
        BASELINE,
    ),
    _container(
        "ports[*].hostPort",
        "must not be set (a port of the node)",
        lambda c: all(_at(p, "hostPort") in (None, 0) for p in _items(_at(c, "ports"))),
        "c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0)",
        BASELINE,
    ),
    _container(
        "securityContext.procMount",
        "must be Default",
        lambda c: _at(c, "securityContext", "procMount") in (None, "Default"),
        "c.?securityContext.?procMount.orValue('Default') == 'Default'",
        BASELINE,
    ),
    _container(
        "securityContext.seccompProfile.type",
        "must not be Unconfined",
        lambda c: _not_unconfined(_at(c, "securityContext", "seccompProfile")),
        "c.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined'",
        BASELINE,
    ),
    _container(
        "securityContext.appArmorProfile.type",
        "must not be Unconfined",
        lambda c: _not_unconfined(_at(c, "securityContext", "appArmorProfile")),
        "c.?securityContext.?appArmorProfile.?type.orValue('') != 'Unconfined'",
        BASELINE,
    ),
    _container(
        "securityContext.seLinuxOptions",
        SELINUX_MESSAGE,
        lambda c: _selinux_holds(_at(c, "securityContext", "seLinuxOptions")),
        _selinux_cel("c.?securityContext"),
        BASELINE,
    ),
    _container(
        "securityContext.windowsOptions.hostProcess",
        "must not be true (a Windows host process)",
        lambda c: _at(c, "securityContext", "windowsOptions", "hostProcess") is not True,
        "c.?securityContext.?windowsOptions.?hostProcess.orValue(false) != true",
        BASELINE,
    ),
    _container(
        "securityContext.allowPrivilegeEscalation",
        "must be false",
        lambda c: _at(c, "securityContext", "allowPrivilegeEscalation") is False,
        "c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false",
        RESTRICTED,
    ),
    _container(
        "securityContext.capabilities.drop",
        "must include ALL",
        lambda c: "ALL" in _items(_at(c, "securityContext", "capabilities", "drop")),
        "'ALL' in c.?securityContext.?capabilities.?drop.orValue([])",
        RESTRICTED,
    ),
    _container(
        "securityContext.capabilities.add",
        f"may add only {', '.join(RESTRICTED_CAPABILITIES)}",
        lambda c: all(x in RESTRICTED_CAPABILITIES for x in _added(_at(c, "securityContext"))),
        f"c.?securityContext.?capabilities.?add.orValue([]).all(x, x in {_cel_list(RESTRICTED_CAPABILITIES)})",
        RESTRICTED,
    ),
    _container(
        "securityContext.runAsNonRoot",
        "must not be false",
        lambda c: _at(c, "securityContext", "runAsNonRoot") is not False,
        "c.?securityContext.?runAsNonRoot.orValue(true) != false",
        RESTRICTED,
    ),
    _container(
        "securityContext.runAsUser",
        "must not be 0 (root)",
        lambda c: _at(c, "securityContext", "runAsUser") != 0,
        "c.?securityContext.?runAsUser.orValue(1) != 0",
        RESTRICTED,
    ),
    Check(
        BASELINE,
        "volume",
        "hostPath",
        "must not be set (the node's files)",
        lambda v: _at(v, "hostPath") is None,
        "!has(v.hostPath)",
    ),
    Check(
        RESTRICTED,
        "volume",
        "",
        f"must be a volume of type {', '.join(RESTRICTED_VOLUME_TYPES)}",
        lambda v: isinstance(v, Mapping) and all(k == "name" or k in RESTRICTED_VOLUME_TYPES for k in v),
        f"v.all(k, k == 'name' || k in {_cel_list(RESTRICTED_VOLUME_TYPES)})",
    ),
    Check(
        BASELINE,
        "annotation",
        "",
        "must be runtime/default or localhost/*",
        lambda a: (
            not a[0].startswith(APPARMOR_ANNOTATION)
            or a[1] in ("", "runtime/default")
            or str(a[1]).startswith("localhost/")
        ),
        f"!k.startsWith('{APPARMOR_ANNOTATION}') || a[k] in ['', 'runtime/default'] || a[k].startsWith('localhost/')",
    ),
)
"""Every check, in the order the admission policy evaluates them (the first one refused is the message)."""


def _refusal(check: Check, policy: TemplatePolicy) -> str:
    return f"{check.message}, under the operator's template policy {policy.value} (Pod Security {check.level.value})"


def _parts(template: Mapping[str, Any], check: Check) -> Iterator[tuple[str, Any]]:
    """(path, part) for every part of `template` that `check` looks at."""
    spec = _at(template, "spec")
    if check.scope == "pod":
        yield f"{TEMPLATE}.spec", _at(spec, "securityContext") or {}
    elif check.scope == "container":
        for name in CONTAINER_LISTS:
            for index, container in enumerate(_items(_at(spec, name))):
                yield f"{TEMPLATE}.spec.{name}[{index}]", container
    elif check.scope == "volume":
        for index, volume in enumerate(_items(_at(spec, "volumes"))):
            yield f"{TEMPLATE}.spec.volumes[{index}]", volume
    else:
        annotations = _at(template, "metadata", "annotations")
        for key, value in annotations.items() if isinstance(annotations, Mapping) else ():
            yield f"{TEMPLATE}.metadata.annotations[{key}]", (key, value)


def _field(path: str, check: Check) -> str:
    return f"{path}.{check.field}" if check.field else path


def template_problems(template: Mapping[str, Any] | None, policy: TemplatePolicy = DEFAULT_POLICY) -> list[Problem]:
    """What `template` (a `spec.template` as the user wrote it, or as the model dumps it by alias) adds that
    `policy` refuses, each naming its field. Pure; odd shapes are judged as absent, never raised on."""
    if not template:
        return []
    return [
        Problem(field, _refusal(check, policy))
        for check in CHECKS
        if policy.includes(check.level)
        for field in check.refused(template)
    ]


POD_SECURITY_CEL = "object.spec.?template.?spec.?securityContext."


def _cel(check: Check, within: str) -> str:
    """The check over the admitted object (`object`), for one part of the template."""
    if check.scope == "pod":  # `s.?x` reads the template's securityContext, absent or not
        return re.sub(r"\bs\.\?", POD_SECURITY_CEL + "?", check.cel)
    if check.scope == "annotation":
        annotations = "object.spec.template.metadata.annotations"
        present = f"has(object.spec.template) && has(object.spec.template.metadata) && has({annotations})"
        return f"!({present}) || {annotations}.all(k, {check.cel.replace('a[k]', annotations + '[k]')})"
    variable = "c" if check.scope == "container" else "v"
    return f"object.spec.?template.?spec.?{within}.orValue([]).all({variable}, {check.cel})"


def admission_validations(policy: TemplatePolicy) -> list[dict[str, str]]:
    """The ValidatingAdmissionPolicy `validations` that refuse at admission what `template_problems` finds, each
    message naming the field (`[*]`: any item of the list)."""
    validations = []
    for check in CHECKS:
        if not policy.includes(check.level):
            continue
        if check.scope == "container":
            wheres = [(name, f"{TEMPLATE}.spec.{name}[*]") for name in CONTAINER_LISTS]
        elif check.scope == "volume":
            wheres = [("volumes", f"{TEMPLATE}.spec.volumes[*]")]
        elif check.scope == "pod":
            wheres = [("", f"{TEMPLATE}.spec")]
        else:
            wheres = [("", f"{TEMPLATE}.metadata.annotations[{APPARMOR_ANNOTATION}*]")]
        for within, path in wheres:
            validations.append(
                {
                    "expression": _cel(check, within),
                    "message": f"{_field(path, check)}: {_refusal(check, policy)}",
                    "reason": "Forbidden",
                }
            )
    return validations
