"""configMap, secret and projected volumes over an in-memory object store and token requester."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube.errors import Forbidden
from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.configmap import ConfigMapPlugin, config_map_data, make_payload
from nodeagent.volume.errors import PayloadError, SetUpError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.plugin import VolumeHost
from nodeagent.volume.projected import ProjectedPlugin
from nodeagent.volume.secret import SecretPlugin
from nodeagent.volume.token import TokenManager
from tests.unit.volume.fakes import FakeMounter, exists, file_mode, is_link, read_bytes, read_text

POD: dict[str, Any] = {
    "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
    "spec": {"serviceAccountName": "builder", "containers": [{"name": "app"}]},
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Store:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.gets: list[tuple[str, str, str]] = []
        self.forbidden = False

    async def get(self, resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.gets.append((resource, namespace, name))
        if self.forbidden:
            raise Forbidden(403, "Forbidden", f'{resource} "{name}" is forbidden: no relationship found')
        return self.objects.get((resource, namespace, name))


class Tokens:
    def __init__(self) -> None:
        self.bodies: list[tuple[str, str, Mapping[str, Any]]] = []

    async def request(self, namespace: str, sa: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.bodies.append((namespace, sa, body))
        return {"status": {"token": f"token-{len(self.bodies)}", "expirationTimestamp": "2099-01-01T00:00:00Z"}}


@pytest.fixture
def store() -> Store:
    s = Store()
    s.objects[("configmaps", "default", "cfg")] = {
        "data": {"app.conf": "port=80", "other": "o"},
        "binaryData": {"blob": b64("\x00\x01")},
    }
    s.objects[("configmaps", "default", "kube-root-ca.crt")] = {"data": {"ca.crt": "CERT"}}
    s.objects[("secrets", "default", "creds")] = {"data": {"password": b64("hunter2")}}
    return s


def host(tmp_path: Path, store: Store, mounter: FakeMounter | None = None) -> VolumeHost:
    return VolumeHost(PodDirs(str(tmp_path)), mounter or FakeMounter(), {"memory": "1Gi"}, get_object=store.get)


@pytest.mark.parametrize(
    ("items", "optional", "payload", "error"),
    [
        (None, False, {"a": FileProjection(b"1", 0o644), "b": FileProjection(b"2", 0o644)}, None),
        ([{"key": "a", "path": "x/y"}], False, {"x/y": FileProjection(b"1", 0o644)}, None),
        ([{"key": "a", "path": "a", "mode": 0o400}], False, {"a": FileProjection(b"1", 0o400)}, None),
        ([{"key": "zz", "path": "z"}], False, None, "configmap references non-existent config key: zz"),
        ([{"key": "zz", "path": "z"}, {"key": "b", "path": "b"}], True, {"b": FileProjection(b"2", 0o644)}, None),
    ],
)
def test_make_payload(
    items: list[dict[str, Any]] | None, optional: bool, payload: dict[str, FileProjection] | None, error: str | None
) -> None:
    data = {"a": b"1", "b": b"2"}
    if error is None:
        got = make_payload(
            items, data, 0o644, optional=optional, missing_key="configmap references non-existent config key"
        )
        assert got == payload
    else:
        with pytest.raises(SetUpError) as caught:
            make_payload(
                items, data, 0o644, optional=optional, missing_key="configmap references non-existent config key"
            )
        assert str(caught.value) == error


def test_config_map_data_reads_binary() -> None:
    assert config_map_data({"data": {"t": "x"}, "binaryData": {"b": b64("\x00")}}) == {"t": b"x", "b": b"\x00"}


async def test_config_map_volume(tmp_path: Path, store: Store) -> None:
    plugin = ConfigMapPlugin(host(tmp_path, store))
    volume = {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o440}}
    path = await plugin.set_up(POD, volume)
    assert path == f"{tmp_path}/pods/u1/volumes/kubernetes.io~configmap/cfg"
    assert read_text(path, "app.conf") == "port=80"
    assert read_bytes(path, "blob") == b"\x00\x01"
    assert file_mode(path, "other") == 0o440
    assert plugin.reconstruct("u1", "cfg") == path
    # An update reaches the files on the next set up.
    store.objects[("configmaps", "default", "cfg")] = {"data": {"app.conf": "port=8080"}}
    await plugin.set_up(POD, volume)
    assert read_text(path, "app.conf") == "port=8080"
    assert not exists(path, "other")
    await plugin.tear_down("u1", "cfg")
    assert not exists(path)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"name": "missing"}, 'configmap "missing" not found'),
        (
            {"name": "cfg", "items": [{"key": "nope", "path": "n"}]},
            "configmap references non-existent config key: nope",
        ),
        (
            {"name": "cfg", "items": [{"key": "other", "path": "../escape"}]},
            "invalid path: must not contain '..': ../escape",
        ),
        ({"name": "cfg", "items": [{"key": "other", "path": "/abs"}]}, "invalid path: must be relative path: /abs"),
    ],
)
async def test_config_map_failures_make_nothing(
    tmp_path: Path, store: Store, source: dict[str, Any], message: str
) -> None:
    plugin = ConfigMapPlugin(host(tmp_path, store))
    with pytest.raises(SetUpError) as caught:
        await plugin.set_up(POD, {"name": "cfg", "configMap": source})
    assert str(caught.value) == message
    assert not (tmp_path / "pods/u1/volumes/kubernetes.io~configmap/cfg").exists()
    if "invalid path" in message:
        assert isinstance(caught.value, PayloadError)


async def test_optional_missing_config_map_is_an_empty_volume(tmp_path: Path, store: Store) -> None:
    plugin = ConfigMapPlugin(host(tmp_path, store))
    path = await plugin.set_up(POD, {"name": "cfg", "configMap": {"name": "missing", "optional": True}})
    assert [n for n in listdir(path) if not n.startswith("..")] == []
    assert is_link(path, "..data")


async def test_forbidden_is_reported_with_the_apiservers_words(tmp_path: Path, store: Store) -> None:
    store.forbidden = True
    plugin = ConfigMapPlugin(host(tmp_path, store))
    with pytest.raises(SetUpError, match=r'^configmaps "cfg" is forbidden: no relationship found$'):
        await plugin.set_up(POD, {"name": "cfg", "configMap": {"name": "cfg"}})


async def test_refresh_failure_keeps_the_old_content(tmp_path: Path, store: Store) -> None:
    plugin = ConfigMapPlugin(host(tmp_path, store))
    volume = {"name": "cfg", "configMap": {"name": "cfg"}}
    path = await plugin.set_up(POD, volume)
    del store.objects[("configmaps", "default", "cfg")]
    with pytest.raises(SetUpError, match="not found"):
        await plugin.set_up(POD, volume)
    assert read_text(path, "app.conf") == "port=80"


async def test_secret_volume_is_on_tmpfs(tmp_path: Path, store: Store) -> None:
    mounter = FakeMounter()
    plugin = SecretPlugin(host(tmp_path, store, mounter))
    path = await plugin.set_up(POD, {"name": "s", "secret": {"secretName": "creds"}})
    assert read_text(path, "password") == "hunter2"
    assert mounter.calls == [("tmpfs", path, f"size={1024**3}")]
    assert plugin.reconstruct("u1", "s") == path
    with pytest.raises(SetUpError, match=r'^secret "nope" not found$'):
        await plugin.set_up(POD, {"name": "t", "secret": {"secretName": "nope"}})
    # The failed first set up took its tmpfs down again.
    assert [m.mount_point for m in mounter.table] == [path]
    await plugin.tear_down("u1", "s")
    assert mounter.table == []


def listdir(path: str) -> list[str]:
    return os.listdir(path)


KUBE_API_ACCESS: dict[str, Any] = {
    "name": "kube-api-access-x1",
    "projected": {
        "defaultMode": 0o644,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ],
    },
}


async def test_projected_kube_api_access(tmp_path: Path, store: Store) -> None:
    tokens = Tokens()
    # Shortly after the fake's token was issued (it expires 2099-01-01T00:00:00Z, an hour and 7 s after issue).
    now = 4070908800.0 - 3607 + 10
    plugin = ProjectedPlugin(host(tmp_path, store), TokenManager(tokens.request, now=lambda: now, jitter=lambda: 0.0))
    path = await plugin.set_up(POD, KUBE_API_ACCESS)
    assert {n: read_text(path, n) for n in ("token", "ca.crt", "namespace")} == {
        "token": "token-1",
        "ca.crt": "CERT",
        "namespace": "default",
    }
    namespace, sa, body = tokens.bodies[0]
    assert (namespace, sa) == ("default", "builder")
    assert body["spec"] == {
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1"},
    }
    # The cached token is used again while it is fresh.
    await plugin.set_up(POD, KUBE_API_ACCESS)
    assert len(tokens.bodies) == 1


async def test_projected_reports_every_failing_source(tmp_path: Path, store: Store) -> None:
    plugin = ProjectedPlugin(host(tmp_path, store), TokenManager(None, now=lambda: 0.0))
    volume = {
        "name": "p",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "audience": "vault"}},
                {"secret": {"name": "nope"}},
                {"clusterTrustBundle": {"path": "b"}},
            ]
        },
    }
    with pytest.raises(SetUpError) as caught:
        await plugin.set_up(POD, volume)
    assert str(caught.value) == (
        "[failed to fetch token: cannot use TokenManager when kubelet is in standalone mode, "
        'secret "nope" not found, projected source clusterTrustBundle is not supported on this node]'
    )


async def test_projected_short_expiration_is_refused(tmp_path: Path, store: Store) -> None:
    plugin = ProjectedPlugin(host(tmp_path, store), TokenManager(Tokens().request, now=lambda: 0.0))
    volume = {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 60}}]}}
    with pytest.raises(SetUpError, match="less than 10 minutes"):
        await plugin.set_up(POD, volume)
