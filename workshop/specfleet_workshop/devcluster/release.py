"""Cut a release into an OCI registry (`specfleet dev release`, docs/release.md).

One version, four artifacts: the runtime-only operator image and the vLLM serving image, built by
`specfleet dev images`' builder and pushed with buildah (each push writes the manifest digest it stored); the
chart, staged with those digests pinned in its default values and the version in Chart.yaml, packaged and
pushed with `helm push` as an OCI artifact; and `kubectl-specfleet`, the CLI as a single-file zipapp built by
shiv from the runtime distribution (`operator/`), left in the output directory with `release.json`, which
records every reference and digest.

Registry TLS is verified: a registry with a private CA (the loopback one, `registry.py`) is trusted through
`ca_file` (helm's `--ca-file`, buildah's `--cert-dir`), never by turning verification off. Credentials for a
real registry come from `buildah login` and `helm registry login`, as for any push.

The edits to the chart's files are pure functions (`pin_values`, `pin_chart_version`), unit tested.
"""

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from specfleet_workshop.cachedir import fill_once
from specfleet_workshop.devcluster.images import OPERATOR, ROOT, BaseChoice, Built, ImageBuilder, input_files, vllm_spec

CHART = ROOT / "charts" / "specfleet"
SHIV_VERSION = "1.0.8"
"""The zipapp builder (a workshop dependency); part of the plugin's cache key."""
PLUGIN = "kubectl-specfleet"
OPERATOR_REPOSITORY = "specfleet-operator"
VLLM_REPOSITORY = "vllm-rocm"
CHART_REPOSITORY = "charts"
"""Paths under the registry: with `ghcr.io/specfleet` the chart's and the operator's own defaults
(`ghcr.io/specfleet/specfleet-operator`, `ghcr.io/specfleet/vllm-rocm`) and `oci://ghcr.io/specfleet/charts/specfleet`."""
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_VERSION = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


class ReleaseError(RuntimeError):
    """A step of the release failed; the message says which and what the tool printed."""


@dataclass(frozen=True)
class Pushed:
    """One image in the registry: its repository, the tag it was pushed with and the manifest digest stored."""

    repository: str
    tag: str
    digest: str

    @property
    def by_digest(self) -> str:
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class Release:
    version: str
    registry: str
    chart: str
    """`oci://HOST/charts/specfleet`: what `helm install ... --version VERSION` takes."""
    chart_digest: str
    operator: Pushed
    vllm: Pushed
    vllm_version: str
    plugin: Path
    chart_package: Path

    def to_json(self) -> str:
        fields = asdict(self)
        fields.update(plugin=str(self.plugin), chart_package=str(self.chart_package))
        return json.dumps(fields, indent=2)


def check_version(version: str) -> str:
    """A chart version is SemVer 2 (helm refuses anything else); the images are tagged with it too."""
    if not _VERSION.match(version):
        raise ReleaseError(f"--version {version!r} is not a SemVer version such as 0.3.0 (helm needs one)")
    return version


def _replace_in_block(text: str, block: str, values: dict[str, str]) -> str:
    """Set `key: value` lines (two-space indented) inside the top-level mapping `block:` of a values file,
    keeping every comment and every other line as it is."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"{block}:"), None)
    if start is None:
        raise ReleaseError(f"values.yaml has no top-level `{block}:`")
    remaining = dict(values)
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line.startswith((" ", "#")):
            break  # the next top-level key
        match = re.match(r"^  (\w+):", line)
        if match and match.group(1) in remaining:
            lines[i] = f"  {match.group(1)}: {json.dumps(remaining.pop(match.group(1)))}\n"
    if remaining:
        raise ReleaseError(f"values.yaml's `{block}:` has no {', '.join(sorted(remaining))}")
    return "".join(lines)


def pin_values(text: str, operator: Pushed, vllm: Pushed, vllm_version: str) -> str:
    """The chart's values.yaml with both images pinned by digest (the tag kept beside it for people)."""
    pinned = _replace_in_block(text, "image", {"repository": operator.repository, "tag": operator.tag,
                                               "digest": operator.digest})  # fmt: skip
    pinned = _replace_in_block(
        pinned, "servingImage", {"repository": vllm.repository, "vllmVersion": vllm_version, "digest": vllm.digest}
    )
    values = yaml.safe_load(pinned)
    assert values["image"]["digest"] == operator.digest and values["servingImage"]["digest"] == vllm.digest
    return pinned


def pin_chart_version(text: str, version: str) -> str:
    """Chart.yaml with `version` and `appVersion` set to the release's version."""
    pinned = re.sub(r"(?m)^version: .*$", f"version: {version}", text, count=1)
    pinned = re.sub(r"(?m)^appVersion: .*$", f'appVersion: "{version}"', pinned, count=1)
    chart = yaml.safe_load(pinned)
    assert chart["version"] == version and chart["appVersion"] == version
    return pinned


def chart_push_digest(output: str) -> str:
    """The digest `helm push` prints (`Digest: sha256:...`)."""
    match = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", output)
    if match is None:
        raise ReleaseError(f"helm push printed no digest:\n{output}")
    return match.group(1)


