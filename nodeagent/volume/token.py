"""Service account tokens for projected volumes (upstream pkg/kubelet/token): TokenRequest
(`POST /api/v1/namespaces/NS/serviceaccounts/SA/token`) with the audience, expirationSeconds and the pod as bound
object, cached per (service account, namespace, audiences, expiration, pod).

A cached token is refreshed once it is older than 80% of its TTL or than 24 h (each less a jitter of up to 10 s),
or when the clock went back before its issue time. A refresh that fails keeps the old token while it is valid
(the error is logged); an expired one fails the set up. The node's credential may only ask for pods bound to it:
the Node authorizer and NodeRestriction check the bound pod.
"""

from __future__ import annotations

import datetime
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.kube.errors import ApiError, KubeError
from nodeagent.volume.errors import SetUpError

log = logging.getLogger(__name__)

MAX_TTL = 24 * 3600.0
MAX_JITTER = 10.0

# (namespace, service account, TokenRequest body) -> the TokenRequest the apiserver answered.
TokenRequester = Callable[[str, str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class TokenKey:
    service_account: str
    namespace: str
    audiences: tuple[str, ...]
    expiration_seconds: int
    pod_name: str
    pod_uid: str


@dataclass(frozen=True)
class Token:
    token: str
    expiration: float  # wall seconds
    expiration_seconds: int


def requires_refresh(token: Token, now: float, jitter: float) -> bool:
    """Upstream requiresRefresh: 80% of the TTL gone, or 24 h since issue, or issued in the future."""
    issued = token.expiration - token.expiration_seconds
    if now > issued + MAX_TTL - jitter:
        return True
    if now > token.expiration - (token.expiration_seconds * 20 // 100) - jitter:
        return True
    return now < issued


def _parse_time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def token_request_body(key: TokenKey) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "expirationSeconds": key.expiration_seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": key.pod_name, "uid": key.pod_uid},
    }
    if key.audiences:
        spec["audiences"] = list(key.audiences)
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


class TokenManager:
    def __init__(
        self,
        request: TokenRequester | None,
        *,
        now: Callable[[], float],
        jitter: Callable[[], float] = lambda: random.random() * MAX_JITTER,
    ) -> None:
        self._request = request
        self._now = now
        self._jitter = jitter
        self._cache: dict[TokenKey, Token] = {}

    async def get_token(self, key: TokenKey) -> str:
        return (await self.get(key)).token

    async def get(self, key: TokenKey) -> Token:
        """The token with its expiration (CSI tokenRequests hand both to the driver)."""
        cached = self._cache.get(key)
        if cached is not None and not requires_refresh(cached, self._now(), self._jitter()):
            return cached
        try:
            fresh = await self._fetch(key)
        except SetUpError as exc:
            if cached is None:
                raise SetUpError(f"failed to fetch token: {exc}") from exc
            if self._now() > cached.expiration:
                raise SetUpError(f"token {_describe(key)} expired and refresh failed: {exc}") from exc
            log.warning("could not refresh a service account token key=%s error=%s", _describe(key), exc)
            return cached
        self._cache[key] = fresh
        return fresh

    async def _fetch(self, key: TokenKey) -> Token:
        if self._request is None:
            raise SetUpError("cannot use TokenManager when kubelet is in standalone mode")
        try:
            answer = await self._request(key.namespace, key.service_account, token_request_body(key))
        except ApiError as exc:
            raise SetUpError(exc.message) from exc
        except KubeError as exc:
            raise SetUpError(str(exc)) from exc
        status: Mapping[str, Any] = answer.get("status") or {}
        try:
            expiration = _parse_time(str(status["expirationTimestamp"]))
            token = str(status["token"])
        except (KeyError, ValueError) as exc:
            raise SetUpError(f"the apiserver answered a TokenRequest without a token: {exc}") from exc
        return Token(token, expiration, key.expiration_seconds)

    def delete_pod_tokens(self, pod_uid: str) -> None:
        """Upstream DeleteServiceAccountToken: the pod is gone, so are its tokens."""
        for key in [k for k in self._cache if k.pod_uid == pod_uid]:
            del self._cache[key]

    def cleanup(self) -> None:
        now = self._now()
        for key in [k for k, t in self._cache.items() if now > t.expiration]:
            del self._cache[key]


def _describe(key: TokenKey) -> str:
    # Safe to log: no token in it.
    return f'"{key.service_account}"/"{key.namespace}"/{list(key.audiences)}/{key.expiration_seconds}/{key.pod_uid}'
