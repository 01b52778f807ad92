"""The device manager against a fake plugin served over real gRPC on unix sockets: registration, ListAndWatch into
capacity, admission, the container's options, the checkpoint across a restart, and a plugin that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.v1 import api_pb2 as cri_pb2
from nodeagent.devicemanager import (
    UNEXPECTED_ADMISSION_ERROR,
    DeviceManager,
    DeviceManagerError,
    apply_device_options,
    is_extended_resource_name,
)
from nodeagent.devicemanager.manager import ENDPOINT_STOP_GRACE_PERIOD, plugin_socket_path
from tests.unit.devicemanager.fakeplugin import FakePlugin, devices

RESOURCE = "example.com/dev"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(uid: str, *containers: Mapping[str, Any], init: tuple[Mapping[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default"},
        "spec": {"initContainers": list(init), "containers": list(containers)},
    }


def container(name: str, count: int = 1, resource: str = RESOURCE, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {resource: str(count)}}, **extra}


class Harness:
    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        self.active: list[dict[str, Any]] = []
        self.ready = True
        self.managers: list[DeviceManager] = []
        self.plugins: list[FakePlugin] = []

    async def manager(self, running: tuple[tuple[str, str], ...] = (), dial_timeout: float = 10.0) -> DeviceManager:
        manager = DeviceManager(
            str(self.root),
            active_pods=lambda: self.active,
            sources_ready=lambda: self.ready,
            monotonic=self.clock,
            dial_timeout=dial_timeout,
        )
        await manager.start(running)
        self.managers.append(manager)
        return manager

    async def plugin(self, *, register: bool = True, **kwargs: Any) -> FakePlugin:
        plugin = FakePlugin(self.root / "device-plugins", **kwargs)
        await plugin.serve()
        self.plugins.append(plugin)
        if register:
            await plugin.register()
            await plugin.wait_pushed()
            await asyncio.sleep(0.05)  # the manager handles the first answer after the plugin sent it
        return plugin

    async def close(self) -> None:
        for plugin in self.plugins:
            await plugin.stop()
        for manager in self.managers:
            await manager.stop()


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("example.com/dev", True),
        ("nvidia.com/gpu", True),
        ("cpu", False),
        ("kubernetes.io/dev", False),
        ("example.kubernetes.io/dev", False),
        ("requests.example.com/dev", False),
        ("example.com/bad name", False),
    ],
)
def test_extended_resource_names(name: str, extended: bool) -> None:
    assert is_extended_resource_name(name) is extended


async def test_the_registration_socket_is_served_and_stale_sockets_are_removed(harness: Harness) -> None:
    plugin_dir = harness.root / "device-plugins"
    plugin_dir.mkdir()
    stale = FakePlugin(plugin_dir, endpoint="stale.sock")
    await stale.serve()
    await stale.stop()
    stale_server = FakePlugin(plugin_dir, endpoint="old.sock")
    await stale_server.serve()
    assert (plugin_dir / "old.sock").is_socket()
    await stale_server.stop()
    await stale_server.serve()  # the socket file exists when the manager starts
    try:
        await harness.manager()
        assert (plugin_dir / "kubelet.sock").is_socket()
        assert not (plugin_dir / "old.sock").exists()
    finally:
        await stale_server.stop()


async def test_a_wrong_api_version_is_refused_with_upstreams_error(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(register=False, initial=devices("a"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register(version="v1alpha")
    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    assert refused.value.details() == (
        'requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]'
    )
    assert manager.get_capacity() == ({}, {}, [])


async def test_a_resource_name_that_is_not_extended_is_refused(harness: Harness) -> None:
    await harness.manager()
    plugin = await harness.plugin(register=False)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register(resource="cpu")
    assert refused.value.details() == 'the ResourceName "cpu" is invalid'


async def test_list_and_watch_feeds_capacity_and_unhealthy_devices_leave_allocatable(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=[*devices("a", "b"), *devices("c", health="Unhealthy")])
    assert manager.get_capacity() == ({RESOURCE: 3}, {RESOURCE: 2}, [])
    plugin.set_devices(devices("a", "b", "c", "d"))
    await eventually(lambda: manager.get_capacity()[1] == {RESOURCE: 4})
    assert manager.get_capacity()[0] == {RESOURCE: 4}


async def test_admission_allocates_and_refuses_a_pod_that_does_not_fit(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a", "b"))
    first = pod("p1", container("c", 2))
    harness.active.append(first)
    assert await manager.admit(first) is None
    assert plugin.allocate_calls == [["a", "b"]]
    second = pod("p2", container("c", 1))
    refused = await manager.admit(second)
    assert refused == (
        UNEXPECTED_ADMISSION_ERROR,
        "Allocate failed due to requested number of devices unavailable for example.com/dev. "
        "Requested: 1, Available: 0, which is unexpected",
    )
    # The first pod gone, its devices are free again.
    harness.active.clear()
    assert await manager.admit(second) is None
    assert len(plugin.allocate_calls) == 2


async def test_every_container_of_a_pod_being_admitted_keeps_its_devices(harness: Harness) -> None:
    # The pod being admitted is not among the active pods yet: its first container's devices must not be freed
    # when the second one is allocated.
    manager = await harness.manager()
    await harness.plugin(initial=devices("a", "b", "c"))
    p = pod("p", container("one", 1), container("two", 1))
    assert await manager.admit(p) is None
    one, two = manager.container_devices("p", "one"), manager.container_devices("p", "two")
    assert one and two and one[RESOURCE].isdisjoint(two[RESOURCE])


async def test_a_pod_asking_for_a_resource_no_plugin_serves_is_left_to_the_predicates(harness: Harness) -> None:
    manager = await harness.manager()
    assert await manager.admit(pod("p", container("c", 1, resource="other.com/x"))) is None


async def test_a_plugin_allocate_failure_refuses_the_pod_with_the_rpc_error(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a"))
    plugin.allocate_error = "no luck"
    refused = await manager.admit(pod("p", container("c", 1)))
    assert refused == (
        UNEXPECTED_ADMISSION_ERROR,
        "Allocate failed due to rpc error: code = Internal desc = no luck, which is unexpected",
    )
    # The device was given back: the next try gets it.
    plugin.allocate_error = None
    assert await manager.admit(pod("p", container("c", 1))) is None


async def test_the_container_config_gets_the_plugins_answer(harness: Harness) -> None:
    manager = await harness.manager()
    await harness.plugin(initial=devices("a"))
    p = pod("p", container("c", 1))
    harness.active.append(p)
    assert await manager.admit(p) is None
    options = await manager.run_container_options(p, p["spec"]["containers"][0])
    config = cri_pb2.ContainerConfig(
        envs=[cri_pb2.KeyValue(key="OWN", value="1")],
        mounts=[cri_pb2.Mount(container_path="/vol", host_path="/h")],
        devices=[cri_pb2.Device(container_path="/dev/block", host_path="/dev/loop0", permissions="mrw")],
        annotations={"io.kubernetes.container.hash": "x", "fake.example.com/devices": "kubelet's"},
    )
    apply_device_options(config, options)
    assert [(e.key, e.value) for e in config.envs] == [("FAKE_DEVICES", "a"), ("OWN", "1")]
    assert [(d.container_path, d.host_path, d.permissions) for d in config.devices] == [
        ("/dev/fake-a", "/dev/null", "rw"),
        ("/dev/block", "/dev/loop0", "mrw"),
    ]
    assert [(m.container_path, m.readonly) for m in config.mounts] == [("/fake", True), ("/vol", False)]
    assert config.annotations["fake.example.com/devices"] == "kubelet's"
    assert [d.name for d in config.CDI_devices] == ["example.com/dev=a"]


async def test_a_container_without_devices_gets_no_options(harness: Harness) -> None:
    manager = await harness.manager()
    await harness.plugin(initial=devices("a"))
    p = pod("p", {"name": "plain"})
    assert await manager.admit(p) is None
    assert await manager.run_container_options(p, p["spec"]["containers"][0]) is None


async def test_an_init_containers_devices_go_to_the_next_container(harness: Harness) -> None:
    manager = await harness.manager()
    await harness.plugin(initial=devices("a", "b"))
    p = pod("p", container("app", 1), init=(container("init", 1),))
    harness.active.append(p)
    assert await manager.admit(p) is None
    assert manager.container_devices("p", "init") == manager.container_devices("p", "app") == {RESOURCE: {"a"}}
    # A sidecar (restartable init container) keeps its device: the next container gets another.
    q = pod("q", container("app", 1), init=(container("sidecar", 1, restartPolicy="Always"),))
    harness.active.clear()
    harness.active.append(q)
    assert await manager.admit(q) is None
    assert manager.container_devices("q", "sidecar") != manager.container_devices("q", "app")


async def test_preferred_allocation_and_pre_start_when_the_plugin_asks(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a", "b", "c"), pre_start_required=True, preferred_available=True)
    plugin.preferred = ["c"]
    p = pod("p", container("c", 1))
    harness.active.append(p)
    assert await manager.admit(p) is None
    assert plugin.allocate_calls == [["c"]]
    assert sorted(plugin.preferred_calls[0].available_deviceIDs) == ["a", "b", "c"]
    assert plugin.preferred_calls[0].allocation_size == 1
    await manager.run_container_options(p, p["spec"]["containers"][0])
    assert plugin.pre_start_calls == [["c"]]


async def test_a_changed_request_is_refused(harness: Harness) -> None:
    manager = await harness.manager()
    await harness.plugin(initial=devices("a", "b"))
    harness.active.append(pod("p", container("c", 1)))
    assert await manager.admit(pod("p", container("c", 1))) is None
    with pytest.raises(DeviceManagerError, match=r'changed request for resource "example\.com/dev" from 1 to 2'):
        await manager.allocate(pod("p", container("c", 2)), container("c", 2))


async def test_a_plugin_that_goes_away_leaves_its_devices_unhealthy_then_the_node(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a", "b"))
    await plugin.stop()
    await eventually(lambda: manager.get_capacity()[1] == {RESOURCE: 0})
    assert manager.get_capacity()[0] == {RESOURCE: 2}
    refused = await manager.admit(pod("p", container("c", 1)))
    assert refused is not None
    assert "no healthy devices present; cannot allocate unhealthy devices example.com/dev" in refused[1]
    harness.clock.now += ENDPOINT_STOP_GRACE_PERIOD + 1
    assert manager.get_capacity() == ({}, {}, [RESOURCE])


async def test_a_plugin_that_restarts_registers_again(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a", "b"))
    await plugin.stop()
    await eventually(lambda: manager.get_capacity()[1] == {RESOURCE: 0})
    again = await harness.plugin(initial=devices("a", "b", "c"))
    assert again is not plugin
    await eventually(lambda: manager.get_capacity()[1] == {RESOURCE: 3})
    harness.clock.now += ENDPOINT_STOP_GRACE_PERIOD + 1
    assert manager.get_capacity() == ({RESOURCE: 3}, {RESOURCE: 3}, [])


async def test_a_restarted_manager_keeps_its_allocations(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a", "b"))
    p = pod("p", container("c", 1))
    harness.active.append(p)
    assert await manager.admit(p) is None
    held = manager.container_devices("p", "c")
    await plugin.stop()
    await manager.stop()

    harness.ready = False
    restarted = await harness.manager(running=(("p", "c"),))
    # Known from the checkpoint, at zero until the plugin is back.
    assert restarted.get_capacity() == ({RESOURCE: 0}, {RESOURCE: 0}, [])
    assert restarted.container_devices("p", "c") == held
    # The running container is re-admitted before its plugin returns, as upstream.
    assert await restarted.admit(p) is None
    options = await restarted.run_container_options(p, p["spec"]["containers"][0])
    assert options is not None
    assert options.envs == (("FAKE_DEVICES", ",".join(sorted(held[RESOURCE]))),)
    # Back, the plugin's other device is what a new pod gets.
    harness.ready = True
    await harness.plugin(initial=devices("a", "b"))
    q = pod("q", container("c", 1))
    harness.active.append(q)
    assert await restarted.admit(q) is None
    assert restarted.container_devices("q", "c")[RESOURCE].isdisjoint(held[RESOURCE])


async def test_a_corrupt_checkpoint_is_ignored(harness: Harness) -> None:
    plugin_dir = harness.root / "device-plugins"
    plugin_dir.mkdir()
    (plugin_dir / "kubelet_internal_checkpoint").write_text('{"Data": {}, "Checksum": 1}')
    manager = await harness.manager()
    assert manager.get_capacity() == ({}, {}, [])


async def test_a_pod_holding_devices_sees_them_in_allocatable(harness: Harness) -> None:
    # Upstream sanitizeNodeAllocatable: the Node may say 0 (its plugin not back after a restart), the predicates
    # must still admit the pod that holds the devices.
    manager = await harness.manager()
    await harness.plugin(initial=devices("a", "b"))
    p = pod("p", container("c", 2))
    harness.active.append(p)
    assert await manager.admit(p) is None
    node: dict[str, Any] = {"status": {"allocatable": {"cpu": "2", RESOURCE: "0"}}}
    seen = manager.sanitize_node(p, node)
    assert seen is not None
    assert seen["status"]["allocatable"] == {"cpu": "2", RESOURCE: "2"}
    assert node["status"]["allocatable"][RESOURCE] == "0"  # the agent's own copy is left alone
    assert manager.sanitize_node(pod("other", {"name": "x"}), node) is node
    enough: dict[str, Any] = {"status": {"allocatable": {RESOURCE: "5"}}}
    assert manager.sanitize_node(p, enough) is enough


# --- endpoints outside the plugin directory (upstream v1.34.4, seen on the testbed: docs/devices.md) ---------------


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("x.sock", "/k/device-plugins/x.sock"),
        ("../x.sock", "/k/x.sock"),
        ("/tmp/x.sock", "/k/device-plugins/tmp/x.sock"),
        ("a/../../x.sock", "/k/x.sock"),
        ("../../../../x.sock", "/x.sock"),
        ("", "/k/device-plugins"),
        ("./d//x.sock/", "/k/device-plugins/d/x.sock"),
    ],
)
def test_the_plugin_socket_is_the_endpoint_joined_and_cleaned_as_go_does(endpoint: str, path: str) -> None:
    assert plugin_socket_path("/k/device-plugins", endpoint) == path


async def test_an_absolute_endpoint_is_dialed_under_the_plugin_directory(harness: Harness) -> None:
    manager = await harness.manager()
    outside = harness.root / "abs.sock"
    # What upstream's filepath.Join makes of the absolute endpoint: the path again, under device-plugins.
    inside = harness.root / "device-plugins" / str(outside).lstrip("/")
    inside.parent.mkdir(parents=True)
    decoy = await harness.plugin(register=False, endpoint=str(outside), initial=devices("out"))
    plugin = await harness.plugin(register=False, endpoint=str(outside), socket=inside, initial=devices("in"))
    await plugin.register()
    await plugin.wait_pushed()
    assert (plugin.options_calls, decoy.options_calls) == (1, 0)
    await eventually(lambda: manager.get_capacity()[0] == {RESOURCE: 1})
    assert set(manager.allocatable_devices()[RESOURCE]) == {"in"}


async def test_an_endpoint_through_a_missing_directory_is_cleaned_before_the_dial(harness: Harness) -> None:
    manager = await harness.manager()
    # "a" does not exist: the kernel would refuse device-plugins/a/../../x.sock; Go's Join cleans it first.
    plugin = await harness.plugin(
        register=False, endpoint="a/../../up.sock", socket=harness.root / "up.sock", initial=devices("d")
    )
    await plugin.register()
    await plugin.wait_pushed()
    assert plugin.options_calls == 1
    await eventually(lambda: manager.get_capacity()[0] == {RESOURCE: 1})


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("x.sock\x00junk", 'x.sock\\x00junk": net/url: invalid control character in URL'),
        ("x.sock\njunk", 'x.sock\\njunk": net/url: invalid control character in URL'),
        ("x%zz.sock", 'x%zz.sock": invalid URL escape "%zz"'),
    ],
)
async def test_an_endpoint_grpc_go_cannot_parse_is_refused_without_a_dial(
    harness: Harness, endpoint: str, why: str
) -> None:
    manager = await harness.manager()
    # A socket where grpc's C core would go (it stops at the NUL, keeps the bad escape): never dialed.
    plugin = await harness.plugin(register=False, endpoint=endpoint, socket=harness.root / "device-plugins" / "x.sock")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register()
    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    directory = harness.root / "device-plugins"
    assert refused.value.details() == f'failed to dial device plugin: parse "passthrough:///{directory}/{why}'
    assert plugin.options_calls == 0
    assert manager.get_capacity() == ({}, {}, [])


async def test_an_empty_endpoint_fails_to_dial_with_upstreams_words(harness: Harness) -> None:
    manager = await harness.manager(dial_timeout=0.2)
    # Upstream dials the directory itself (connection refused) until its 10 s pass.
    plugin = await harness.plugin(register=False, endpoint="", socket=harness.root / "elsewhere.sock")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register()
    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    assert refused.value.details() == "failed to dial device plugin: context deadline exceeded"
    assert manager.get_capacity() == ({}, {}, [])
