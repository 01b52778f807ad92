"""The serving certificate manager's pure parts: the request and the files (the CSR verdict and the rotation
deadline are csr.py's, tested with the client certificate)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.certificate import serving
from nodeagent.certificate.bootstrap import key_pem
from nodeagent.certificate.store import CertificateStore, valid_at
from nodeagent.testbed.pki import CertificateAuthority

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


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


def test_pair_written_linked_and_read_back(tmp_path: Path) -> None:
    """The serving pair goes through the client certificate's store: kubelet-server-<date>.pem and the symlink."""
    ca = CertificateAuthority.create(tmp_path / "ca", "test-ca")
    issued = ca.issue(tmp_path / "ca", "serving", common_name="system:node:n", server=True)
    cert_pem = issued.cert.read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    store = CertificateStore(tmp_path / "pki", serving.PAIR_PREFIX)
    path = store.update(cert_pem, key_pem(key), now)
    assert path.is_symlink() and path.resolve().name.startswith("kubelet-server-")
    assert path.name == "kubelet-server-current.pem"
    assert oct(path.resolve().stat().st_mode & 0o777) == "0o600"
    pair = store.current()
    assert pair is not None and pair.certificate.subject.rfc4514_string() == "CN=system:node:n"
    assert not valid_at(pair.certificate, now + datetime.timedelta(days=400))  # expired
    # A second write moves the link, atomically.
    later = now + datetime.timedelta(seconds=5)
    store.update(cert_pem, key_pem(key), later)
    assert path.resolve().name == f"kubelet-server-{later.strftime('%Y-%m-%d-%H-%M-%S')}.pem"
