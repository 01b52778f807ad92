"""The testbed's certificates carry the identities the Node and RBAC authorizers key on, and chain to the CA."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeagent.testbed.pki import CertificateAuthority


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.mark.parametrize(
    ("common_name", "organizations", "server", "client"),
    [
        ("system:node:worker-1", ("system:nodes",), False, True),
        ("kubernetes-admin", ("system:masters",), False, True),
        ("kube-apiserver", (), True, False),
    ],
)
def test_issued_cert_has_identity_usage_and_chains_to_ca(
    tmp_path: Path, common_name: str, organizations: tuple[str, ...], server: bool, client: bool
) -> None:
    ca = CertificateAuthority.create(tmp_path, "test-ca")
    pair = ca.issue(
        tmp_path,
        "leaf",
        common_name=common_name,
        organizations=organizations,
        server=server,
        client=client,
        ip_addresses=("127.0.0.1",) if server else (),
    )
    cert = _load(pair.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == common_name
    assert tuple(a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)) == organizations
    usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert (ExtendedKeyUsageOID.SERVER_AUTH in usages) is server
    assert (ExtendedKeyUsageOID.CLIENT_AUTH in usages) is client
    ca_cert = _load(ca.pair.cert)
    public_key = ca_cert.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca_cert)
    assert pair.key.stat().st_mode & 0o077 == 0


def test_cert_from_another_ca_does_not_verify(tmp_path: Path) -> None:
    one = CertificateAuthority.create(tmp_path / "one", "one")
    two = CertificateAuthority.create(tmp_path / "two", "two")
    leaf = one.issue(tmp_path / "one", "leaf", common_name="x", client=True)
    with pytest.raises((ValueError, TypeError, x509.verification.VerificationError)):
        _load(leaf.cert).verify_directly_issued_by(_load(two.pair.cert))
