"""Client certificate rotation's decisions: the jittered deadline, an expired certificate, the test knob."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509

from nodeagent.certificate import rotation
from tests.unit.certificate.certs import T0, ca, client_pair

DAY = datetime.timedelta(days=1)
AUTHORITY = ca()


@pytest.mark.parametrize(
    ("life", "jitter", "after"),
    [
        (100 * DAY, 0.0, 70 * DAY),
        (100 * DAY, 0.5, 80 * DAY),
        (100 * DAY, 0.999999, 90 * DAY),
        (365 * DAY, 0.25, 365 * DAY * 0.75),
        # A 10-minute certificate (the signer's shortest expirationSeconds): 7 to 9 minutes.
        (datetime.timedelta(minutes=10), 0.0, datetime.timedelta(minutes=7)),
        (datetime.timedelta(minutes=10), 0.999999, datetime.timedelta(minutes=9)),
    ],
)
def test_rotation_deadline_is_70_to_90_percent(
    life: datetime.timedelta, jitter: float, after: datetime.timedelta
) -> None:
    deadline = rotation.rotation_deadline(T0, T0 + life, jitter)
    assert abs((deadline - T0) - after) <= life * 1e-6


def _cert(not_before: datetime.datetime, not_after: datetime.datetime) -> x509.Certificate:
    return x509.load_pem_x509_certificate(client_pair(AUTHORITY, "n1", not_before, not_after)[0])


@pytest.mark.parametrize(
    ("now", "jitter", "forced", "expected"),
    [
        (T0, 0.5, None, T0 + 80 * DAY),  # the jittered deadline, from notBefore
        (T0 + 85 * DAY, 0.5, None, T0 + 80 * DAY),  # already past: the caller rotates at once
        (T0 + 100 * DAY, 0.5, None, T0 + 100 * DAY),  # expired: now
        (T0 + 200 * DAY, 0.0, None, T0 + 200 * DAY),
        (T0 + DAY, 0.5, 30.0, T0 + DAY + datetime.timedelta(seconds=30)),  # the test knob: N s from now
        (T0 + 100 * DAY, 0.5, 30.0, T0 + 100 * DAY),  # expiry wins over the knob
    ],
)
def test_next_deadline(
    now: datetime.datetime, jitter: float, forced: float | None, expected: datetime.datetime
) -> None:
    cert = _cert(T0, T0 + 100 * DAY)
    assert rotation.next_deadline(cert, now, jitter, forced) == expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({rotation.ROTATION_ENV: ""}, None),
        ({rotation.ROTATION_ENV: "abc"}, None),
        ({rotation.ROTATION_ENV: "0"}, None),
        ({rotation.ROTATION_ENV: "-5"}, None),
        ({rotation.ROTATION_ENV: "20"}, 20.0),
        ({rotation.ROTATION_ENV: "2.5"}, 2.5),
    ],
)
def test_forced_rotation_seconds(environ: dict[str, str], expected: float | None) -> None:
    assert rotation.forced_rotation_seconds(environ) == expected
