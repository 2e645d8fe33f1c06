"""Which upstream programs the dev cluster runs, at which pinned version, and where each one is found.

A binary is taken, in this order, from the environment variable that names it (it must then have the
pinned version, or we stop with an error: the user asked for that file), from PATH when its version
matches (the machine's /usr/bin/kubectl v1.32 does not, so it is skipped), or from the cache that
`specfleet_workshop.devcluster.build` fills. Prometheus is the exception: it comes from Debian and is not pinned.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specfleet_workshop.devcluster.versions import (
    ARGO_ROLLOUTS_VERSION,
    DISTRIBUTION_VERSION,
    ETCD_VERSION,
    FLAGGER_VERSION,
    HELM_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
)


class BinaryError(RuntimeError):
    """A binary is missing or has the wrong version; the message says what to do."""


@dataclass(frozen=True)
class Component:
    """One upstream program: its binary name, pinned version and how to ask a binary for its version."""

    name: str
    version: str
    build_group: str
    version_args: tuple[str, ...]
    version_pattern: str

    @property
    def env_var(self) -> str:
        """The variable that points at a binary to use instead of the cached build (SPECFLEET_KUBE_APISERVER)."""
        return "SPECFLEET_" + self.name.upper().replace("-", "_")

    def cached_path(self, cache: Path) -> Path:
        """Where the build puts this component: keyed by version so a pin bump never reuses a stale file."""
        return cache / "bin" / f"{self.name}-{self.version}" / self.name


_KUBERNETES_VERSION_PATTERN = r"Kubernetes (v\S+)"

COMPONENTS: Mapping[str, Component] = {
    component.name: component
    for component in (
        Component("etcd", ETCD_VERSION, "etcd", ("--version",), r"etcd Version: (\S+)"),
        Component("kube-apiserver", KUBERNETES_VERSION, "kubernetes", ("--version",), _KUBERNETES_VERSION_PATTERN),
        Component(
            "kube-controller-manager",
            KUBERNETES_VERSION,
            "kubernetes",
            ("--version",),
            _KUBERNETES_VERSION_PATTERN,
        ),
        Component("kube-scheduler", KUBERNETES_VERSION, "kubernetes", ("--version",), _KUBERNETES_VERSION_PATTERN),
        Component("kubectl", KUBERNETES_VERSION, "kubernetes", ("version", "--client"), r"Client Version: (\S+)"),
        Component("kwok", KWOK_VERSION, "kwok", ("--version",), r"kwok version (\S+)"),
        Component("helm", HELM_VERSION, "helm", ("version", "--short"), r"(v\d+\.\d+\.\d+)"),
        Component("rollouts-controller", ARGO_ROLLOUTS_VERSION, "argo-rollouts", ("--version",), r"(v\d+\.\d+\.\d+)"),
        Component("flagger", FLAGGER_VERSION, "flagger", ("-version",), r"Flagger version (\S+)"),
        Component("registry", DISTRIBUTION_VERSION, "distribution", ("--version",), r"^registry \S+ (v\S+)"),
    )
}
"""Every pinned program, by binary name."""

PEERS = ("rollouts-controller", "flagger")
"""Controllers people would pick instead of specfleet: built only for the side-by-side benchmark."""
RELEASE_TOOLS = ("registry",)
"""What cutting a release on loopback needs beside helm: an OCI registry to push to (docs/release.md)."""
TOOLS = tuple(name for name in COMPONENTS if name not in (*PEERS, *RELEASE_TOOLS))
"""What the dev cluster and the tests against it need: the control plane, kubectl and helm."""

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
"""The programs `dev up` runs (kubectl and helm are tools for users and tests)."""


def parse_version(output: str, pattern: str) -> str | None:
    """Pull the version out of a `--version` output, normalised to a leading `v` (etcd prints none)."""
    match = re.search(pattern, output)
    if match is None:
        return None
    found = match.group(1)
    return found if found.startswith("v") else "v" + found


def probe_version(binary: Path, component: Component) -> str | None:
    """Run the binary's version command; None if it does not run or prints nothing recognisable."""
    try:
        result = subprocess.run(
            [str(binary), *component.version_args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(result.stdout + result.stderr, component.version_pattern)


def find_binary(component: Component, cache: Path, environ: Mapping[str, str] | None = None) -> Path | None:
    """Locate a usable binary for the component, or None when it has to be built first."""
    env = os.environ if environ is None else environ
    named = env.get(component.env_var)
    if named:
        path = Path(named).expanduser()
        found = probe_version(path, component)
        if found != component.version:
            raise BinaryError(
                f"{component.env_var}={path} is {found or 'not a runnable ' + component.name}, "
                f"but specfleet pins {component.name} {component.version}. "
                f"Unset {component.env_var} to use a build from the module proxy."
            )
        return path
    cached = component.cached_path(cache)
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which(component.name, path=env.get("PATH"))
    if on_path and probe_version(Path(on_path), component) == component.version:
        return Path(on_path)
    return None


def find_prometheus(environ: Mapping[str, str] | None = None) -> Path:
    """Prometheus comes from Debian (not built here); say how to install it when it is absent."""
    env = os.environ if environ is None else environ
    named = env.get("SPECFLEET_PROMETHEUS") or shutil.which("prometheus", path=env.get("PATH"))
    if named is None and Path("/usr/bin/prometheus").is_file():
        named = "/usr/bin/prometheus"
    if not named:
        raise BinaryError(
            "prometheus is not installed. Run `sudo .ci/install-system-deps` from the specfleet repository "
            "(it installs Debian's prometheus package), or point SPECFLEET_PROMETHEUS at a prometheus binary."
        )
    return Path(named)


def prometheus_version(binary: Path) -> str:
    """The version Prometheus reports, for `dev status` (it is not pinned, only shown)."""
    try:
        result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    found = parse_version(result.stdout + result.stderr, r"prometheus, version (\S+)")
    return found or "unknown"
