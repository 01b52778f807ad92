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
import datetime
import ipaddress
import logging
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

from nodeagent.certificate.bootstrap import key_pem
from nodeagent.certificate.csr import CertificateDenied, csr_body, issued, rotation_deadline
from nodeagent.certificate.store import CertificateStore, valid_at
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
PAIR_PREFIX = "kubelet-server"  # kubelet-server-<date>.pem and the kubelet-server-current.pem symlink
USAGES = ("digital signature", "server auth")
POLL_SECONDS = 1.0
RETRY_SECONDS = 30.0


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
    return csr_body(SIGNER, USAGES, request_pem)


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

    def _store(self) -> CertificateStore:
        return CertificateStore(self.cert_dir, PAIR_PREFIX)

    def load_current(self) -> bool:
        """Use `kubelet-server-current.pem` if it is valid now; True when the context has a certificate."""
        pair = self._store().current()
        if pair is None or not valid_at(pair.certificate, self.now()):
            return False
        path, cert = pair.path, pair.certificate
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
            cert_pem = issued(csr)
            if cert_pem is not None:
                break
            await asyncio.sleep(self.poll)
        path = await asyncio.to_thread(self._store().update, cert_pem, key_pem(key), self.now())
        self.context.load_cert_chain(str(path))
        self.current = x509.load_pem_x509_certificate(cert_pem)
        log.info(
            "serving certificate issued csr=%s path=%s not_after=%s",
            name,
            path,
            self.current.not_valid_after_utc.isoformat(),
        )
