"""The plugin watcher's loop against real registration servers on unix sockets under a real (inotify-watched) dir.

A recording handler stands in for the CSI handler (its calls are queued, so tests await them). Covered: a socket
present at start and one created later are registered and told so; a removed socket is deregistered; a socket
recreated (driver restart) is deregistered and registered again; refusals reach the plugin with upstream's texts,
and a refused plugin is asked again after the backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from csi.registration.handler import CSI_PLUGIN, HandlerError
from csi.registration.v1.api_pb2 import InfoRequest
from csi.registration.v1.api_pb2_grpc import RegistrationStub
from csi.registration.watcher import PluginWatcher, scan_sockets
from tests.unit.csi.registration.registrar import Registrar

TIMEOUT = 30.0  # a ceiling on each wait, not a timing: the CI run of 2026-11-30 14:57 timed out at 10 s under load


class RecordingHandler:
    def __init__(self) -> None:
        self.calls: asyncio.Queue[tuple[str, ...]] = asyncio.Queue()
        self.refuse_validation: str | None = None
        self.refuse_registration: str | None = None

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.calls.put_nowait(("validate", name, endpoint, ",".join(versions)))
        if self.refuse_validation is not None:
            raise HandlerError(self.refuse_validation)

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.calls.put_nowait(("register", name, endpoint, ",".join(versions)))
        if self.refuse_registration is not None:
            raise HandlerError(self.refuse_registration)

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        self.calls.put_nowait(("deregister", name, endpoint))

    async def next(self) -> tuple[str, ...]:
        return await asyncio.wait_for(self.calls.get(), TIMEOUT)


@pytest.fixture
def registry() -> Iterator[Path]:
    # Not tmp_path: a unix socket path must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="plugreg-") as path:
        registry = Path(path) / "plugins_registry"
        registry.mkdir()
        yield registry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def handler() -> RecordingHandler:
    return RecordingHandler()


@pytest_asyncio.fixture(loop_scope="session")
async def registrars() -> AsyncIterator[list[Registrar]]:
    started: list[Registrar] = []
    yield started
    for registrar in started:
        await registrar.stop()


async def _registrar(registrars: list[Registrar], socket: Path, **kwargs: object) -> Registrar:
    registrar = Registrar(socket, **kwargs)  # type: ignore[arg-type]
    await registrar.start()
    registrars.append(registrar)
    return registrar


@contextlib.asynccontextmanager
async def _running(watcher: PluginWatcher) -> AsyncIterator[PluginWatcher]:
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _reconciles(watcher: PluginWatcher, count: int) -> None:
    for _ in range(count):
        watcher.reconciled.clear()
        await asyncio.wait_for(watcher.reconciled.wait(), TIMEOUT)


def _watcher(registry: Path, handler: RecordingHandler, clock: Clock, resync: float = 0.2) -> PluginWatcher:
    return PluginWatcher(str(registry), handlers={CSI_PLUGIN: handler}, resync=resync, clock=clock, dial_timeout=2.0)


async def test_sockets_at_start_and_later_register_and_removal_deregisters(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    early = await _registrar(registrars, registry / "early.sock", name="early.csi", versions=("0.3.0", "1.2.0"))
    # resync is long: the later socket must be found through inotify, not the periodic scan.
    async with _running(_watcher(registry, handler, clock, resync=60.0)) as watcher:
        assert await handler.next() == ("validate", "early.csi", "/csi/csi.sock", "0.3.0,1.2.0")
        assert await handler.next() == ("register", "early.csi", "/csi/csi.sock", "0.3.0,1.2.0")
        status = await early.status()
        assert status.plugin_registered and status.error == ""

        later = await _registrar(
            registrars,
            registry / "sub" / "later.sock" if False else registry / "later.sock",
            name="later.csi",
            endpoint="",
        )
        assert await handler.next() == ("validate", "later.csi", str(registry / "later.sock"), "1.0.0")
        # An empty endpoint means the registration socket itself, as upstream.
        assert await handler.next() == ("register", "later.csi", str(registry / "later.sock"), "1.0.0")
        assert (await later.status()).plugin_registered
        assert sorted(p.name for p in watcher.registered().values()) == ["early.csi", "later.csi"]

        await early.stop()
        assert await handler.next() == ("deregister", "early.csi", "/csi/csi.sock")
        assert [p.name for p in watcher.registered().values()] == ["later.csi"]


async def test_a_recreated_socket_deregisters_then_registers_again(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    first = await _registrar(registrars, registry / "drv.sock", name="drv.csi")
    async with _running(_watcher(registry, handler, clock, resync=60.0)) as watcher:
        assert (await handler.next())[0] == "validate"
        assert (await handler.next())[0] == "register"
        assert (await first.status()).plugin_registered
        generation = watcher.registered()[str(registry / "drv.sock")].generation

        # The driver restarts: its sidecar removes and creates the socket again, faster than any debounce.
        await first.stop()
        second = await _registrar(registrars, registry / "drv.sock", name="drv.csi")
        calls = [await handler.next() for _ in range(3)]
        assert [call[0] for call in calls] == ["deregister", "validate", "register"]
        assert (await second.status()).plugin_registered
        assert second.get_info_calls == 1
        assert watcher.registered()[str(registry / "drv.sock")].generation > generation


async def test_a_socket_replaced_in_place_registers_again(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    # A socket replaced without ever being missing (bound elsewhere, renamed over the old one): a new inode.
    old = await _registrar(registrars, registry / "drv.sock", name="drv.csi")
    # Another client still connected to the old socket (in a CI run, a channel not yet torn down): grpc's shared
    # subchannel pool then sent the new registration to the old server, and the new one never heard.
    async with grpc.aio.insecure_channel(f"unix://{registry / 'drv.sock'}") as other:
        assert (await RegistrationStub(other).GetInfo(InfoRequest())).name == "drv.csi"
        async with _running(_watcher(registry, handler, clock, resync=0.2)):
            assert [(await handler.next())[0] for _ in range(2)] == ["validate", "register"]
            assert (await old.status()).plugin_registered
            staging = registry / ".staging.sock"  # hidden: ignored until renamed
            new = await _registrar(registrars, staging, name="drv.csi")
            staging.rename(registry / "drv.sock")
            new.socket = registry / "drv.sock"
            assert [(await handler.next())[0] for _ in range(3)] == ["deregister", "validate", "register"]
            assert (await new.status()).plugin_registered
            assert new.get_info_calls == 1 and old.get_info_calls == 2  # the other client's, and the first register
            assert old.statuses.empty()


async def test_a_refused_validation_is_sent_to_the_plugin_and_retried_after_the_backoff(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    handler.refuse_validation = "too old"
    registrar = await _registrar(registrars, registry / "drv.sock", name="drv.csi")
    async with _running(_watcher(registry, handler, clock, resync=0.05)) as watcher:
        assert (await handler.next())[0] == "validate"
        status = await registrar.status()
        assert not status.plugin_registered
        assert status.error == "RegisterPlugin error -- plugin validation failed with err: too old"
        assert watcher.registered() == {}

        # Within the backoff (500 ms on the injected clock) nothing is retried, however many reconciles pass.
        await _reconciles(watcher, 5)
        assert handler.calls.empty() and registrar.get_info_calls == 1

        handler.refuse_validation = None
        clock.now += 0.6
        assert [(await handler.next())[0] for _ in range(2)] == ["validate", "register"]
        assert (await registrar.status()).plugin_registered
        assert registrar.get_info_calls == 2


async def test_a_failed_registration_is_reported_and_not_retried_for_the_same_socket(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    handler.refuse_registration = "NodeGetInfo failed"
    registrar = await _registrar(registrars, registry / "drv.sock", name="drv.csi")
    async with _running(_watcher(registry, handler, clock, resync=0.05)) as watcher:
        assert [(await handler.next())[0] for _ in range(2)] == ["validate", "register"]
        status = await registrar.status()
        assert not status.plugin_registered
        assert status.error == "RegisterPlugin error -- plugin registration failed with err: NodeGetInfo failed"
        # As upstream: recorded before the handler ran, so no retry until the socket is created again, even once
        # the failure's backoff has passed...
        await _reconciles(watcher, 3)
        clock.now += 300
        await _reconciles(watcher, 3)
        assert handler.calls.empty() and registrar.get_info_calls == 1
        # ...and its removal is a deregistration.
        await registrar.stop()
        assert (await handler.next())[0] == "deregister"


async def test_an_unknown_plugin_type_is_refused_with_upstreams_text(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    socket = registry / "dev.sock"
    registrar = await _registrar(registrars, socket, name="gpu", plugin_type="DevicePlugin")
    async with _running(_watcher(registry, handler, clock)) as watcher:
        status = await registrar.status()
        assert not status.plugin_registered
        assert (
            status.error
            == f"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket {socket}"
        )
        assert watcher.registered() == {}
        assert handler.calls.empty()


async def test_the_directory_is_created_and_non_sockets_and_hidden_names_ignored(registry: Path) -> None:
    os.rmdir(registry)
    watcher = PluginWatcher(str(registry), resync=0.05)
    async with _running(watcher):
        await _reconciles(watcher, 2)
    assert stat.S_ISDIR(os.stat(registry).st_mode)
    assert scan_sockets(str(registry)).sockets == {}
    (registry / "plain-file").write_text("x")
    (registry / ".hidden").mkdir()
    assert scan_sockets(str(registry)).sockets == {}


async def test_a_link_to_a_socket_outside_the_directory_registers_through_the_link(
    registry: Path, handler: RecordingHandler, clock: Clock, registrars: list[Registrar]
) -> None:
    # Upstream stats the path (os.Stat follows links): the kubelet v1.34.4 registered such a plugin and dialed the
    # link. A link to nothing, or to something that is not a socket, is no plugin.
    outside = registry.parent / "outside-reg.sock"
    await _registrar(registrars, outside, name="linked.csi")
    (registry / "linked.sock").symlink_to(outside)
    (registry / "dangling.sock").symlink_to(registry.parent / "gone.sock")
    (registry.parent / "plain").write_text("x")
    (registry / "to-plain.sock").symlink_to(registry.parent / "plain")
    assert set(scan_sockets(str(registry)).sockets) == {str(registry / "linked.sock")}
    async with _running(_watcher(registry, handler, clock)) as watcher:
        assert await handler.next() == ("validate", "linked.csi", "/csi/csi.sock", "1.0.0")
        assert await handler.next() == ("register", "linked.csi", "/csi/csi.sock", "1.0.0")
        assert list(watcher.registered()) == [str(registry / "linked.sock")]
        (registry / "linked.sock").unlink()
        assert await handler.next() == ("deregister", "linked.csi", "/csi/csi.sock")
