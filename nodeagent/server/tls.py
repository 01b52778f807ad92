"""The kubelet API's TLS: the serving certificate and the client-certificate check.

As upstream (cmd/kubelet/app/server.go InitializeTLS): `tlsCertFile`/`tlsPrivateKeyFile` when set; otherwise
`<certDir>/kubelet.crt` and `kubelet.key`, made once as a self-signed pair (a CA `<host>-ca@<unix time>` and a
certificate `<host>@<unix time>` for the hostname and the node's addresses, a year long) and reused afterwards.
Client certificates are asked for but optional; one that is given must chain to `authentication.x509.clientCAFile`.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_YEAR = datetime.timedelta(days=365)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def self_signed_pair(cert_dir: Path, host: str, addresses: Sequence[str]) -> tuple[Path, Path]:
    """`cert_dir/kubelet.crt` and `kubelet.key`, made if missing (upstream GenerateSelfSignedCertKey)."""
    cert_path, key_path = cert_dir / "kubelet.crt", cert_dir / "kubelet.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    cert_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    stamp = int(time.time())
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _YEAR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sans: list[x509.GeneralName] = []
    for name in [host, *addresses]:
        if not name:
            continue
        general: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name)) if _is_ip(name) else x509.DNSName(name)
        if general not in sans:
            sans.append(general)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _YEAR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def server_context(cert_file: Path | None, key_file: Path | None, client_ca_file: str = "") -> ssl.SSLContext:
    """TLS 1.2+, the serving pair (None: loaded later, by the serving certificate manager), and (with a client CA)
    client certificates verified when presented."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