def plugin_key(files: Sequence[Path]) -> str:
    """The zipapp's cache key: the runtime's sources, the Python it is built for and shiv's version."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}\0{SHIV_VERSION}".encode())
    for path in sorted(files):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def zipapp(cache: Path, log: Callable[[str], None]) -> Path:
    """`kubectl-specfleet` as one file: shiv bundles the runtime distribution (`operator/`) and its dependencies
    for this Python (`#!/usr/bin/env python3`); pyc files are compiled when it first unpacks into ~/.shiv, so
    later runs start as an installed CLI does. Built once per `plugin_key` under the cache."""
    shiv = Path(sys.executable).parent / "shiv"

    def build(staging: Path) -> None:
        with tempfile.TemporaryDirectory() as scratch:  # pip builds in the source tree: keep operator/ clean
            source = Path(scratch) / "operator"
            shutil.copytree(ROOT / "operator", source, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                                     "__pycache__"))  # fmt: skip
            argv = [str(shiv), "--console-script", PLUGIN, "--output-file", str(staging),
                    "--python", "/usr/bin/env python3", "--compressed", "--compile-pyc", "--reproducible",
                    str(source)]  # fmt: skip
            log("$ " + " ".join(argv))
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise ReleaseError(f"shiv failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")

    key = plugin_key(input_files(OPERATOR))
    made = fill_once(cache / "release" / f"{PLUGIN}-{key}", build, what=f"the {PLUGIN} zipapp", log=log)
    for old in made.parent.glob(f"{PLUGIN}-*"):  # one in the cache, as one image of each name (locks are .files)
        if old != made:
            log(f"removing the outdated {old.name}")
            old.unlink(missing_ok=True)
    return made


class Releaser:
    """Runs the steps; `log` gets every decision and command."""

    def __init__(self, cache: Path, helm: Path, log: Callable[[str], None], ca_file: Path | None = None) -> None:
        self.cache, self.helm, self.log, self.ca_file = cache, helm, log, ca_file
        self.builder = ImageBuilder(cache, log)

    def _run(self, argv: Sequence[str], timeout: float = 1800) -> str:
        self.log("$ " + " ".join(argv))
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise ReleaseError(f"{' '.join(argv[:3])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout + done.stderr

    def push(self, built: Built, repository: str, tag: str, cert_dir: Path | None) -> Pushed:
        """buildah push of a built image; the digest is the one buildah wrote for the manifest it stored."""
        with tempfile.TemporaryDirectory() as scratch:
            digest_file = Path(scratch) / "digest"
            tls = ["--cert-dir", str(cert_dir)] if cert_dir else []
            argv = self.builder.storage.buildah("push", *tls, "--digestfile", str(digest_file), built.tag,
                                                f"docker://{repository}:{tag}")  # fmt: skip
            self._run(argv)
            digest = digest_file.read_text().strip()
        if not _DIGEST.fullmatch(digest):
            raise ReleaseError(f"buildah push of {built.tag} wrote no digest ({digest!r})")
        self.log(f"pushed {repository}:{tag} as {digest}")
        return Pushed(repository, tag, digest)

    def plugin(self, output: Path) -> Path:
        """The single-file `kubectl-specfleet` (cached, `zipapp`), copied into the output directory."""
        target = output / PLUGIN
        shutil.copyfile(zipapp(self.cache, self.log), target)
        target.chmod(0o755)
        return target

    def release(self, registry: str, version: str, output: Path, base: BaseChoice, vllm_venv: Path,
                vllm_version: str) -> Release:  # fmt: skip
        """Build, push and publish one version into `registry`; the chart package, the zipapp and release.json
        go to `output`. Nothing is published under the version until both images are pushed."""
        check_version(version)
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            cert_dir = None
            if self.ca_file:
                cert_dir = Path(scratch) / "certs.d"
                cert_dir.mkdir()
                shutil.copyfile(self.ca_file, cert_dir / "ca.crt")
            operator_image = self.builder.build(OPERATOR, base)
            vllm_image = self.builder.build(vllm_spec(vllm_venv, vllm_version), BaseChoice.STAND_IN)
            operator = self.push(operator_image, f"{registry}/{OPERATOR_REPOSITORY}", version, cert_dir)
            vllm = self.push(vllm_image, f"{registry}/{VLLM_REPOSITORY}", f"v{vllm_version}", cert_dir)

            staged = Path(scratch) / "specfleet"
            shutil.copytree(CHART, staged)
            (staged / "values.yaml").write_text(pin_values((CHART / "values.yaml").read_text(), operator, vllm,
                                                           vllm_version))  # fmt: skip
            (staged / "Chart.yaml").write_text(pin_chart_version((CHART / "Chart.yaml").read_text(), version))
            self._run([str(self.helm), "lint", str(staged)])
            self._run([str(self.helm), "package", str(staged), "--destination", str(output)])
            package = output / f"specfleet-{version}.tgz"
            tls = ["--ca-file", str(self.ca_file)] if self.ca_file else []
            pushed = self._run([str(self.helm), "push", str(package), f"oci://{registry}/{CHART_REPOSITORY}", *tls])
        made = Release(
            version=version,
            registry=registry,
            chart=f"oci://{registry}/{CHART_REPOSITORY}/specfleet",
            chart_digest=chart_push_digest(pushed),
            operator=operator,
            vllm=vllm,
            vllm_version=vllm_version,
            plugin=self.plugin(output),
            chart_package=package,
        )
        (output / "release.json").write_text(made.to_json() + "\n")
        return made
