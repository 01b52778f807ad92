"""The CSI registration handler: upstream's validation texts, the registry, NodeGetInfo and the node's facts."""

from __future__ import annotations

import pytest

from csi.errors import UnavailableError
from csi.registration.handler import HandlerError
from csi.registration.versions import parse_generic
from nodeagent.pluginmanager.csihandler import CSIRegistrationHandler
from nodeagent.pluginmanager.nodeinfo import DriverNodeInfo, NodeInfoError
from nodeagent.pluginmanager.registry import CSIDriverRegistry, RegisteredDriver


class RecordingNodeInfo:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail: str | None = None

    async def install_driver(self, driver: str, info: DriverNodeInfo) -> None:
        self.calls.append(("install", driver, info.node_id))
        if self.fail:
            raise NodeInfoError(self.fail)

    async def uninstall_driver(self, driver: str) -> None:
        self.calls.append(("uninstall", driver))


class Driver:
    def __init__(self, info: DriverNodeInfo | Exception) -> None:
        self.info = info
        self.endpoints: list[str] = []

    async def __call__(self, endpoint: str) -> DriverNodeInfo:
        self.endpoints.append(endpoint)
        if isinstance(self.info, Exception):
            raise self.info
        return self.info


def handler(
    registry: CSIDriverRegistry, node_info: RecordingNodeInfo, driver: Driver | None = None
) -> CSIRegistrationHandler:
    return CSIRegistrationHandler(registry, node_info, driver or Driver(DriverNodeInfo("id-1", 0, {})))


@pytest.mark.parametrize(
    ("versions", "existing", "message"),
    [
        (
            [],
            None,
            'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Plugin returned an empty list for '
            "supported versions",
        ),
        (
            ["0.3.0"],
            None,
            'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. None of the versions specified ["0.3.0"] '
            "are supported. err=highest supported version reported is 0.3.0, must be v1.x",
        ),
        (
            ["1.0.0"],
            "1.2.0",
            'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Another driver with the same name is '
            'already registered with a higher supported version: "1.2.0"',
        ),
        (
            ["1.2.0"],
            "1.2.0",
            'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Another driver with the same name is '
            'already registered with a higher supported version: "1.2.0"',
        ),
    ],
)
async def test_validation_refusals(versions: list[str], existing: str | None, message: str) -> None:
    registry = CSIDriverRegistry()
    if existing:
        registry.set(RegisteredDriver("d.csi", "/old.sock", parse_generic(existing)))
    with pytest.raises(HandlerError) as raised:
        await handler(registry, RecordingNodeInfo()).validate_plugin("d.csi", "/csi.sock", versions)
    assert str(raised.value) == f"validation failed for CSI Driver d.csi at endpoint /csi.sock: {message}"


async def test_a_higher_version_than_the_registered_one_is_valid() -> None:
    registry = CSIDriverRegistry()
    registry.set(RegisteredDriver("d.csi", "/old.sock", parse_generic("1.0.0")))
    await handler(registry, RecordingNodeInfo()).validate_plugin("d.csi", "/csi.sock", ["1.1.0"])


async def test_register_records_the_driver_and_its_node_info() -> None:
    registry, node_info = CSIDriverRegistry(), RecordingNodeInfo()
    driver = Driver(DriverNodeInfo("id-1", 4, {"z": "a"}))
    await handler(registry, node_info, driver).register_plugin("d.csi", "/csi.sock", ["1.0.0", "1.5.0"])
    assert driver.endpoints == ["/csi.sock"]
    assert node_info.calls == [("install", "d.csi", "id-1")]
    assert registry.endpoint("d.csi") == "/csi.sock"
    assert str(registry.get("d.csi").highest_supported_version) == "1.5.0"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("driver_error", "install_error", "message"),
    [
        (UnavailableError("/csi.v1.Node/NodeGetInfo", None, "connection refused"), None, "connection refused"),
        (None, "error updating Node object", "error updating Node object"),
    ],
)
async def test_a_failed_registration_takes_the_driver_out_again(
    driver_error: Exception | None, install_error: str | None, message: str
) -> None:
    registry, node_info = CSIDriverRegistry(), RecordingNodeInfo()
    node_info.fail = install_error
    driver = Driver(driver_error or DriverNodeInfo("id-1", 0, {}))
    with pytest.raises(HandlerError, match=message):
        await handler(registry, node_info, driver).register_plugin("d.csi", "/csi.sock", ["1.0.0"])
    assert registry.endpoint("d.csi") is None
    assert node_info.calls[-1] == ("uninstall", "d.csi")


async def test_deregister_forgets_the_driver_and_its_node_info() -> None:
    registry, node_info = CSIDriverRegistry(), RecordingNodeInfo()
    registry.set(RegisteredDriver("d.csi", "/csi.sock", parse_generic("1.0.0")))
    await handler(registry, node_info).deregister_plugin("d.csi", "/csi.sock")
    assert registry.endpoint("d.csi") is None and registry.names() == []
    assert node_info.calls == [("uninstall", "d.csi")]


async def test_an_endpoint_grpc_go_cannot_parse_fails_registration_without_a_dial() -> None:
    # The upstream kubelet v1.34.4's words for a CSI plugin whose endpoint holds a NUL (docs/devices.md); an endpoint
    # in any other directory is dialed as it is.
    registry, node_info = CSIDriverRegistry(), RecordingNodeInfo()
    driver = Driver(DriverNodeInfo("id-1", 0, {}))
    with pytest.raises(HandlerError) as raised:
        await handler(registry, node_info, driver).register_plugin("d.csi", "/tmp/d.sock\x00junk", ["1.0.0"])
    assert str(raised.value) == (
        'parse "passthrough:////tmp/d.sock\\x00junk": net/url: invalid control character in URL'
    )
    assert driver.endpoints == []
    assert registry.endpoint("d.csi") is None
    assert node_info.calls == [("uninstall", "d.csi")]
    await handler(registry, node_info, driver).register_plugin("d.csi", "../elsewhere/d.sock", ["1.0.0"])
    assert driver.endpoints == ["../elsewhere/d.sock"]
