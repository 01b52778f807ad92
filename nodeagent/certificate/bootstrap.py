"""TLS bootstrap of the node's client credential, as upstream's LoadClientCert (pkg/kubelet/certificate/bootstrap):

- when `--kubeconfig` exists and its client certificate is valid now (or it authenticates without one), it is used
  as it is: no request is made;
- otherwise the bootstrap kubeconfig (a bootstrap token, usually) is used to send a CertificateSigningRequest for the
  `kubernetes.io/kube-apiserver-client-kubelet` signer: CN `system:node:<name>`, O `system:nodes`, usages digital
  signature and client auth (key encipherment too for an RSA key, never here: the key is ECDSA P-256, as upstream's);
- the key waits in `<certDir>/kubelet-client.key.tmp` until the certificate is issued, so a restart mid-way reuses it,
  and the request's name is a digest of the key, subject and usages (upstream's digestedName), so that restart finds
  its own pending request instead of sending another;
- the controller-manager's csrapproving controller approves it when RBAC lets the requester (kubeadm binds
  system:bootstrappers to `certificatesigningrequests:nodeclient`), csrsigning issues it;
- the pair goes into the store (`kubelet-client-<date>.pem` and the `kubelet-client-current.pem` symlink), the
  temporary key is removed, and `--kubeconfig` is written: the bootstrap kubeconfig's cluster, and a user whose
  certificate and key are both `kubelet-client-current.pem`, so rotation only has to move the symlink.

Upstream exits when the request fails and lets systemd restart it; nodeagent retries in place with a capped backoff,
and a denied request is logged with its reason and retried with a new key (the denied name cannot be reused).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.certificate.csr import CertificateDenied, csr_body, issued
from nodeagent.certificate.store import CertificateStore, valid_at
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, ApiUnavailable, KubeconfigError, Unauthorized
from nodeagent.kube.kubeconfig import ClusterCredentials, load_kubeconfig

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
PAIR_PREFIX = "kubelet-client"
TMP_KEY = "kubelet-client.key.tmp"
USAGES: tuple[str, ...] = ("digital signature", "client auth")
POLL_SECONDS = 1.0
BACKOFF_START = 2.0
BACKOFF_CAP = 60.0

CSRS = paths.api_path("certificatesigningrequests", group="certificates.k8s.io")


class BootstrapError(RuntimeError):
    """The bootstrap kubeconfig cannot be used, or the kubeconfig cannot be written."""


Now = Callable[[], datetime.datetime]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def client_config_still_valid(kubeconfig: Path, now: datetime.datetime) -> bool:
    """As upstream's isClientConfigStillValid: the kubeconfig loads and every certificate in its client certificate
    is valid now. A kubeconfig without a client certificate (a token) stays in use."""
    if not kubeconfig.exists():
        return False
    try:
        credentials = load_kubeconfig(kubeconfig)
    except KubeconfigError as exc:
        log.info("unable to read existing bootstrap client config path=%s error=%s", kubeconfig, exc)
        return False
    if credentials.client_cert_pem is None:
        return True
    try:
        certs = x509.load_pem_x509_certificates(credentials.client_cert_pem)
    except ValueError as exc:
        log.info("unable to read existing client certificate path=%s error=%s", kubeconfig, exc)
        return False
    for cert in certs:
        if not valid_at(cert, now):
            log.info(
                "part of the existing bootstrap client certificate is expired path=%s not_after=%s",
                kubeconfig,
                cert.not_valid_after_utc.isoformat(),
            )
            return False
    return bool(certs)


def node_subject(node_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )


def digested_name(public_key: ec.EllipticCurvePublicKey, node_name: str, usages: Sequence[str] = USAGES) -> str:
    """`node-csr-<digest>` of the key, subject and usages (upstream's digestedName: SHA-512/256 over each part
    base64url-encoded and '|'-terminated, so two inputs cannot run together)."""
    digest = hashlib.new("sha512_256")

    def write(data: bytes) -> None:
        digest.update(base64.urlsafe_b64encode(data).rstrip(b"="))
        digest.update(b"|")

    write(public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    write(f"system:node:{node_name}".encode())
    write(b"system:nodes")
    for usage in usages:
        write(usage.encode())
    return "node-csr-" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def build_request(key: ec.EllipticCurvePrivateKey, node_name: str) -> bytes:
    """The PEM request: the node's identity, no SANs (a client certificate)."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(node_subject(node_name))
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_object(name: str, request_pem: bytes) -> dict[str, Any]:
    return csr_body(SIGNER, USAGES, request_pem, name=name)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The key as "EC PRIVATE KEY" PEM, as upstream's keyutil writes an ECDSA key."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def load_or_generate_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The key in `path`, or a new one written there (0600) first, as upstream's LoadOrGenerateKeyFile."""
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError):
        loaded = None
    if isinstance(loaded, ec.EllipticCurvePrivateKey):
        return loaded
    key = ec.generate_private_key(ec.SECP256R1())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_pem(key))
    return key


def kubeconfig_document(cluster: ClusterCredentials, pair_path: Path) -> dict[str, Any]:
    """upstream's writeKubeconfigFromBootstrapping: the bootstrap cluster, and `pair_path` as certificate and key."""
    entry: dict[str, Any] = {"server": cluster.server}
    if cluster.ca_pem is not None:
        entry["certificate-authority-data"] = base64.b64encode(cluster.ca_pem).decode()
    if cluster.insecure_skip_tls_verify:
        entry["insecure-skip-tls-verify"] = True
    if cluster.tls_server_name:
        entry["tls-server-name"] = cluster.tls_server_name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": entry}],
        "users": [
            {"name": "default-auth", "user": {"client-certificate": str(pair_path), "client-key": str(pair_path)}}
        ],
        "contexts": [
            {
                "name": "default-context",
                "context": {"cluster": "default-cluster", "user": "default-auth", "namespace": "default"},
            }
        ],
        "current-context": "default-context",
    }


