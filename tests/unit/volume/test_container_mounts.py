from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.volume.container_mounts import (
    PodVolume,
    expand_subpath_expr,
    make_mounts,
    referenced_names,
)
from nodeagent.volume.layout import PodDirs
from tests.unit.volume.fakes import FakeMounter

POD = {"metadata": {"uid": "u1", "name": "web", "namespace": "default"}}


def _mounts(
    tmp_path: Path, container: dict[str, Any], volumes: dict[str, PodVolume], env: dict[str, str] | None = None
) -> list[api_pb2.Mount]:
    return make_mounts(
        POD, container, volumes, lambda: list((env or {}).items()), dirs=PodDirs(str(tmp_path)), mounter=FakeMounter()
    )


@pytest.mark.parametrize(
    ("text", "names"),
    [("$(A)/$(B)", ["A", "B"]), ("$$(A)", []), ("$(A", []), ("x$", []), ("$x$(Y)", ["Y"])],
)
def test_referenced_names(text: str, names: list[str]) -> None:
    assert referenced_names(text) == names


def test_expand_subpath_expr() -> None:
    assert expand_subpath_expr("logs/$(POD_NAME)", {"POD_NAME": "web"}) == "logs/web"
    with pytest.raises(CreateContainerConfigError, match=r"^missing value for A, B$"):
        expand_subpath_expr("$(B)/$(A)/$(C)", {"C": "c", "A": ""})


def test_plain_mounts(tmp_path: Path) -> None:
    container = {
        "name": "app",
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/app"},
            {"name": "cfg", "mountPath": "/etc/app2", "readOnly": False},
            {"name": "data", "mountPath": "/data", "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "data", "mountPath": "rel"},
        ],
    }
    volumes = {"cfg": PodVolume("/v/cfg", read_only=True), "data": PodVolume("/v/data")}
    got = _mounts(tmp_path, container, volumes)
    assert [(m.container_path, m.host_path, m.readonly, m.propagation) for m in got] == [
        ("/etc/app", "/v/cfg", True, api_pb2.PROPAGATION_PRIVATE),
        ("/etc/app2", "/v/cfg", True, api_pb2.PROPAGATION_PRIVATE),
        ("/data", "/v/data", True, api_pb2.PROPAGATION_HOST_TO_CONTAINER),
        ("/rel", "/v/data", False, api_pb2.PROPAGATION_PRIVATE),
    ]


@pytest.mark.parametrize(
    ("mount", "privileged", "message"),
    [
        ({"name": "nope", "mountPath": "/x"}, False, 'cannot find volume "nope" to mount into container "app"'),
        (
            {"name": "data", "mountPath": "/x", "mountPropagation": "Sideways"},
            False,
            'invalid MountPropagation mode: "Sideways"',
        ),
        (
            {"name": "data", "mountPath": "/x", "mountPropagation": "Bidirectional"},
            False,
            "Bidirectional mount propagation is available only to privileged containers",
        ),
        (
            {"name": "data", "mountPath": "/x", "subPath": "/abs"},
            False,
            "error SubPath `/abs` must not be an absolute path",
        ),
        (
            {"name": "data", "mountPath": "/x", "subPath": "a/../.."},
            False,
            "unable to provision SubPath `a/../..`: must not contain '..'",
        ),
        ({"name": "data", "mountPath": "/x", "subPathExpr": "$(MISSING)"}, False, "missing value for MISSING"),
    ],
)
def test_mount_errors(tmp_path: Path, mount: dict[str, Any], privileged: bool, message: str) -> None:
    container = {"name": "app", "volumeMounts": [mount], "securityContext": {"privileged": privileged}}
    with pytest.raises(CreateContainerConfigError) as caught:
        _mounts(tmp_path, container, {"data": PodVolume(str(tmp_path))})
    assert str(caught.value) == message


def test_bidirectional_for_privileged(tmp_path: Path) -> None:
    container = {
        "name": "app",
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "data", "mountPath": "/x", "mountPropagation": "Bidirectional"}],
    }
    (got,) = _mounts(tmp_path, container, {"data": PodVolume("/v")})
    assert got.propagation == api_pb2.PROPAGATION_BIDIRECTIONAL


def test_subpath_expr_is_made_and_bound(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir(mode=0o777)
    container = {"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/logs", "subPathExpr": "pods/$(NAME)"}]}
    (got,) = _mounts(tmp_path / "root", container, {"data": PodVolume(str(volume))}, env={"NAME": "web"})
    assert (volume / "pods" / "web").is_dir()
    assert got.host_path == f"{tmp_path}/root/pods/u1/volume-subpaths/data/app/0"


def test_escaping_subpath_gets_upstreams_terse_message(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "escape").symlink_to("/etc")
    container = {"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "escape"}]}
    with pytest.raises(CreateContainerConfigError) as caught:
        _mounts(tmp_path / "root", container, {"data": PodVolume(str(volume))})
    assert str(caught.value) == 'failed to prepare subPath for volumeMount "data" of container "app"'
    container = {"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "escape/new"}]}
    with pytest.raises(CreateContainerConfigError) as caught:
        _mounts(tmp_path / "root", container, {"data": PodVolume(str(volume))})
    assert str(caught.value) == 'failed to create subPath directory for volumeMount "data" of container "app"'
