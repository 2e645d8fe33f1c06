"""The dev PKI: SANs the clients dial, identities RBAC knows, and keys only the owner can read."""

import subprocess
from pathlib import Path

from specfleet_workshop.devcluster.pki import create_pki, dev_certificates, extension_file


def test_apiserver_certificate_covers_loopback_and_the_service_names() -> None:
    apiserver = next(cert for cert in dev_certificates("10.96.0.1") if cert.name == "apiserver")
    text = extension_file(apiserver)
    assert "IP:127.0.0.1" in text and "IP:10.96.0.1" in text
    assert "DNS:kubernetes.default.svc.cluster.local" in text


def test_component_identities_match_the_default_rbac_bindings() -> None:
    subjects = {cert.name: cert.subject for cert in dev_certificates("10.96.0.1")}
    assert subjects["controller-manager"] == "/CN=system:kube-controller-manager"
    assert subjects["scheduler"] == "/CN=system:kube-scheduler"
    assert subjects["admin"] == "/O=system:masters/CN=specfleet-dev-admin"


def test_client_certificates_carry_no_subject_alt_names() -> None:
    admin = next(cert for cert in dev_certificates("10.96.0.1") if cert.name == "admin")
    assert "subjectAltName" not in extension_file(admin)


def test_create_pki_issues_certificates_that_verify_against_the_ca(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    create_pki(pki, "10.96.0.1")
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(pki / "ca.crt"), str(pki / "apiserver.crt"), str(pki / "admin.crt")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    assert {key.stat().st_mode & 0o777 for key in pki.glob("*.key")} == {0o600}
    assert (pki / "sa.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
