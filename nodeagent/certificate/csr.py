"""What every certificate the agent requests shares (upstream k8s.io/client-go/util/certificate): the
CertificateSigningRequest object, reading its verdict, and the rotation deadline. The client certificate
(bootstrap.py, rotation.py) and the serving certificate (serving.py) differ only in signer, usages and names."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from typing import Any

CSRS_GROUP = "certificates.k8s.io"


class CertificateDenied(RuntimeError):
    """The request was denied or failed; the message carries the condition's reason and message, as upstream's."""


def csr_body(signer: str, usages: Sequence[str], request_pem: bytes, *, name: str | None = None) -> dict[str, Any]:
    """The CertificateSigningRequest: named (a restart finds its own request) or with a generated name."""
    metadata: dict[str, str] = {"name": name} if name else {"generateName": "csr-"}
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": metadata,
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": signer,
            "usages": list(usages),
        },
    }


def issued(csr: dict[str, Any]) -> bytes | None:
    """The issued PEM certificate, None while pending; CertificateDenied for Denied or Failed, in upstream's words."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("status", "True") != "True":
            continue
        kind = condition.get("type")
        if kind in ("Denied", "Failed"):
            verb = "is denied" if kind == "Denied" else "failed"
            raise CertificateDenied(
                f"certificate signing request {verb}, reason: {condition.get('reason', '')}, "
                f"message: {condition.get('message', '')}"
            )
    encoded = status.get("certificate")
    return base64.b64decode(encoded) if encoded else None


def rotation_deadline(not_before: datetime.datetime, not_after: datetime.datetime, jitter: float) -> datetime.datetime:
    """Upstream nextRotationDeadline: not_before + life * (0.7 + 0.2 * jitter), jitter in [0, 1)."""
    return not_before + (not_after - not_before) * (0.7 + 0.2 * jitter)
