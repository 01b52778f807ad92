"""Rotation under a short --cluster-signing-duration, and its retries while the apiserver is away.

The csrsigning controller backdates notBefore by 5 minutes and, for a certificate shorter than 8 hours, does not
backdate notAfter (pkg/controller/certificates/authority PermissiveSigningPolicy): a duration of d gives a life of
d + 5 min, and the 70-90% deadline counts from notBefore, so it falls well before 70% of d after the issuance.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509

from nodeagent.certificate import bootstrap, rotation
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiUnavailable
from tests.unit.certificate.certs import T0, ca, client_pair

BACKDATE = datetime.timedelta(minutes=5)
S = datetime.timedelta(seconds=1)
AUTHORITY = ca()


def _signed(issued: datetime.datetime, duration: datetime.timedelta) -> x509.Certificate:
    """A certificate as the csrsigning controller issues a short one at `issued`."""
    pem = client_pair(AUTHORITY, "n1", issued - BACKDATE, issued + duration)[0]
    return x509.load_pem_x509_certificate(pem)


@pytest.mark.parametrize(
    ("duration", "jitter", "after_issuance"),
    [
        # 150 s (the integration test's): life 450 s, deadline 315-405 s after notBefore = 15-105 s after issuance.
        (150 * S, 0.0, 15 * S),
        (150 * S, 0.5, 60 * S),
        (150 * S, 0.999999, 105 * S),
        # 1 h: life 65 min, 45.5-58.5 min after notBefore.
        (datetime.timedelta(hours=1), 0.0, datetime.timedelta(minutes=40, seconds=30)),
        (datetime.timedelta(hours=1), 0.999999, datetime.timedelta(minutes=53, seconds=30)),
        # 2 min: life 420 s, and 70% of it (294 s) is before the issuance: the deadline has passed at once.
        (120 * S, 0.0, -6 * S),
    ],
)
def test_deadline_after_a_short_signing_duration(
    duration: datetime.timedelta, jitter: float, after_issuance: datetime.timedelta
) -> None:
    cert = _signed(T0, duration)
    deadline = rotation.next_deadline(cert, T0, jitter, None)
    if after_issuance <= datetime.timedelta(0):
        # A deadline in the past is not clamped by next_deadline: the manager's loop rotates at once.
        assert deadline <= T0
    assert abs((deadline - T0) - after_issuance) < S


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (T0 + 149 * S, T0 + 60 * S),  # not expired yet: the (past) deadline, so a rotation now
        (T0 + 150 * S, T0 + 150 * S),  # expired at notAfter: now
        (T0 + 600 * S, T0 + 600 * S),  # the apiserver was away long after the expiry: still now
    ],
)
def test_an_expired_short_certificate_is_due_now(now: datetime.datetime, expected: datetime.datetime) -> None:
    assert rotation.next_deadline(_signed(T0, 150 * S), now, 0.5, None) == expected


def test_retry_delays_as_upstream_certificate_manager() -> None:
    """2, 4, 8, 16 s (ExponentialBackoff, 5 steps), then every 32 s (PollInfinite(32s)), never longer."""
    delays = [bootstrap.BACKOFF_START]
    for _ in range(8):
        delays.append(rotation.next_retry_delay(delays[-1]))
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 32.0, 32.0, 32.0, 32.0]


class _FlakyManager(rotation.ClientCertificateManager):
    """rotate() fails `failures` times (the apiserver away), then installs `renewed`; the run ends at the next wait
    after that."""

    failures: int = 0
    renewed: x509.Certificate | None = None
    attempts: int = 0

    async def rotate(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ApiUnavailable("POST /apis/certificates.k8s.io/v1/certificatesigningrequests: ConnectError")
        self.current = self.renewed
        self.rotations += 1


class _Stop(Exception):
    pass


async def test_retries_after_the_deadline_never_draw_a_new_deadline() -> None:
    """A failed rotation is retried after 2, 4, 8 ... s, not at a newly jittered 70-90% deadline (which for a year
    could be months later); the jitter is drawn once per certificate."""
    clock = [T0]
    waits: list[float] = []
    draws: list[float] = []
    first = _signed(T0, 150 * S)  # life 450 s from T0 - 5 min; jitter 0 -> deadline T0 + 15 s

    def jitter() -> float:
        # The first certificate's deadline at 70%; any later draw at 90% (a re-drawn deadline shows in the waits).
        draws.append(0.0 if not draws else 0.999999)
        return draws[-1]

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(draws) > 1:  # the renewed certificate's deadline is being waited for: done
            raise _Stop
        clock[0] += datetime.timedelta(seconds=seconds)

    manager = _FlakyManager(
        client=cast(KubeClient, object()),
        cert_dir=Path("/nonexistent"),
        node_name="n1",
        now=lambda: clock[0],
        jitter=jitter,
        current=first,
        sleep=sleep,
    )
    manager.failures = 5
    manager.renewed = _signed(T0 + 77 * S, 150 * S)  # issued when the sixth attempt goes out
    with pytest.raises(_Stop):
        await manager.run()
    assert waits[:6] == [15.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert manager.attempts == 6 and manager.rotations == 1
    assert len(draws) == 2  # one deadline per certificate, none per failure
    assert waits[6] == pytest.approx(105.0)  # the renewed certificate's own deadline (90%), 105 s after its issuance


async def test_a_request_nobody_signs_is_given_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As upstream's certificateWaitTimeout: the wait on one request ends with an error run() retries on."""
    requests: list[str] = []

    async def never_signed(client: object, key: object, node_name: str) -> bytes:
        requests.append(node_name)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(rotation, "request_certificate", never_signed)
    manager = rotation.ClientCertificateManager(
        client=cast(KubeClient, object()),
        cert_dir=tmp_path,
        node_name="n1",
        now=lambda: T0,
        current=_signed(T0, 150 * S),
        wait_timeout=0.01,
    )
    with pytest.raises(rotation.CertificateNotIssued, match="not signed within 0s"):
        await manager.rotate()
    assert requests == ["n1"] and manager.rotations == 0
    assert manager.current is not None and manager.current.not_valid_after_utc == T0 + 150 * S  # kept
