from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kuberuntime.hashing import hash_container

BASE: dict[str, Any] = {
    "name": "c",
    "image": "busybox",
    "command": ["sleep", "1"],
    "env": [{"name": "A", "value": "1"}],
}


def test_hash_is_stable_hex_and_key_order_free() -> None:
    h = hash_container(BASE)
    assert len(h) == 16
    int(h, 16)
    assert hash_container(dict(reversed(list(BASE.items())))) == h
    assert hash_container({**BASE, "resources": {"limits": {"cpu": "1"}}, "resizePolicy": [{"x": 1}]}) == h
    assert hash_container({**BASE, "args": [], "workingDir": "", "stdin": None}) == h


@pytest.mark.parametrize(
    "change",
    [
        {"image": "busybox:2"},
        {"command": ["sleep", "2"]},
        {"env": [{"name": "A", "value": "2"}]},
        {"ports": [{"containerPort": 80}]},
        {"securityContext": {"privileged": True}},
    ],
)
def test_hash_changes_with_spec(change: dict[str, Any]) -> None:
    assert hash_container({**BASE, **change}) != hash_container(BASE)
