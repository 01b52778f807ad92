"""The kubelet API's serving certificate from the cluster (`serverTLSBootstrap: true`), as upstream's serving
certificate manager does it:

- at start, `<certDir>/kubelet-server-current.pem` (certificate and key in one file) is used while it is valid;
- otherwise, and at the rotation deadline (a jittered 70-90% of the certificate's life, as upstream's
  nextRotationDeadline), a new ECDSA P-256 key and a CertificateSigningRequest for `kubernetes.io/kubelet-serving`
  (CN `system:node:<name>`, O `system:nodes`, the node's hostnames and addresses as SANs, usages digital signature
  and server auth) go to the apiserver; nothing approves these by default, as upstream: an admin or an approver does;
- once issued, the pair is written as `kubelet-server-<date>.pem` and `kubelet-server-current.pem` is pointed at it
  (a symlink swapped with rename), and loaded into the live TLS context: new connections get it, none is dropped.

Until a certificate exists, TLS handshakes fail, as upstream's ("no serving certificate available for the kubelet").
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
import os
import random
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
CURRENT = "kubelet-server-current.pem"
USAGES = ("digital signature", "server auth")
POLL_SECONDS = 1.0
RETRY_SECONDS = 30.0


class CertificateDenied(RuntimeError):
    """The CSR was denied or failed: a new one is sent after a pause."""


def rotation_deadline(not_before: datetime.datetime, not_after: datetime.datetime, jitter: float) -> datetime.datetime:
    """Upstream nextRotationDeadline: not_before + life * (0.7 + 0.2 * jitter), jitter in [0, 1)."""
    life = not_after - not_before
    return not_before + life * (0.7 + 0.2 * jitter)


def build_csr(key: ec.EllipticCurvePrivateKey, node_name: str, addresses: Sequence[str]) -> bytes:
    """The PEM request: the node's identity and its names (DNS) and addresses (IP) as SANs."""
    names: list[x509.GeneralName] = []
    for entry in addresses:
        if not entry:
            continue
        try:
            general: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(entry))
        except ValueError:
            general = x509.DNSName(entry)
        if general not in names:
            names.append(general)
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
            ]
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_object(request_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": SIGNER,
            "usages": list(USAGES),
        },
    }


def issued_certificate(csr: dict[str, Any]) -> bytes | None:
    """The PEM certificate once issued; raises CertificateDenied for a Denied or Failed request."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") in ("Denied", "Failed") and condition.get("status", "True") == "True":
            raise CertificateDenied(
                f"{condition.get('type')}: {condition.get('reason', '')} {condition.get('message', '')}"
            )
    encoded = status.get("certificate")
    return base64.b64decode(encoded) if encoded else None


def read_pair(path: Path, now: datetime.datetime) -> x509.Certificate | None:
    """The certificate in a combined PEM file, if the file holds a key too and the certificate is valid now."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"PRIVATE KEY" not in data:
        return None
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        return None
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return None
    return cert


def write_pair(cert_dir: Path, cert_pem: bytes, key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> Path:
    """`kubelet-server-<date>.pem` (0600) and the `kubelet-server-current.pem` symlink swapped onto it."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    dated = cert_dir / f"kubelet-server-{now.strftime('%Y-%m-%d-%H-%M-%S')}.pem"
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(dated, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(cert_pem + key_pem)
    link = cert_dir / (CURRENT + ".tmp")
    link.unlink(missing_ok=True)
    link.symlink_to(dated.name)
    link.replace(cert_dir / CURRENT)
    return cert_dir / CURRENT


@dataclass
class ServingCertificateManager:
    client: KubeClient
    context: ssl.SSLContext
    cert_dir: Path
    node_name: str
    addresses: Sequence[str]
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    jitter: Callable[[], float] = random.random
    poll: float = POLL_SECONDS
    current: x509.Certificate | None = None

    def load_current(self) -> bool:
        """Use `kubelet-server-current.pem` if it is valid now; True when the context has a certificate."""
        path = self.cert_dir / CURRENT
        cert = read_pair(path, self.now())
        if cert is None:
            return False
        self.context.load_cert_chain(str(path))
        self.current = cert
        log.info("serving certificate loaded path=%s not_after=%s", path, cert.not_valid_after_utc.isoformat())
        return True

    async def run(self) -> None:
        """Until cancelled: obtain a certificate when there is none, and a new one at each rotation deadline."""
        while True:
            if self.current is not None:
                deadline = rotation_deadline(
                    self.current.not_valid_before_utc, self.current.not_valid_after_utc, self.jitter()
                )
                wait = (deadline - self.now()).total_seconds()
                if wait > 0:
                    log.info("serving certificate rotation scheduled deadline=%s", deadline.isoformat())
                    await asyncio.sleep(wait)
            try:
                await self.renew()
            except (ApiError, CertificateDenied, OSError, ValueError) as exc:
                log.warning("serving certificate request failed error=%s retry_in=%.0fs", exc, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    async def renew(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        request = build_csr(key, self.node_name, self.addresses)
        created = await self.client.create(
            paths.api_path("certificatesigningrequests", group="certificates.k8s.io"), csr_object(request)
        )
        name = str(created["metadata"]["name"])
        log.info("serving certificate requested csr=%s signer=%s", name, SIGNER)
        while True:
            csr = await self.client.get(
                paths.api_path("certificatesigningrequests", group="certificates.k8s.io", name=name)
            )
            cert_pem = issued_certificate(csr)
            if cert_pem is not None:
                break
            await asyncio.sleep(self.poll)
        path = await asyncio.to_thread(write_pair, self.cert_dir, cert_pem, key, self.now())
        self.context.load_cert_chain(str(path))
        self.current = x509.load_pem_x509_certificate(cert_pem)
        log.info(
            "serving certificate issued csr=%s path=%s not_after=%s",
            name,
            path,
            self.current.not_valid_after_utc.isoformat(),
        )
