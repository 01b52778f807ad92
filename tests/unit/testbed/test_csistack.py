"""The CSI stack's pure parts: the command lines, the upstream layout of its sockets, the CSIDriver and PV objects
it writes, the driver's call log, and which processes `stop_all` ends. tests/integration/test_testbed_csi.py runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import ATTACH, NO_ATTACH, DriverSpec
from nodeagent.testbed.layout import Layout

LAYOUT = Layout(Path("/bed"))
BIN = Path("/cache/bin")


def test_sockets_follow_upstream_layout() -> None:
    root = LAYOUT.kubelet_root
    assert csistack.driver_socket(root, "d.example") == Path("/bed/kubelet/plugins/d.example/csi.sock")
    assert csistack.registration_socket(root, "d.example") == Path("/bed/kubelet/plugins_registry/d.example-reg.sock")


@pytest.mark.parametrize(
    ("argv", "flag", "expected"),
    [
        (["/bin/x", "--csi-address=/s.sock", "--v=3"], "--csi-address", "/s.sock"),
        (["/bin/x", "--csi-address-extra=/no"], "--csi-address", None),
        (["/bin/x"], "--csi-address", None),
    ],
)
def test_flag_value(argv: list[str], flag: str, expected: str | None) -> None:
    assert csistack.flag_value(argv, flag) == expected


@pytest.mark.parametrize(
    ("spec", "expected_tail"),
    [
        pytest.param(NO_ATTACH, [], id="no-attach"),
        pytest.param(ATTACH, ["--enable-attach"], id="attach"),
        pytest.param(
            DriverSpec("x", attach_required=False, mock_args=("--node-expand-required",)),
            ["--node-expand-required"],
            id="extra-flags",
        ),
    ],
)
def test_mock_argv(spec: DriverSpec, expected_tail: list[str]) -> None:
    sock, volumes = Path("/s.sock"), csistack.volumes_file(LAYOUT, spec.name)
    assert volumes == Path(f"/bed/csi/{spec.name}.volumes")
    assert csistack.mock_argv(BIN, spec, sock, volumes) == [
        str(BIN),
        "--csi-address=/s.sock",
        f"--drivername={spec.name}",
        f"--volumes-file={volumes}",
        "--v=3",  # the level the driver logs its calls at
        *expected_tail,
    ]


def test_registrar_and_attacher_argv() -> None:
    sock, registry = Path("/bed/kubelet/plugins/d/csi.sock"), Path("/bed/kubelet/plugins_registry")
    assert csistack.registrar_argv(BIN, sock, registry) == [
        str(BIN),
        f"--csi-address={sock}",
        f"--kubelet-registration-path={sock}",
        f"--plugin-registration-path={registry}",
        "--v=2",
    ]
    argv = csistack.attacher_argv(BIN, sock, Path("/bed/admin.kubeconfig"))
    assert argv[:3] == [str(BIN), f"--csi-address={sock}", "--kubeconfig=/bed/admin.kubeconfig"]
    assert "--leader-election=false" in argv


@pytest.mark.parametrize(
    ("spec", "attach", "pod_info", "modes"),
    [
        pytest.param(ATTACH, True, True, ["Persistent", "Ephemeral"], id="attach"),
        pytest.param(NO_ATTACH, False, True, ["Persistent", "Ephemeral"], id="no-attach"),
        pytest.param(
            DriverSpec("p", attach_required=False, pod_info_on_mount=False, lifecycle_modes=("Persistent",)),
            False,
            False,
            ["Persistent"],
            id="persistent-only",
        ),
    ],
)
def test_csidriver_object(spec: DriverSpec, attach: bool, pod_info: bool, modes: list[str]) -> None:
    obj = csistack.csidriver_object(spec)
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]) == ("storage.k8s.io/v1", "CSIDriver", {"name": spec.name})
    assert obj["spec"] == {"attachRequired": attach, "podInfoOnMount": pod_info, "volumeLifecycleModes": modes}


@pytest.mark.parametrize(
    ("attributes", "expected_csi"),
    [
        pytest.param(None, {"driver": "d", "volumeHandle": "4", "fsType": "ext4"}, id="no-attributes"),
        pytest.param(
            {"name": "pv-1"},
            {"driver": "d", "volumeHandle": "4", "fsType": "ext4", "volumeAttributes": {"name": "pv-1"}},
            id="attributes",
        ),
    ],
)
def test_persistent_volume(attributes: dict[str, str] | None, expected_csi: dict[str, object]) -> None:
    pv = csistack.persistent_volume(
        "pv-1", driver="d", volume_handle="4", capacity_bytes=1 << 30, volume_attributes=attributes
    )
    assert pv["spec"]["csi"] == expected_csi
    assert pv["spec"]["capacity"] == {"storage": "1073741824"}
    assert pv["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pv["spec"]["storageClassName"] == ""  # StorageClass-less: a claim binds it by volumeName


def test_parse_calls() -> None:
    call = {"Method": "/csi.v1.Node/NodeStageVolume", "Request": {"volume_id": "1"}, "Response": {}, "Error": ""}
    text = "\n".join(
        [
            'I1125 18:22:50.1 1 main.go:56] "csi-mock serving"',
            f"I1125 18:22:50.2 1 driver.go:274] gRPCCall: {json.dumps(call)}",
            "I1125 18:22:50.3 1 driver.go:274] gRPCCall: {not json",  # a line cut by a kill: skipped
        ]
    )
    assert csistack.parse_calls(text) == [call]


def test_started_drivers_and_stop_all(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.pids.mkdir()
    for name in ("csi-mock-a.example", "csi-registrar-a.example", "csi-attacher-b.example", "containerd", "agent"):
        # PIDs that run nothing of ours: stop only forgets them (processes.stop checks the command line first).
        (layout.pids / f"{name}.json").write_text(json.dumps({"pid": 999999999, "argv": ["/nope"], "log": "/x"}))
    assert csistack.started_drivers(layout) == ["a.example", "b.example"]
    csistack.stop_all(layout)
    assert sorted(p.stem for p in layout.pids.iterdir()) == ["agent", "containerd"]


def test_stop_driver_removes_the_sockets_a_kill_left(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.pids.mkdir()
    root = tmp_path / "some-kubelet-root"  # not the layout's: found in the recorded command lines
    socket, reg = csistack.driver_socket(root, "d.example"), csistack.registration_socket(root, "d.example")
    for path in (socket, reg):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("left by a SIGKILL")
    recorded = {
        "csi-mock-d.example": csistack.mock_argv(BIN, NO_ATTACH, socket, tmp_path / "v"),
        "csi-registrar-d.example": csistack.registrar_argv(BIN, socket, csistack.registry_dir(root)),
    }
    for name, argv in recorded.items():
        (layout.pids / f"{name}.json").write_text(json.dumps({"pid": 999999999, "argv": argv, "log": "/x"}))
    csistack.stop_driver(layout, "d.example")
    assert not socket.exists() and not socket.parent.exists()
    assert not reg.exists() and reg.parent.exists()  # plugins_registry is the kubelet's
    assert list(layout.pids.iterdir()) == []
