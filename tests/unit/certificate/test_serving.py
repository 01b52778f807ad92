"""The serving certificate manager's pure parts: the rotation deadline, the request, the files."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.certificate import serving
from nodeagent.testbed.pki import CertificateAuthority

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.mark.parametrize(("jitter", "days"), [(0.0, 70), (0.5, 80), (0.999999, 90)])
def test_rotation_deadline_is_70_to_90_percent(jitter: float, days: int) -> None:
    deadline = serving.rotation_deadline(T0, T0 + datetime.timedelta(days=100), jitter)
    assert abs((deadline - T0).total_seconds() - days * 86400) < 60


def test_csr_names_the_node_and_its_addresses() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.load_pem_x509_csr(serving.build_csr(key, "node-1", ("node-1", "198.18.7.1", "", "node-1")))
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-1"
    assert csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-1"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("198.18.7.1")]
    body = serving.csr_object(b"PEM")
    assert body["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert body["spec"]["usages"] == ["digital signature", "server auth"]
    assert base64.b64decode(body["spec"]["request"]) == b"PEM"


def test_issued_certificate() -> None:
    assert serving.issued_certificate({"status": {}}) is None
    assert serving.issued_certificate({"status": {"certificate": base64.b64encode(b"C").decode()}}) == b"C"
    with pytest.raises(serving.CertificateDenied):
        serving.issued_certificate({"status": {"conditions": [{"type": "Denied", "status": "True"}]}})


def test_pair_written_linked_and_read_back(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path / "ca", "test-ca")
    issued = ca.issue(tmp_path / "ca", "serving", common_name="system:node:n", server=True)
    cert_pem = issued.cert.read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    path = serving.write_pair(tmp_path / "pki", cert_pem, key, now)
    assert path.is_symlink() and path.resolve().name.startswith("kubelet-server-")
    assert oct(path.resolve().stat().st_mode & 0o777) == "0o600"
    cert = serving.read_pair(path, now)
    assert cert is not None and cert.subject.rfc4514_string() == "CN=system:node:n"
    assert serving.read_pair(path, now + datetime.timedelta(days=400)) is None  # expired
    (tmp_path / "pki" / "only-cert.pem").write_bytes(cert_pem)
    assert serving.read_pair(tmp_path / "pki" / "only-cert.pem", now) is None  # no key in the file
    # A second write moves the link, atomically.
    later = now + datetime.timedelta(seconds=5)
    serving.write_pair(tmp_path / "pki", cert_pem, key, later)
    assert path.resolve().name == f"kubelet-server-{later.strftime('%Y-%m-%d-%H-%M-%S')}.pem"