def write_kubeconfig(path: Path, cluster: ClusterCredentials, pair_path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(kubeconfig_document(cluster, pair_path), out, sort_keys=False)
    tmp.replace(path)


async def request_certificate(
    client: KubeClient, key: ec.EllipticCurvePrivateKey, node_name: str, *, poll: float = POLL_SECONDS
) -> bytes:
    """Send (or find again) the CSR of `key` and wait until it is issued; the PEM certificate.

    Polls the one object: the bootstrap identity may get and watch CSRs (system:node-bootstrapper), and a get a
    second suffices for an approval that takes the controller-manager a moment.
    """
    name = digested_name(key.public_key(), node_name)
    request = build_request(key, node_name)
    try:
        await client.create(CSRS, csr_object(name, request))
        log.info("client certificate requested csr=%s signer=%s", name, SIGNER)
    except AlreadyExists:
        # A restart with the same temporary key: the request is ours (the name digests the key), keep waiting on it.
        log.info("client certificate request exists csr=%s signer=%s", name, SIGNER)
    while True:
        csr = await client.get(f"{CSRS}/{name}")
        cert_pem = issued(csr)
        if cert_pem is not None:
            log.info("client certificate issued csr=%s", name)
            return cert_pem
        await asyncio.sleep(poll)


async def load_client_cert(
    kubeconfig: Path,
    bootstrap_kubeconfig: Path,
    cert_dir: Path,
    node_name: str,
    *,
    now: Now = _utcnow,
    poll: float = POLL_SECONDS,
    backoff_cap: float = BACKOFF_CAP,
) -> bool:
    """Make `kubeconfig` usable; True when a certificate was requested, False when the existing one was kept."""
    if client_config_still_valid(kubeconfig, now()):
        log.info("kubeconfig exists and is valid, skipping bootstrap path=%s", kubeconfig)
        return False
    log.info("using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file path=%s", kubeconfig)
    try:
        bootstrap = load_kubeconfig(bootstrap_kubeconfig)
    except KubeconfigError as exc:
        raise BootstrapError(f"unable to load bootstrap kubeconfig: {exc}") from exc
    store = CertificateStore(cert_dir, PAIR_PREFIX)
    tmp_key = cert_dir / TMP_KEY
    delay = BACKOFF_START
    async with KubeClient(bootstrap) as client:
        while True:
            key = await asyncio.to_thread(load_or_generate_key, tmp_key)
            try:
                cert_pem = await request_certificate(client, key, node_name, poll=poll)
                break
            except CertificateDenied as exc:
                # The digested name of a denied request stays denied: a new key makes a new request.
                tmp_key.unlink(missing_ok=True)
                log.warning("client certificate request denied error=%s retry_in=%.0fs", exc, delay)
            except Unauthorized as exc:
                # What an expired or deleted bootstrap token looks like from here: say so, the 401 alone does not.
                log.warning(
                    "client certificate request refused: the bootstrap kubeconfig's credential is not accepted "
                    "(an expired or unknown bootstrap token?) path=%s error=%s retry_in=%.0fs",
                    bootstrap_kubeconfig,
                    exc,
                    delay,
                )
            except (ApiError, ApiUnavailable) as exc:
                log.warning("client certificate request failed error=%s retry_in=%.0fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff_cap)
    try:
        pair = await asyncio.to_thread(store.update, cert_pem, key_pem(key), now())
        tmp_key.unlink(missing_ok=True)
        await asyncio.to_thread(write_kubeconfig, kubeconfig, bootstrap, pair)
    except OSError as exc:
        raise BootstrapError(f"unable to write the client certificate or kubeconfig {kubeconfig}: {exc}") from exc
    log.info("client certificate bootstrapped path=%s kubeconfig=%s", pair, kubeconfig)
    return True
