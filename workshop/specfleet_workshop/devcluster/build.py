"""Build the pinned upstream binaries from the Go module proxy into the version-keyed cache.

k8s.io/kubernetes points its ~30 staging modules at `./staging/...` directories, so `go install
k8s.io/kubernetes/cmd/kube-apiserver@v1.x` refuses to build. Every group is therefore built inside a
throwaway module under `<cache>/build/<group>-<version>/` whose go.mod requires the upstream module
and, for Kubernetes, replaces each staging module by its published `v0.Y.Z` twin. The four Kubernetes
binaries are built in one `go build` so they share compilation work. Builds run with CGO_ENABLED=0,
GOTOOLCHAIN=local and the persistent GOCACHE, and are serialised by a file lock so that two callers
(CI and a test session, say) never build the same group at once.
"""

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specfleet_workshop.cachedir import exclusively
from specfleet_workshop.devcluster.binaries import COMPONENTS, Component, find_binary
from specfleet_workshop.devcluster.versions import (
    ARGO_ROLLOUTS_VERSION,
    DISTRIBUTION_VERSION,
    ETCD_VERSION,
    FLAGGER_VERSION,
    HELM_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    MINIMUM_GO,
)

KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
"""kwok v0.8 ships no built-in stages: these are the ones kwokctl itself loads (node up + lease heartbeat,
pod ready/complete/delete). They are copied next to the kwok binary so the cluster never needs the module cache."""
ARGO_CRD_FILES = tuple(
    f"manifests/crds/{kind}-crd.yaml"
    for kind in ("rollout", "analysis-run", "analysis-template", "cluster-analysis-template", "experiment")
)
FLAGGER_CRD_FILES = ("artifacts/flagger/crd.yaml",)
"""The peers' CRDs (Canary, MetricTemplate, AlertProvider), copied beside their binaries like kwok's stages."""
Replace = tuple[str, str]
"""(old, new) of a go.mod `replace old => new` directive; `new` is `module version`."""


class BuildError(RuntimeError):
    """A go command failed; the message names the log file with the full output."""


@dataclass(frozen=True)
class BuildGroup:
    """Binaries that come from one upstream module and are built by one `go build` invocation."""

    name: str
    module: str
    version: str
    packages: Mapping[str, str]
    ldflags: tuple[str, ...] = ()
    replace_staging: bool = False
    """k8s.io/kubernetes: point its staging modules at their published twins."""
    copy_replaces: bool = False
    """Argo Rollouts: its own go.mod pins dependencies by `replace`, which a requiring module must repeat."""
    extra_files: tuple[str, ...] = field(default=())

    @property
    def module_dir_name(self) -> str:
        """Directory of the throwaway module, keyed by version like the binaries."""
        return f"{self.name}-{self.version}"

    def extra_files_dir(self, cache: Path) -> Path:
        """Where files copied out of the module (kwok's stages) live, beside the binary."""
        return cache / "bin" / self.module_dir_name / "stages"

    def is_complete(self, cache: Path) -> bool:
        """True when every binary and extra file of the group is in the cache."""
        binaries = (COMPONENTS[name].cached_path(cache) for name in self.packages)
        extras = (self.extra_files_dir(cache) / Path(relative).name for relative in self.extra_files)
        return all(path.is_file() for path in (*binaries, *extras))


def kwok_stage_dir(cache: Path) -> Path:
    """The stage YAMLs of the pinned kwok, copied out of its module by the kwok build."""
    return cache / "bin" / f"kwok-{KWOK_VERSION}" / "stages"


def kubernetes_ldflags(version: str, build_date: str) -> tuple[str, ...]:
    """The -X flags Kubernetes' own release scripts set, so `kubectl version` shows the real version."""
    major, minor = version.removeprefix("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "gitCommit": "",
        "buildDate": build_date,
    }
    return tuple(
        f"-X {package}.{name}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in values.items()
    )


