"""Who may call the kubelet API, decided as the kubelet does (pkg/kubelet/server/auth.go, kubelet/app/auth.go).

Authentication, in upstream's order: a client certificate verified against `authentication.x509.clientCAFile` (the
TLS layer verifies it; the user is its CN, the groups its Os); else a bearer token checked with a TokenReview when
`authentication.webhook.enabled` (answers cached for `cacheTTL`); else `system:anonymous` in
`system:unauthenticated` if anonymous access is enabled; else 401.

Authorization: `mode: AlwaysAllow`, or `Webhook`, a SubjectAccessReview for the node with a verb from the HTTP method
and a subresource from the path (allowed answers cached for `cacheAuthorizedTTL`, denials for
`cacheUnauthorizedTTL`). With fine-grained authorization (KubeletFineGrainedAuthz, on by default since v1.33), /pods,
/runningpods, /healthz and /configz are checked as nodes/pods, nodes/healthz, nodes/configz first and then as
nodes/proxy; /stats, /metrics, /logs, /checkpoint, /statusz and /flagz only as nodes/stats, nodes/metrics, nodes/log,
nodes/checkpoint, nodes/statusz and nodes/configz; everything else as nodes/proxy. The verb is upstream's: POST
create, GET get, PUT update, PATCH patch, DELETE delete, and empty for any other method (HEAD included). A denial is
403 with upstream's text.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"

# As upstream: any other method (HEAD, OPTIONS, a lower-case "get") is authorized with an empty verb.
_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

# (path prefix, fine-grained subresource, falls back to nodes/proxy)
_FINE_GRAINED: tuple[tuple[str, str, bool], ...] = (
    ("/stats", "stats", False),
    ("/metrics", "metrics", False),
    ("/logs", "log", False),
    ("/pods", "pods", True),
    ("/runningpods", "pods", True),
    ("/healthz", "healthz", True),
    ("/configz", "configz", True),
    ("/checkpoint", "checkpoint", False),
    ("/statusz", "statusz", False),
    ("/flagz", "configz", False),
)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Attributes:
    user: User
    verb: str
    node_name: str
    subresource: str
    path: str


def _is_subpath(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def request_attributes(user: User, method: str, path: str, node_name: str) -> list[Attributes]:
    """The attributes to authorize, in order; any one allowed admits the request (upstream
    GetRequestAttributes with fine-grained authorization)."""
    verb = _VERBS.get(method, "")
    for prefix, subresource, fallback in _FINE_GRAINED:
        if _is_subpath(path, prefix):
            attrs = [Attributes(user, verb, node_name, subresource, path)]
            if fallback:
                attrs.append(Attributes(user, verb, node_name, "proxy", path))
            return attrs
    return [Attributes(user, verb, node_name, "proxy", path)]


def forbidden_message(attrs: Sequence[Attributes]) -> str:
    """Upstream's text, the subresources as Go prints a []string."""
    first = attrs[0]
    subresources = " ".join(a.subresource for a in attrs)
    return f"Forbidden (user={first.user.name}, verb={first.verb}, resource=nodes, subresource(s)=[{subresources}])\n"


def user_from_certificate(cert: Mapping[str, Any] | None) -> User | None:
    """The user of a verified client certificate (as decoded by Python's ssl: subject as RDN tuples)."""
    if not cert:
        return None
    name = ""
    groups: list[str] = []
    for rdn in cert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName" and not name:
                name = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    if not name:
        return None
    return User(name=name, groups=(*groups, AUTHENTICATED))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


# (token) -> the TokenReview's status, or raises on an API error
TokenReviewer = Callable[[str], Awaitable[Mapping[str, Any]]]
# (SubjectAccessReview spec) -> its status (allowed, denied, reason), or raises on an API error
AccessReviewer = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


class AuthError(RuntimeError):
    """The apiserver could not answer a review: upstream answers 401 (authn) or 500 (authz)."""


@dataclass
class _Cached:
    value: Any
    expires: float


class TTLCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic, max_entries: int = 4096) -> None:
        self._clock = clock
        self._entries: dict[str, _Cached] = {}
        self._max = max_entries

    def get(self, key: str) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._entries[key]
            return None
        return entry.value

    def put(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._entries) >= self._max:
            now = self._clock()
            self._entries = {k: v for k, v in self._entries.items() if v.expires > now}
            if len(self._entries) >= self._max:
                self._entries.clear()
        self._entries[key] = _Cached(value, self._clock() + ttl)


@dataclass
class Authenticator:
    token_review: TokenReviewer | None = None  # None: webhook authentication off
    cache_ttl: float = 120.0
    anonymous: bool = False
    cache: TTLCache = field(default_factory=TTLCache)

    async def authenticate(self, cert: Mapping[str, Any] | None, authorization: str | None) -> User | None:
        user = user_from_certificate(cert)
        if user is not None:
            return user
        token = bearer_token(authorization)
        if token is not None and self.token_review is not None:
            key = hashlib.sha256(token.encode()).hexdigest()
            cached = self.cache.get(key)
            if cached is not None:
                return cached if isinstance(cached, User) else None
            try:
                status = await self.token_review(token)
            except Exception as exc:
                raise AuthError(f"token review failed: {exc}") from exc
            reviewed = _user_from_review(status)
            self.cache.put(key, reviewed if reviewed is not None else False, self.cache_ttl)
            if reviewed is not None:
                return reviewed
            return None
        if self.anonymous:
            return User(name=ANONYMOUS, groups=(UNAUTHENTICATED,))
        return None


def _user_from_review(status: Mapping[str, Any]) -> User | None:
    if not status.get("authenticated"):
        return None
    info = status.get("user") or {}
    extra = {str(k): tuple(str(x) for x in v or ()) for k, v in (info.get("extra") or {}).items()}
    return User(
        name=str(info.get("username", "")),
        groups=tuple(str(g) for g in info.get("groups") or ()),
        uid=str(info.get("uid", "")),
        extra=extra,
    )


def access_review_spec(attrs: Attributes) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": attrs.user.name,
        "groups": list(attrs.user.groups),
        "resourceAttributes": {
            "verb": attrs.verb,
            "version": "v1",
            "resource": "nodes",
            "subresource": attrs.subresource,
            "name": attrs.node_name,
        },
    }
    if attrs.user.uid:
        spec["uid"] = attrs.user.uid
    if attrs.user.extra:
        spec["extra"] = {k: list(v) for k, v in attrs.user.extra.items()}
    return spec


@dataclass
class Authorizer:
    access_review: AccessReviewer | None = None  # None: AlwaysAllow
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    cache: TTLCache = field(default_factory=TTLCache)

    async def allowed(self, attrs: Attributes) -> bool:
        if self.access_review is None:
            return True
        spec = access_review_spec(attrs)
        key = hashlib.sha256(repr(sorted(_flatten(spec))).encode()).hexdigest()
        cached = self.cache.get(key)
        if cached is not None:
            return bool(cached)
        try:
            status = await self.access_review(spec)
        except Exception as exc:
            raise AuthError(f"subject access review failed: {exc}") from exc
        allowed = bool(status.get("allowed")) and not status.get("denied")
        self.cache.put(key, allowed, self.authorized_ttl if allowed else self.unauthorized_ttl)
        return allowed


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out.extend(_flatten(v, f"{prefix}.{k}"))
        return out
    if isinstance(value, list | tuple):
        return [(prefix, repr(list(value)))]
    return [(prefix, repr(value))]
