"""The kubelet API's authentication and authorization rules (upstream auth.go with fine-grained authorization)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.server import auth
from nodeagent.server.auth import Authenticator, Authorizer, TTLCache, User

ALICE = User("alice", ("devs", auth.AUTHENTICATED))


@pytest.mark.parametrize(
    ("method", "path", "verb", "subresources"),
    [
        ("GET", "/stats/summary", "get", ["stats"]),
        ("GET", "/metrics", "get", ["metrics"]),
        ("GET", "/metrics/cadvisor", "get", ["metrics"]),
        ("GET", "/logs/syslog", "get", ["log"]),
        ("GET", "/pods", "get", ["pods", "proxy"]),
        ("GET", "/runningpods/", "get", ["pods", "proxy"]),
        ("GET", "/healthz", "get", ["healthz", "proxy"]),
        ("GET", "/configz", "get", ["configz", "proxy"]),
        ("POST", "/exec/ns/p/c", "create", ["proxy"]),
        ("GET", "/containerLogs/ns/p/c", "get", ["proxy"]),
        ("PUT", "/statsx", "update", ["proxy"]),
        ("DELETE", "/podsx", "delete", ["proxy"]),
        ("POST", "/checkpoint/ns/p/c", "create", ["checkpoint"]),
        ("GET", "/statusz", "get", ["statusz"]),
        ("GET", "/flagz", "get", ["configz"]),
        ("GET", "/spec/", "get", ["proxy"]),  # v1.34 has no /spec route and no spec subresource
        ("GET", "/debug/pprof/", "get", ["proxy"]),
        ("HEAD", "/pods", "", ["pods", "proxy"]),  # upstream maps only five methods to verbs
        ("OPTIONS", "/metrics", "", ["metrics"]),
        ("get", "/pods", "", ["pods", "proxy"]),
    ],
)
def test_request_attributes(method: str, path: str, verb: str, subresources: list[str]) -> None:
    attrs = auth.request_attributes(ALICE, method, path, "node-1")
    assert [a.subresource for a in attrs] == subresources
    assert {a.verb for a in attrs} == {verb}
    assert {a.node_name for a in attrs} == {"node-1"}


def test_forbidden_message_is_upstreams() -> None:
    attrs = auth.request_attributes(ALICE, "GET", "/healthz", "n")
    assert auth.forbidden_message(attrs) == (
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[healthz proxy])\n"
    )


def test_user_from_certificate() -> None:
    cert = {"subject": ((("organizationName", "system:masters"),), (("commonName", "admin"),))}
    user = auth.user_from_certificate(cert)
    assert user == User("admin", ("system:masters", auth.AUTHENTICATED))
    assert auth.user_from_certificate({"subject": ()}) is None
    assert auth.user_from_certificate(None) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        (None, None),
        ("Bearer a b", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert auth.bearer_token(header) == token


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_token_review_cached_for_ttl() -> None:
    calls: list[str] = []

    async def review(token: str) -> Mapping[str, Any]:
        calls.append(token)
        if token == "good":
            return {"authenticated": True, "user": {"username": "bob", "groups": ["g"], "uid": "u1"}}
        return {"authenticated": False}

    clock = Clock()
    authn = Authenticator(token_review=review, cache_ttl=120, cache=TTLCache(clock))
    assert await authn.authenticate(None, "Bearer good") == User("bob", ("g",), "u1", {})
    assert await authn.authenticate(None, "Bearer good") is not None
    assert await authn.authenticate(None, "Bearer bad") is None
    assert await authn.authenticate(None, "Bearer bad") is None
    assert calls == ["good", "bad"]
    clock.now = 121
    await authn.authenticate(None, "Bearer good")
    assert calls == ["good", "bad", "good"]


async def test_anonymous_only_when_enabled() -> None:
    assert await Authenticator().authenticate(None, None) is None
    user = await Authenticator(anonymous=True).authenticate(None, None)
    assert user == User(auth.ANONYMOUS, (auth.UNAUTHENTICATED,))


async def test_certificate_wins_over_token() -> None:
    async def review(token: str) -> Mapping[str, Any]:
        raise AssertionError("no review for a certificate")

    cert = {"subject": ((("commonName", "kube-apiserver-kubelet-client"),),)}
    user = await Authenticator(token_review=review).authenticate(cert, "Bearer x")
    assert user is not None and user.name == "kube-apiserver-kubelet-client"


async def test_review_failure_is_an_error() -> None:
    async def review(token: str) -> Mapping[str, Any]:
        raise ConnectionError("apiserver down")

    with pytest.raises(auth.AuthError):
        await Authenticator(token_review=review).authenticate(None, "Bearer x")


async def test_authorizer_caches_allowed_and_denied_separately() -> None:
    calls: list[str] = []

    async def review(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        sub = spec["resourceAttributes"]["subresource"]
        calls.append(sub)
        return {"allowed": sub == "stats"}

    clock = Clock()
    authz = Authorizer(access_review=review, authorized_ttl=300, unauthorized_ttl=30, cache=TTLCache(clock))
    stats = auth.request_attributes(ALICE, "GET", "/stats/summary", "n")[0]
    proxy = auth.request_attributes(ALICE, "POST", "/exec/a/b/c", "n")[0]
    assert await authz.allowed(stats)
    assert not await authz.allowed(proxy)
    assert await authz.allowed(stats) and not await authz.allowed(proxy)
    assert calls == ["stats", "proxy"]
    clock.now = 31
    await authz.allowed(stats)
    await authz.allowed(proxy)
    assert calls == ["stats", "proxy", "proxy"]


def test_access_review_spec() -> None:
    attrs = auth.request_attributes(User("u", ("g",), "id"), "GET", "/metrics", "node-1")[0]
    assert auth.access_review_spec(attrs) == {
        "user": "u",
        "groups": ["g"],
        "uid": "id",
        "resourceAttributes": {
            "verb": "get",
            "version": "v1",
            "resource": "nodes",
            "subresource": "metrics",
            "name": "node-1",
        },
    }