def build_groups(build_date: str) -> dict[str, BuildGroup]:
    """Every build, by group name, with the pins from `versions` (the peers only on request)."""
    return {
        "argo-rollouts": BuildGroup(
            "argo-rollouts",
            "github.com/argoproj/argo-rollouts",
            ARGO_ROLLOUTS_VERSION,
            {"rollouts-controller": "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"},
            ldflags=(
                "-X github.com/argoproj/argo-rollouts/utils/version.version=" + ARGO_ROLLOUTS_VERSION.removeprefix("v"),
            ),
            copy_replaces=True,
            extra_files=ARGO_CRD_FILES,
        ),
        "flagger": BuildGroup(
            "flagger",
            "github.com/fluxcd/flagger",
            FLAGGER_VERSION,
            {"flagger": "github.com/fluxcd/flagger/cmd/flagger"},
            extra_files=FLAGGER_CRD_FILES,
        ),
        "distribution": BuildGroup(
            "distribution",
            "github.com/distribution/distribution/v3",
            DISTRIBUTION_VERSION,
            {"registry": "github.com/distribution/distribution/v3/cmd/registry"},
            ldflags=(f"-X github.com/distribution/distribution/v3/version.version={DISTRIBUTION_VERSION}",),
        ),
        "etcd": BuildGroup("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, {"etcd": "go.etcd.io/etcd/server/v3"}),
        "kwok": BuildGroup(
            "kwok",
            "sigs.k8s.io/kwok",
            KWOK_VERSION,
            {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
            ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION.removeprefix('v')}",),
            extra_files=KWOK_STAGE_FILES,
        ),
        "helm": BuildGroup(
            "helm",
            "helm.sh/helm/v3",
            HELM_VERSION,
            {"helm": "helm.sh/helm/v3/cmd/helm"},
            ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
        ),
        "kubernetes": BuildGroup(
            "kubernetes",
            "k8s.io/kubernetes",
            KUBERNETES_VERSION,
            {
                name: f"k8s.io/kubernetes/cmd/{name}"
                for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
            },
            ldflags=kubernetes_ldflags(KUBERNETES_VERSION, build_date),
            replace_staging=True,
        ),
    }


def staging_replaces(kubernetes_go_mod: str, kubernetes_version: str) -> list[Replace]:
    """Turn k8s.io/kubernetes' `k8s.io/x => ./staging/src/k8s.io/x` lines into `k8s.io/x => k8s.io/x v0.Y.Z`."""
    staging_version = "v0." + kubernetes_version.removeprefix("v").split(".", 1)[1]
    modules = re.findall(r"^\s*(\S+)\s*=>\s*\./staging/\S+\s*$", kubernetes_go_mod, flags=re.MULTILINE)
    return [(module, f"{module} {staging_version}") for module in modules]


_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+(?:\s+v\S+)?)\s*=>\s*(\S+\s+v\S+)\s*$", re.MULTILINE)


def module_replaces(go_mod: str) -> list[Replace]:
    """The `replace` directives of a go.mod that point at published versions (local paths cannot be repeated)."""
    return [(old, " ".join(new.split())) for old, new in _REPLACE.findall(go_mod)]


def render_go_mod(group: BuildGroup, replaces: Sequence[Replace], go_version: str) -> str:
    """go.mod of the throwaway module that pulls the upstream module in at its pinned version."""
    lines = [
        "// Generated by specfleet dev build: a throwaway module that builds pinned upstream binaries.",
        "module specfleet.local/devbuild",
        "",
        f"go {go_version}",
        "",
        f"require {group.module} {group.version}",
    ]
    if replaces:
        lines += ["", "replace ("]
        lines += [f"\t{old} => {new}" for old, new in replaces]
        lines.append(")")
    return "\n".join(lines) + "\n"


def go_version_of(go: str) -> tuple[int, int]:
    """(major, minor) of the go toolchain, so an old one fails with a clear message instead of a go.mod error."""
    output = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    match = re.match(r"go(\d+)\.(\d+)", output.strip())
    if match is None:
        raise BuildError(f"cannot read the Go version from {output!r}")
    return int(match.group(1)), int(match.group(2))


def go_environment() -> dict[str, str]:
    """Static binaries with the local toolchain only; never a go.work of some enclosing directory."""
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOWORK": "off"}


def _output_flag(staging: Path, group: BuildGroup) -> str:
    """One package: name the file (go.etcd.io/etcd/server/v3 would become `server`); several: a directory,
    where go names each binary after its package's last element (cmd/kube-apiserver -> kube-apiserver)."""
    if len(group.packages) == 1:
        return str(staging / next(iter(group.packages)))
    return f"{staging}/"


