"""Certificate pairs on disk as client-go's certificate FileStore keeps them (k8s.io/client-go/util/certificate).

Each issued pair is one file, `<prefix>-YYYY-MM-DD-HH-MM-SS.pem` (the certificate, then its key; mode 0600), and
`<prefix>-current.pem` is a symlink to the newest, replaced atomically (a new link renamed over the old), so a reader
never sees a half-written pair and kubeconfigs that name `-current.pem` always reach the live one. Older dated files
stay, as upstream leaves them.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

# Upstream's time layout for the dated file: "2006-01-02-15-04-05".
_STAMP = "%Y-%m-%d-%H-%M-%S"


@dataclass(frozen=True)
class StoredPair:
    """A pair read from the store: the leaf certificate and the file's PEM (certificate and key)."""

    path: Path
    certificate: x509.Certificate
    pem: bytes


def valid_at(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


@dataclass(frozen=True)
class CertificateStore:
    cert_dir: Path
    prefix: str  # "kubelet-client", "kubelet-server"

    @property
    def current_path(self) -> Path:
        return self.cert_dir / f"{self.prefix}-current.pem"

    def current(self) -> StoredPair | None:
        """The pair `-current.pem` points at, if it holds a certificate and a key; None otherwise (never raises for
        a missing or unreadable file: the caller then requests a new one)."""
        path = self.current_path
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
        return StoredPair(path, cert, data)

    def update(self, cert_pem: bytes, key_pem: bytes, now: datetime.datetime) -> Path:
        """Write the dated pair (0600) and point `-current.pem` at it; returns the `-current.pem` path."""
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        dated = self.cert_dir / f"{self.prefix}-{now.strftime(_STAMP)}.pem"
        body = cert_pem if cert_pem.endswith(b"\n") else cert_pem + b"\n"
        fd = os.open(dated, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(body + key_pem)
        # As upstream's updateSymlink: a new link under a temporary name, renamed over the current one.
        updated = self.cert_dir / f"{self.prefix}-updated.pem"
        updated.unlink(missing_ok=True)
        updated.symlink_to(dated)
        updated.replace(self.current_path)
        return self.current_path
