from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.kube.errors import ApiUnavailable
from nodeagent.volume.errors import SetUpError
from nodeagent.volume.token import Token, TokenKey, TokenManager, requires_refresh, token_request_body

HOUR = 3600


@pytest.mark.parametrize(
    ("token", "now", "jitter", "refresh"),
    [
        # Issued at 0, 1 h TTL: refresh past 80% (2880 s), less the jitter.
        (Token("t", HOUR, HOUR), 100, 0, False),
        (Token("t", HOUR, HOUR), 2880, 0, False),
        (Token("t", HOUR, HOUR), 2881, 0, True),
        (Token("t", HOUR, HOUR), 2875, 10, True),
        # A week-long token is refreshed after 24 h.
        (Token("t", 7 * 24 * HOUR, 7 * 24 * HOUR), 24 * HOUR - 1, 0, False),
        (Token("t", 7 * 24 * HOUR, 7 * 24 * HOUR), 24 * HOUR + 1, 0, True),
        # The clock went back before the issue time.
        (Token("t", 2 * HOUR, HOUR), 100, 0, True),
    ],
)
def test_requires_refresh(token: Token, now: float, jitter: float, refresh: bool) -> None:
    assert requires_refresh(token, now, jitter) is refresh


KEY = TokenKey("default", "ns", ("vault",), HOUR, "web", "u1")


def test_body() -> None:
    assert token_request_body(KEY) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": HOUR,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1"},
            "audiences": ["vault"],
        },
    }


class Requester:
    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.issued_at = 0

    async def __call__(self, namespace: str, sa: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls += 1
        if self.fail:
            raise ApiUnavailable("apiserver unreachable")
        expires = self.issued_at + int(body["spec"]["expirationSeconds"])
        stamp = f"1970-01-01T{expires // 3600:02d}:{expires % 3600 // 60:02d}:{expires % 60:02d}Z"
        return {"status": {"token": f"tok{self.calls}", "expirationTimestamp": stamp}}


async def test_cache_refresh_and_failures() -> None:
    clock = {"now": 0.0}
    request = Requester()
    tokens = TokenManager(request, now=lambda: clock["now"], jitter=lambda: 0.0)
    assert await tokens.get_token(KEY) == "tok1"
    clock["now"] = 1000
    assert await tokens.get_token(KEY) == "tok1"
    assert request.calls == 1
    # Past 80%: refreshed.
    clock["now"] = 2900
    request.issued_at = 2900
    assert await tokens.get_token(KEY) == "tok2"
    # Refresh fails while the old token is valid: the old one is kept.
    clock["now"] = 2900 + 3000
    request.fail = True
    assert await tokens.get_token(KEY) == "tok2"
    # Expired and the refresh fails: an error.
    clock["now"] = 2900 + 3601
    with pytest.raises(SetUpError, match="expired and refresh failed: apiserver unreachable"):
        await tokens.get_token(KEY)
    tokens.delete_pod_tokens("u1")
    with pytest.raises(SetUpError, match=r"^failed to fetch token: apiserver unreachable$"):
        await tokens.get_token(KEY)
