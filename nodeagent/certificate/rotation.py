"""Client certificate rotation (`rotateCertificates: true`), as client-go's certificate manager does it for the
kubelet (k8s.io/client-go/util/certificate, pkg/kubelet/certificate/kubelet.go):

- the current pair is `<certDir>/kubelet-client-current.pem`, or, before the first rotation, the kubeconfig's own
  client certificate;
- the deadline is a jittered 70-90% of the certificate's life (nextRotationDeadline); a certificate already expired
  is renewed at once;
- at the deadline a new ECDSA key and a CSR to `kubernetes.io/kube-apiserver-client-kubelet` go out with the node's
  own credential (kubeadm binds system:nodes to `certificatesigningrequests:selfnodeclient`, so the csrapproving
  controller approves it); when the certificate has expired already (the apiserver was away past it), the bootstrap
  kubeconfig sends it instead, as upstream falls back to its bootstrap credential;
- the issued pair goes into the store (dated file, symlink moved) and into the API client's TLS context.

Departure: upstream closes every open connection after a rotation so that they re-authenticate; here connections
open at the time, the pods watch among them, keep going with the identity they were authenticated with (the
apiserver does not re-check a connection's certificate), and every new connection presents the new one.

Test knob: NODEAGENT_CLIENT_CERT_ROTATION_SECONDS=N puts each deadline N seconds after the certificate was loaded
instead (the controller-manager's --cluster-signing-duration applies to every signer at once, so a short one would
expire the testbed's other certificates too).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from nodeagent.certificate.bootstrap import (
    BACKOFF_START,
    PAIR_PREFIX,
    key_pem,
    request_certificate,
)
from nodeagent.certificate.csr import CertificateDenied, rotation_deadline
from nodeagent.certificate.store import CertificateStore
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ApiUnavailable, KubeconfigError
from nodeagent.kube.kubeconfig import load_kubeconfig

log = logging.getLogger(__name__)

ROTATION_ENV = "NODEAGENT_CLIENT_CERT_ROTATION_SECONDS"
# As upstream's certificate manager: a failed rotation is retried after 2, 4, 8 and 16 s, then every 32 s
# (wait.ExponentialBackoff of 5 steps, then wait.PollInfinite(32s)), so a renewal follows an apiserver's return
# within half a minute however long it was away.
RETRY_CAP = 32.0
# As upstream's certificateWaitTimeout: a request nobody approves is given up after this long (and a new one sent
# after the retry delay) instead of being waited on for ever, e.g. past the certificate's expiry, when only the
# bootstrap credential can still ask.
WAIT_TIMEOUT = 15 * 60.0


class CertificateNotIssued(RuntimeError):
    """The request was neither issued nor denied within WAIT_TIMEOUT."""


def next_deadline(
    cert: x509.Certificate, now: datetime.datetime, jitter: float, forced_after: float | None
) -> datetime.datetime:
    """When to rotate `cert`: at once once it has expired, else the jittered deadline (or the test knob's)."""
    if now >= cert.not_valid_after_utc:
        return now
    if forced_after is not None:
        return now + datetime.timedelta(seconds=forced_after)
    return rotation_deadline(cert.not_valid_before_utc, cert.not_valid_after_utc, jitter)


def next_retry_delay(delay: float) -> float:
    """The wait after the next failure, given the wait after this one."""
    return min(delay * 2, RETRY_CAP)


def forced_rotation_seconds(environ: dict[str, str] | None = None) -> float | None:
    """The test knob's value; None when unset or not a positive number."""
    text = (environ if environ is not None else dict(os.environ)).get(ROTATION_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


@dataclass
class ClientCertificateManager:
    client: KubeClient
    cert_dir: Path
    node_name: str
    bootstrap_kubeconfig: Path | None = None
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    jitter: Callable[[], float] = random.random
    forced_after: float | None = None
    current: x509.Certificate | None = None
    rotations: int = 0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    wait_timeout: float = WAIT_TIMEOUT

    @property
    def store(self) -> CertificateStore:
        return CertificateStore(self.cert_dir, PAIR_PREFIX)

    def load_current(self) -> x509.Certificate | None:
        """The store's pair, else the certificate the client authenticates with; None for a token client."""
        pair = self.store.current()
        if pair is not None:
            self.current = pair.certificate
            if self.current.not_valid_before_utc <= self.now() < self.current.not_valid_after_utc:
                # As upstream's store: its current pair wins over the kubeconfig's files once rotation made one.
                self.client.reload_client_certificate(pair.path)
        elif self.client.credentials.client_cert_pem is not None:
            self.current = x509.load_pem_x509_certificate(self.client.credentials.client_cert_pem)
        return self.current

    async def run(self) -> None:
        """Until cancelled: renew the client certificate at each deadline, retrying failures with a capped backoff."""
        if self.current is None and self.load_current() is None:
            log.info("client certificate rotation off: the kubeconfig has no client certificate")
            return
        while True:
            assert self.current is not None
            deadline = next_deadline(self.current, self.now(), self.jitter(), self.forced_after)
            wait = (deadline - self.now()).total_seconds()
            if wait > 0:
                log.info("client certificate rotation scheduled deadline=%s", deadline.isoformat())
                await self.sleep(wait)
            await self._rotate_until_issued()

    async def _rotate_until_issued(self) -> None:
        """As upstream: once the deadline has passed, retry until a certificate is issued; no new jittered deadline
        in between (it could put the retry as far as 20% of the certificate's life later)."""
        delay = BACKOFF_START
        while True:
            try:
                await self.rotate()
                return
            except (
                ApiError,
                ApiUnavailable,
                CertificateDenied,
                CertificateNotIssued,
                KubeconfigError,
                OSError,
                ValueError,
            ) as exc:
                log.warning("client certificate rotation failed error=%s retry_in=%.0fs", exc, delay)
                await self.sleep(delay)
                delay = next_retry_delay(delay)

    async def rotate(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        expired = self.current is not None and self.now() >= self.current.not_valid_after_utc
        try:
            async with asyncio.timeout(self.wait_timeout):
                if expired and self.bootstrap_kubeconfig is not None:
                    # The node's own certificate no longer authenticates: ask with the bootstrap credential.
                    log.info("client certificate expired, requesting with the bootstrap kubeconfig")
                    async with KubeClient(load_kubeconfig(self.bootstrap_kubeconfig)) as bootstrap:
                        cert_pem = await request_certificate(bootstrap, key, self.node_name)
                else:
                    cert_pem = await request_certificate(self.client, key, self.node_name)
        except TimeoutError as exc:
            raise CertificateNotIssued(
                f"certificate request was not signed within {self.wait_timeout:.0f}s: timed out waiting for the "
                "condition"
            ) from exc
        path = await asyncio.to_thread(self.store.update, cert_pem, key_pem(key), self.now())
        self.client.reload_client_certificate(path)
        # As upstream: every connection made with the old certificate is closed, so that the next request, a watch's
        # included, handshakes with the new one. A connection kept otherwise would go on with the old certificate,
        # and after an expiry with 401 Unauthorized (the clean-clone CI runs at 866475f and 556e353).
        log.info("client certificate changed, closing connections to use it")
        await self.client.close_connections()
        self.current = x509.load_pem_x509_certificate(cert_pem)
        self.rotations += 1
        log.info(
            "client certificate rotated path=%s serial=%x not_after=%s",
            path,
            self.current.serial_number,
            self.current.not_valid_after_utc.isoformat(),
        )