class GoBuilder:
    """Runs the go commands of each build group, with a rich progress bar and a log file per group."""

    def __init__(self, cache: Path, console: Console, go: str = "go") -> None:
        self.cache = cache
        self.console = console
        self.go = shutil.which(go) or go
        self.build_date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def ensure(self, names: Sequence[str]) -> dict[str, Path]:
        """Return a usable binary for each component name, building the missing groups first."""
        groups = build_groups(self.build_date)
        found = {name: find_binary(COMPONENTS[name], self.cache) for name in names}
        missing_groups = {COMPONENTS[name].build_group for name, path in found.items() if path is None}
        missing_groups |= {
            COMPONENTS[name].build_group
            for name in names
            if groups[COMPONENTS[name].build_group].extra_files
            and not groups[COMPONENTS[name].build_group].is_complete(self.cache)
        }
        for group_name in sorted(missing_groups):
            self.build(groups[group_name])
        resolved: dict[str, Path] = {}
        for name, path in found.items():
            component = COMPONENTS[name]
            resolved[name] = path if path is not None else component.cached_path(self.cache)
        return resolved

    def build(self, group: BuildGroup) -> None:
        """Build one group into the cache (a no-op if another process finished it while we waited)."""
        components = [COMPONENTS[name] for name in group.packages]
        what = f"the {group.name} {group.version} build"
        with exclusively(self.cache / "build" / f"{group.name}.lock", what, self._say):
            if group.is_complete(self.cache):  # built by the process we waited for
                return
            self._check_go()
            started = time.monotonic()
            module_dir = self.cache / "build" / group.module_dir_name
            module_dir.mkdir(parents=True, exist_ok=True)
            log_path = module_dir / "build.log"
            self.console.print(
                f"[bold]building[/] {group.module} {group.version} -> {', '.join(group.packages)} (log: {log_path})"
            )
            with log_path.open("w") as log:
                self._write_module(group, module_dir, log)
                packages = self._resolve(group, module_dir, log)
                self._compile(group, module_dir, packages, log, components)
                self._copy_extra_files(group, module_dir, log)
            self.console.print(f"[green]built[/] {group.name} {group.version} in {time.monotonic() - started:.0f}s")

    def _say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def _check_go(self) -> None:
        if shutil.which(self.go) is None:
            raise BuildError("`go` is not on PATH: specfleet builds its Kubernetes binaries with Go >= 1.26.")
        found = go_version_of(self.go)
        if found < MINIMUM_GO:
            raise BuildError(
                f"go {found[0]}.{found[1]} is too old: the pinned modules need go >= {MINIMUM_GO[0]}.{MINIMUM_GO[1]}"
            )

    def _run_logged(self, args: Sequence[str], cwd: Path, log: TextIO) -> str:
        log.write(f"$ {' '.join(args)}\n")
        result = subprocess.run(list(args), cwd=cwd, env=go_environment(), capture_output=True, text=True, check=False)
        log.write(result.stdout + result.stderr)
        log.flush()
        if result.returncode != 0:
            raise BuildError(f"{' '.join(args[:2])} failed ({result.returncode}); see {log.name}")
        return result.stdout

    def _write_module(self, group: BuildGroup, module_dir: Path, log: TextIO) -> None:
        replaces: list[Replace] = []
        if group.replace_staging or group.copy_replaces:
            info = json.loads(
                self._run_logged(
                    [self.go, "mod", "download", "-json", f"{group.module}@{group.version}"], module_dir, log
                )
            )
            upstream = Path(info["GoMod"]).read_text()
            replaces = staging_replaces(upstream, group.version) if group.replace_staging else module_replaces(upstream)
        go_version = ".".join(str(part) for part in MINIMUM_GO) + ".0"
        (module_dir / "go.mod").write_text(render_go_mod(group, replaces, go_version))
        (module_dir / "go.sum").touch()

    def _resolve(self, group: BuildGroup, module_dir: Path, log: TextIO) -> set[str]:
        """Download the module graph and list every package the binaries need (the progress bar's total)."""
        with self.console.status(f"resolving modules of {group.module} {group.version}"):
            listing = self._run_logged(
                [self.go, "list", "-mod=mod", "-deps", "-f", "{{.ImportPath}}", *group.packages.values()],
                module_dir,
                log,
            )
        return set(listing.split())

    def _compile(
        self,
        group: BuildGroup,
        module_dir: Path,
        packages: set[str],
        log: TextIO,
        components: Sequence[Component],
    ) -> None:
        staging = self.cache / "bin" / f".staging-{group.module_dir_name}"
        if staging.exists():  # we hold the group's lock: whoever left it there died mid-build
            self._say(f"removing the half-made {staging} an interrupted build left")
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        args = [
            self.go, "build", "-mod=mod", "-p", "2", "-v", "-trimpath",
            "-ldflags", " ".join(("-s", "-w", *group.ldflags)),
            "-o", _output_flag(staging, group), *group.packages.values(),
        ]  # fmt: skip
        log.write(f"$ {' '.join(args)}\n")
        log.flush()
        with Progress(
            TextColumn("[bold]compiling[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as progress:
            task = progress.add_task(f"{group.name} {group.version}", total=len(packages))
            process = subprocess.Popen(
                args, cwd=module_dir, env=go_environment(), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                if line.strip() in packages:
                    progress.advance(task)
            returncode = process.wait()
        log.flush()
        if returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildError(f"go build of {group.name} {group.version} failed ({returncode}); see {log.name}")
        for component in components:
            target = component.cached_path(self.cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            (staging / component.name).replace(target)
        shutil.rmtree(staging, ignore_errors=True)

    def _copy_extra_files(self, group: BuildGroup, module_dir: Path, log: TextIO) -> None:
        if not group.extra_files:
            return
        info = json.loads(self._run_logged([self.go, "list", "-mod=mod", "-m", "-json", group.module], module_dir, log))
        source_root = Path(info["Dir"])
        target_dir = group.extra_files_dir(self.cache)
        target_dir.mkdir(parents=True, exist_ok=True)
        for relative in group.extra_files:  # each file appears whole: is_complete looks for them
            target = target_dir / Path(relative).name
            partial = target.with_name(f".{target.name}.building")
            shutil.copyfile(source_root / relative, partial)
            partial.replace(target)
