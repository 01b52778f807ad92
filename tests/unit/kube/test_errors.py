"""Every failure answer maps to the most specific error class, with the Status's reason and message."""

from __future__ import annotations

import json

import pytest

from nodeagent.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_from_response,
    error_from_status,
)


def _status(code: int, reason: str, message: str, **extra: object) -> bytes:
    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    doc.update(message=message, **extra)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("status_code", "body", "cls", "reason", "message"),
    [
        (401, _status(401, "Unauthorized", "Unauthorized"), Unauthorized, "Unauthorized", "Unauthorized"),
        (403, _status(403, "Forbidden", 'nodes "x" is forbidden'), Forbidden, "Forbidden", 'nodes "x" is forbidden'),
        (404, _status(404, "NotFound", 'pods "p" not found'), NotFound, "NotFound", 'pods "p" not found'),
        (
            409,
            _status(409, "Conflict", "the object has been modified"),
            Conflict,
            "Conflict",
            "the object has been modified",
        ),
        (
            409,
            _status(409, "AlreadyExists", 'pods "p" already exists'),
            AlreadyExists,
            "AlreadyExists",
            'pods "p" already exists',
        ),
        (
            410,
            _status(410, "Expired", "too old resource version: 1 (5)"),
            Gone,
            "Expired",
            "too old resource version: 1 (5)",
        ),
        (410, _status(410, "Gone", "continue parameter is too old"), Gone, "Gone", "continue parameter is too old"),
        (422, _status(422, "Invalid", 'Pod "p" is invalid'), Invalid, "Invalid", 'Pod "p" is invalid'),
        (
            429,
            _status(429, "TooManyRequests", "too many requests"),
            TooManyRequests,
            "TooManyRequests",
            "too many requests",
        ),
        (500, _status(500, "InternalError", "etcd down"), ServerError, "InternalError", "etcd down"),
        (503, _status(503, "ServiceUnavailable", "shutting down"), ServerError, "ServiceUnavailable", "shutting down"),
        (504, _status(504, "Timeout", "request timed out"), ServerError, "Timeout", "request timed out"),
        (400, _status(400, "BadRequest", "bad selector"), ApiError, "BadRequest", "bad selector"),
        # Not a Status: the mux's own 404, a proxy's HTML, an empty body.
        (404, b"404 page not found\n", NotFound, "NotFound", "404 page not found"),
        (502, b"<html>Bad Gateway</html>", ServerError, "BadGateway", "<html>Bad Gateway</html>"),
        (503, b"", ServerError, "ServiceUnavailable", "ServiceUnavailable"),
        (400, b"{not json", ApiError, "BadRequest", "{not json"),
        # A JSON body that is not a Status is text too.
        (500, b'{"kind":"Pod"}', ServerError, "InternalServerError", '{"kind":"Pod"}'),
    ],
)
def test_response_maps_to_error_class(
    status_code: int, body: bytes, cls: type[ApiError], reason: str, message: str
) -> None:
    err = error_from_response(status_code, body)
    assert type(err) is cls
    assert (err.status_code, err.reason, err.message) == (status_code, reason, message)
    assert str(err) == f"{status_code} {reason}: {message}"


def test_already_exists_is_a_conflict() -> None:
    assert isinstance(error_from_response(409, _status(409, "AlreadyExists", "x")), Conflict)


def test_long_text_body_is_truncated() -> None:
    err = error_from_response(500, b"x" * 10_000)
    assert len(err.message) < 600
    assert err.message.endswith("...")


@pytest.mark.parametrize(
    ("body", "header", "expected"),
    [
        (_status(429, "TooManyRequests", "slow down", details={"retryAfterSeconds": 3}), None, 3.0),
        (_status(429, "TooManyRequests", "slow down"), "7", 7.0),
        (_status(429, "TooManyRequests", "slow down"), "Wed, 21 Oct 2015 07:28:00 GMT", None),
        (_status(429, "TooManyRequests", "slow down"), None, None),
    ],
)
def test_retry_after_from_details_or_header(body: bytes, header: str | None, expected: float | None) -> None:
    err = error_from_response(429, body, retry_after=header)
    assert isinstance(err, TooManyRequests)
    assert err.retry_after == expected


@pytest.mark.parametrize(
    ("status", "cls", "code"),
    [
        # The object of a watch ERROR event: the Status's code decides.
        ({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}, Gone, 410),
        ({"kind": "Status", "code": 500, "reason": "InternalError", "message": "boom"}, ServerError, 500),
        # Without a code the reason stands in.
        ({"kind": "Status", "reason": "Expired", "message": "too old"}, Gone, 0),
        ({"kind": "Status", "message": "?"}, ApiError, 0),
    ],
)
def test_status_object_maps_by_code_then_reason(status: dict[str, object], cls: type[ApiError], code: int) -> None:
    err = error_from_status(status)
    assert type(err) is cls
    assert err.status_code == code


def test_details_are_kept() -> None:
    details = {"name": "p", "kind": "pods", "causes": [{"field": "spec"}]}
    err = error_from_response(422, _status(422, "Invalid", "bad", details=details))
    assert err.details == details
