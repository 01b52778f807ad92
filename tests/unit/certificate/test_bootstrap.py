"""TLS bootstrap's pure parts and files: the store, the kubeconfig check, the request, the written kubeconfig."""

from __future__ import annotations

import base64
import datetime
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.certificate import bootstrap
from nodeagent.certificate.store import CertificateStore
from nodeagent.kube.kubeconfig import ClusterCredentials, load_kubeconfig, ssl_context
from tests.unit.certificate.certs import T0, ca, client_pair

DAY = datetime.timedelta(days=1)
AUTHORITY = ca()


def test_store_writes_dated_pair_and_moves_the_link(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path / "pki", "kubelet-client")
    assert store.current() is None
    cert, key = client_pair(AUTHORITY, "n1", T0, T0 + DAY)
    path = store.update(cert, key, T0)
    assert path == tmp_path / "pki" / "kubelet-client-current.pem"
    dated = tmp_path / "pki" / "kubelet-client-2026-01-01-00-00-00.pem"
    assert path.is_symlink() and path.resolve() == dated
    assert oct(dated.stat().st_mode & 0o777) == "0o600"
    assert dated.read_bytes() == cert + key
    current = store.current()
    assert current is not None and current.certificate.subject.rfc4514_string() == "CN=system:node:n1,O=system:nodes"
    second, key2 = client_pair(AUTHORITY, "n1", T0, T0 + 2 * DAY)
    store.update(second, key2, T0 + DAY)
    assert path.resolve().name == "kubelet-client-2026-01-02-00-00-00.pem"
    assert dated.exists()  # older pairs stay, as upstream's store leaves them
    assert not (tmp_path / "pki" / "kubelet-client-updated.pem").exists()
    # A file without a key is no pair.
    path.unlink()
    path.write_bytes(cert)
    assert store.current() is None


def _kubeconfig(tmp_path: Path, user: dict[str, Any]) -> Path:
    path = tmp_path / "kubelet.conf"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def _with_cert(not_before: datetime.datetime, not_after: datetime.datetime) -> Callable[[Path], Path]:
    def make(tmp_path: Path) -> Path:
        cert, key = client_pair(AUTHORITY, "n1", not_before, not_after)
        (tmp_path / "pair.pem").write_bytes(cert + key)
        return _kubeconfig(tmp_path, {"client-certificate": "pair.pem", "client-key": "pair.pem"})

    return make


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "absent.conf"


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "bad.conf"
    path.write_text("{not: [yaml")
    return path


def _token(tmp_path: Path) -> Path:
    return _kubeconfig(tmp_path, {"token": "abc"})


def _cert_file_gone(tmp_path: Path) -> Path:
    return _kubeconfig(tmp_path, {"client-certificate": "gone.pem", "client-key": "gone.pem"})


@pytest.mark.parametrize(
    ("make", "valid"),
    [
        (_missing, False),
        (_garbage, False),
        (_cert_file_gone, False),
        (_token, True),  # no certificate: nothing to expire, kept
        (_with_cert(T0 - DAY, T0 + DAY), True),
        (_with_cert(T0 - 2 * DAY, T0 - DAY), False),  # expired
        (_with_cert(T0 + DAY, T0 + 2 * DAY), False),  # not yet valid
    ],
)
def test_client_config_still_valid(tmp_path: Path, make: Callable[[Path], Path], valid: bool) -> None:
    assert bootstrap.client_config_still_valid(make(tmp_path), T0) is valid


def test_request_names_the_node_and_digests_its_key() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.load_pem_x509_csr(bootstrap.build_request(key, "node-1"))
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-1"
    assert csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert len(csr.extensions) == 0  # a client certificate: no SANs
    name = bootstrap.digested_name(key.public_key(), "node-1")
    assert name.startswith("node-csr-") and len(name) == len("node-csr-") + 43  # 32 bytes, unpadded base64url
    # The same key and subject give the same name (a restart finds its request); anything else another.
    assert bootstrap.digested_name(key.public_key(), "node-1") == name
    assert bootstrap.digested_name(key.public_key(), "node-2") != name
    other = ec.generate_private_key(ec.SECP256R1())
    assert bootstrap.digested_name(other.public_key(), "node-1") != name
    body = bootstrap.csr_object(name, b"PEM")
    assert body["metadata"] == {"name": name}
    assert body["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert body["spec"]["usages"] == ["digital signature", "client auth"]
    assert base64.b64decode(body["spec"]["request"]) == b"PEM"


@pytest.mark.parametrize(
    ("status", "result", "error"),
    [
        ({}, None, None),
        ({"conditions": [{"type": "Approved", "status": "True"}]}, None, None),
        ({"conditions": [{"type": "Approved", "status": "True"}], "certificate": base64.b64encode(b"C").decode()},
         b"C", None),
        ({"conditions": [{"type": "Denied", "status": "True", "reason": "NotMine", "message": "go away"}]},
         None, "certificate signing request is denied, reason: NotMine, message: go away"),
        ({"conditions": [{"type": "Failed", "status": "True", "reason": "SignerFailed", "message": "no key"}]},
         None, "certificate signing request failed, reason: SignerFailed, message: no key"),
        ({"conditions": [{"type": "Denied", "status": "False"}]}, None, None),
    ],
)  # fmt: skip
def test_issued(status: dict[str, Any], result: bytes | None, error: str | None) -> None:
    if error is None:
        assert bootstrap.issued({"status": status}) == result
        return
    with pytest.raises(bootstrap.CertificateDenied, match=error):
        bootstrap.issued({"status": status})


def test_temporary_key_is_made_once_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "pki" / bootstrap.TMP_KEY
    key = bootstrap.load_or_generate_key(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_bytes().startswith(b"-----BEGIN EC PRIVATE KEY-----")
    again = bootstrap.load_or_generate_key(path)
    assert again.private_numbers() == key.private_numbers()
    path.write_text("garbage")
    assert bootstrap.load_or_generate_key(path).private_numbers() != key.private_numbers()


def test_written_kubeconfig_loads_with_the_current_pair(tmp_path: Path) -> None:
    _, ca_cert = AUTHORITY
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    cluster = ClusterCredentials(server="https://127.0.0.1:6443", ca_pem=ca_pem, tls_server_name="kubernetes")
    store = CertificateStore(tmp_path / "pki", "kubelet-client")
    cert, key = client_pair(AUTHORITY, "n1", T0, T0 + 365 * DAY)
    pair = store.update(cert, key, T0)
    path = tmp_path / "etc" / "kubelet.conf"
    bootstrap.write_kubeconfig(path, cluster, pair)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = load_kubeconfig(path)
    assert (loaded.server, loaded.ca_pem, loaded.tls_server_name) == (cluster.server, ca_pem, "kubernetes")
    # One file as both certificate and key, as upstream's kubeconfig: the TLS context takes each part from it.
    assert loaded.client_cert_pem == loaded.client_key_pem == cert + key
    assert isinstance(ssl_context(loaded), ssl.SSLContext)
    assert bootstrap.client_config_still_valid(path, T0 + DAY)
    assert not bootstrap.client_config_still_valid(path, T0 + 400 * DAY)
