"""A real OCI registry on loopback: CNCF Distribution's `registry`, built from the Go module proxy at the pinned
`DISTRIBUTION_VERSION` like the control plane, standing in for a public registry when a release is cut and
installed here (docs/release.md).

It serves HTTPS with a certificate for 127.0.0.1 from a CA of its own (made with the dev cluster's openssl
commands, `pki`), so helm, buildah and podman talk to it as to a public registry: they trust the CA file
(`--ca-file`, `--cert-dir`, `SSL_CERT_FILE`) instead of being told to skip verification. Blobs and manifests
are stored on the filesystem under the state directory; `stop` ends the one process `start` began.
"""

import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specfleet_workshop.devcluster.pki import Certificate, ca_command, extension_file, leaf_commands
from specfleet_workshop.fleetpods.loopback import free_port

HOST = "127.0.0.1"
CERTIFICATE = Certificate(name="registry", common_name="specfleet-loopback-registry", ip_addresses=(HOST,))


class RegistryError(RuntimeError):
    """The registry did not start or answer; the message names its log."""


@dataclass(frozen=True)
class Registry:
    """A running registry: where it listens and the CA its certificate is signed by."""

    address: str
    """`127.0.0.1:PORT`, the host part of image references and `oci://` chart URLs."""
    ca_file: Path
    state_dir: Path
    process: "subprocess.Popen[bytes]" = field(compare=False, repr=False)

    @property
    def cert_dir(self) -> Path:
        """A directory holding only the CA (`ca.crt`), for buildah's and podman's `--cert-dir`."""
        return self.state_dir / "certs.d"


def registry_config(port: int, storage: Path, certificate: Path, key: Path) -> dict[str, Any]:
    """Distribution's configuration: filesystem storage, HTTPS on loopback only, no authentication."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"{HOST}:{port}", "tls": {"certificate": str(certificate), "key": str(key)}},
    }


def _issue_certificate(pki: Path) -> None:
    """The registry's own CA and its serving certificate for 127.0.0.1 (kept across restarts of one state dir)."""
    if (pki / f"{CERTIFICATE.name}.crt").is_file():
        return
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    (pki / f"{CERTIFICATE.name}.ext").write_text(extension_file(CERTIFICATE))
    for command in [ca_command(pki), *leaf_commands(pki, CERTIFICATE)]:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RegistryError(f"{' '.join(command[:3])} failed: {done.stderr.strip()}")
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def _answers(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start(binary: Path, state_dir: Path, port: int | None = None, timeout: float = 60.0) -> Registry:
    """Start `registry serve` on a free loopback port (or `port`) and wait until its API answers over TLS."""
    state_dir.mkdir(parents=True, exist_ok=True)
    pki = state_dir / "pki"
    _issue_certificate(pki)
    cert_dir = state_dir / "certs.d"
    cert_dir.mkdir(exist_ok=True)
    (cert_dir / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    port = port or free_port()
    config = state_dir / "config.yml"
    key = pki / f"{CERTIFICATE.name}.key"
    config.write_text(yaml.safe_dump(registry_config(port, state_dir / "storage", key.with_suffix(".crt"), key)))
    log = state_dir / "registry.log"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}  # Distribution 3 would export traces to localhost
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(binary), "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    deadline = time.monotonic() + timeout
    while not _answers(f"https://{HOST}:{port}/v2/", context):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RegistryError(f"the registry did not answer on {HOST}:{port}; see {log}")
        time.sleep(0.2)
    return Registry(f"{HOST}:{port}", pki / "ca.crt", state_dir, process)


def stop(registry: Registry, timeout: float = 15.0) -> None:
    """SIGTERM the registry `start` began (Distribution drains and exits), SIGKILL it after `timeout`."""
    registry.process.terminate()
    try:
        registry.process.wait(timeout)
    except subprocess.TimeoutExpired:
        registry.process.kill()
        registry.process.wait()


@contextmanager
def running(binary: Path, state_dir: Path, port: int | None = None) -> Iterator[Registry]:
    """A registry for the length of a `with` block."""
    registry = start(binary, state_dir, port)
    try:
        yield registry
    finally:
        stop(registry)
