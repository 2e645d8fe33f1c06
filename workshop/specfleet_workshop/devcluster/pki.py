"""Certificates and keys for the dev cluster, made with the openssl CLI.

One CA signs the API server's serving certificate and a client certificate per identity: the admin
(group system:masters), kube-controller-manager and kube-scheduler (the identities their default RBAC
roles are bound to) and kwok (system:masters: it plays the kubelet of every fake node). The RSA key pair
signs and verifies ServiceAccount tokens, which later issues need to test least-privilege RBAC.
`front-proxy-client` is the API server's identity towards aggregated API servers (requestheader auth).
The command lines are pure functions; `create_pki` only runs them.
"""

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from specfleet_workshop.devcluster.config import ADMIN_USER

EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
"""P-256 keys: generated in milliseconds, accepted by every Kubernetes component."""

VALID_DAYS = "3650"


@dataclass(frozen=True)
class Certificate:
    """A certificate to issue from the dev CA: its file stem, subject and subject alternative names."""

    name: str
    common_name: str
    organization: str | None = None
    dns_names: tuple[str, ...] = field(default=())
    ip_addresses: tuple[str, ...] = field(default=())

    @property
    def subject(self) -> str:
        organization = f"/O={self.organization}" if self.organization else ""
        return f"{organization}/CN={self.common_name}"


def dev_certificates(service_ip: str) -> tuple[Certificate, ...]:
    """Every certificate the cluster uses; `service_ip` is the `kubernetes` Service's ClusterIP."""
    return (
        Certificate(
            "apiserver",
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=("127.0.0.1", service_ip),
        ),
        Certificate("admin", ADMIN_USER, "system:masters"),
        Certificate("controller-manager", "system:kube-controller-manager"),
        Certificate("scheduler", "system:kube-scheduler"),
        Certificate("kwok", "kwok-controller", "system:masters"),
        Certificate("prometheus", "specfleet-dev-prometheus", "system:masters"),
        Certificate("front-proxy-client", "front-proxy-client"),
    )


def extension_file(certificate: Certificate) -> str:
    """x509v3 extensions of a leaf: serving and client use, SANs only when it has some."""
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth,clientAuth",
    ]
    alt_names = [f"DNS:{name}" for name in certificate.dns_names]
    alt_names += [f"IP:{address}" for address in certificate.ip_addresses]
    if alt_names:
        lines.append("subjectAltName=" + ",".join(alt_names))
    return "\n".join(lines) + "\n"


def ca_command(pki: Path) -> list[str]:
    """Self-signed CA certificate and key."""
    return [
        "openssl", "req", "-x509", *EC_KEY, "-nodes", "-days", VALID_DAYS,
        "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"), "-subj", "/CN=specfleet-dev-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    ]  # fmt: skip


def leaf_commands(pki: Path, certificate: Certificate) -> list[list[str]]:
    """Key + CSR, then the CA's signature with the extensions in `<name>.ext`."""
    stem = pki / certificate.name
    return [
        [
            "openssl", "req", "-new", *EC_KEY, "-nodes", "-keyout", f"{stem}.key", "-out", f"{stem}.csr",
            "-subj", certificate.subject,
        ],
        [
            "openssl", "x509", "-req", "-in", f"{stem}.csr", "-CA", str(pki / "ca.crt"),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", VALID_DAYS,
            "-extfile", f"{stem}.ext", "-out", f"{stem}.crt",
        ],
    ]  # fmt: skip


def service_account_key_commands(pki: Path) -> list[list[str]]:
    """RSA pair for ServiceAccount tokens: the API server verifies with sa.pub, signs with sa.key."""
    return [
        [
            "openssl",
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            str(pki / "sa.key"),
        ],
        ["openssl", "pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
    ]


def create_pki(pki: Path, service_ip: str) -> None:
    """Write the CA, every certificate and the ServiceAccount keys into `pki` (keys readable by the owner only)."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    commands = [ca_command(pki)]
    for certificate in dev_certificates(service_ip):
        (pki / f"{certificate.name}.ext").write_text(extension_file(certificate))
        commands += leaf_commands(pki, certificate)
    commands += service_account_key_commands(pki)
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:3])} failed: {result.stderr.strip()}")
    for key in pki.glob("*.key"):
        key.chmod(0o600)
