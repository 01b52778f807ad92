"""The kube client's exception tree, and the one place where apiserver answers become exceptions.

    KubeError
    ├── KubeconfigError        the kubeconfig cannot be used (missing context, cluster, user, file, bad data)
    ├── ApiUnavailable         no intelligible answer: connect/TLS/read failure, timeout, malformed body or stream
    └── ApiError               the apiserver answered with a failure Status
        ├── Unauthorized       401
        ├── Forbidden          403
        ├── NotFound           404
        ├── Conflict           409 (optimistic-concurrency conflict)
        │   └── AlreadyExists  409 with reason AlreadyExists (create of an existing name)
        ├── Gone               410, or a watch ERROR event with code 410 (reason Expired): relist
        ├── Invalid            422
        ├── TooManyRequests    429 (retry_after from the Status details or the Retry-After header)
        └── ServerError        5xx

The class follows the HTTP code, as client-go's `apierrors.IsNotFound` and friends do; the Status `reason` refines
409 into AlreadyExists and stands in for the code only when a Status carries none.
"""

from __future__ import annotations

import http
import json
from typing import Any

_MAX_TEXT = 512


class KubeError(Exception):
    """Base of every error the kube client raises."""


class KubeconfigError(KubeError):
    """The kubeconfig file cannot be turned into credentials."""


class ApiUnavailable(KubeError):
    """The apiserver could not be reached or gave no intelligible answer. Retrying later may help."""


class ApiError(KubeError):
    """The apiserver answered with a failure Status."""

    def __init__(
        self,
        status_code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status_code} {reason}: {message}")
        self.status_code = status_code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.retry_after = retry_after


class Unauthorized(ApiError):
    """401: the credential was not accepted."""


class Forbidden(ApiError):
    """403: the credential may not do this (RBAC, the Node authorizer, NodeRestriction)."""


class NotFound(ApiError):
    """404: no such object (or no such resource)."""


class Conflict(ApiError):
    """409: the object changed since it was read (resourceVersion or UID precondition), or it already exists."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create of a name that is taken."""


class Gone(ApiError):
    """410: the resourceVersion (or continue token) is too old; the caller must list again."""


class Invalid(ApiError):
    """422: the object failed validation or admission."""


class TooManyRequests(ApiError):
    """429: throttled by API priority and fairness, or an eviction blocked by a disruption budget."""


class ServerError(ApiError):
    """5xx: the apiserver (or something behind it, e.g. etcd) failed. Retrying later may help."""


_BY_CODE: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}

# Only for a Status without a usable code (seen in watch ERROR events from some aggregated servers).
_BY_REASON: dict[str, type[ApiError]] = {
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": ServerError,
    "ServiceUnavailable": ServerError,
    "Timeout": ServerError,
}


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _error_class(code: int, reason: str) -> type[ApiError]:
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists
    if code in _BY_CODE:
        return _BY_CODE[code]
    if 500 <= code <= 599:
        return ServerError
    if code == 0:
        return _BY_REASON.get(reason, ApiError)
    return ApiError


def _float_or_none(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def error_from_status(status: dict[str, Any], *, status_code: int = 0, retry_after: str | None = None) -> ApiError:
    """The exception for an apiserver Status object (a response body, or the object of a watch ERROR event).

    `status_code` is the HTTP code when the Status came as a response; the Status's own `code` wins when present,
    as it does in client-go.
    """
    raw_code = status.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) and raw_code > 0 else status_code
    reason = status.get("reason")
    reason = reason if isinstance(reason, str) and reason else _phrase(code)
    message = status.get("message")
    message = message if isinstance(message, str) else ""
    details = status.get("details")
    details = details if isinstance(details, dict) else None
    after = _float_or_none(details.get("retryAfterSeconds")) if details else None
    if after is None and retry_after is not None:
        after = _float_or_none(retry_after)
    return _error_class(code, reason)(code, reason, message, details=details, retry_after=after)


def error_from_response(status_code: int, body: bytes, *, retry_after: str | None = None) -> ApiError:
    """The exception for a failed HTTP response: its Status body when it has one, else its text."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        return error_from_status(parsed, status_code=status_code, retry_after=retry_after)
    # Not a Status: a proxy's page, the mux's "404 page not found", an empty body.
    text = body.decode("utf-8", "replace").strip()
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + "..."
    return error_from_status(
        {"message": text or _phrase(status_code)}, status_code=status_code, retry_after=retry_after
    )
