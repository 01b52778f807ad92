"""Referenced ConfigMaps/Secrets become lookups; imagePullSecrets become the CRI AuthConfig for the registry."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.kuberuntime.references import lookups_for, pull_auth, referenced_names, registry_host


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


OBJECTS: dict[tuple[str, str, str], Mapping[str, Any]] = {
    ("configmaps", "ns", "cm"): {"data": {"A": "1"}},
    ("secrets", "ns", "sec"): {"data": {"PASSWORD": b64("hunter2")}},
    ("secrets", "ns", "pull"): {
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(json.dumps({"auths": {"127.0.0.1:5000": {"auth": b64("user:pw")}}}))},
    },
    ("secrets", "ns", "hub"): {
        "data": {
            ".dockerconfigjson": b64(
                json.dumps({"auths": {"https://index.docker.io/v1/": {"username": "u", "password": "p"}}})
            )
        },
    },
}
fetched: list[tuple[str, str, str]] = []


async def fetch(resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    fetched.append((resource, namespace, name))
    return OBJECTS.get((resource, namespace, name))


def test_referenced_names() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s1"}}],
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s2", "key": "k"}}}, {"name": "Y", "value": "y"}],
    }
    assert referenced_names(container) == ({"cm"}, {"s1", "s2"})


async def test_lookups_fetch_only_what_is_referenced_and_decode_secrets() -> None:
    fetched.clear()
    container = {
        "env": [
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "A"}}},
        ]
    }
    config_map, secret = await lookups_for(fetch, "ns", container)
    assert secret("ns", "sec") == {"PASSWORD": "hunter2"}
    assert config_map("ns", "cm") == {"A": "1"}
    assert config_map("other", "cm") is None
    assert sorted(fetched) == [("configmaps", "ns", "cm"), ("secrets", "ns", "sec")]


@pytest.mark.parametrize(
    ("image", "host"),
    [
        ("busybox", "docker.io"),
        ("library/busybox:1", "docker.io"),
        ("127.0.0.1:5000/pause:3.10", "127.0.0.1:5000"),
        ("registry.example/a/b", "registry.example"),
        ("localhost/x", "localhost"),
    ],
)
def test_registry_host(image: str, host: str) -> None:
    assert registry_host(image) == host


@pytest.mark.parametrize(
    ("secrets", "image", "expected"),
    [
        (["pull"], "127.0.0.1:5000/app:1", ("user", "pw", "127.0.0.1:5000")),
        (["missing", "pull"], "127.0.0.1:5000/app:1", ("user", "pw", "127.0.0.1:5000")),
        (["hub"], "busybox", ("u", "p", "docker.io")),
        (["pull"], "other.example/app:1", None),
        ([], "127.0.0.1:5000/app:1", None),
    ],
)
async def test_pull_auth(secrets: list[str], image: str, expected: tuple[str, str, str] | None) -> None:
    pod = {"metadata": {"namespace": "ns"}, "spec": {"imagePullSecrets": [{"name": n} for n in secrets]}}
    auth = await pull_auth(fetch, pod, image)
    if expected is None:
        assert auth is None
    else:
        assert auth is not None
        assert (auth.username, auth.password, auth.server_address) == expected
