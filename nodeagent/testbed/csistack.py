"""The testbed's CSI stack: a real CSI driver, its registration sidecar and the external-attacher, as host processes.

Per driver, on one testbed, laid out as upstream's DaemonSets lay them out under the kubelet's root dir:
```
 csi-mock      --csi-address=<root>/plugins/<driver>/csi.sock     the e2e suite's CSI mock driver (csimock/main.go)
 csi-registrar --plugin-registration-path=<root>/plugins_registry  serves <driver>-reg.sock (pluginregistration.v1)
 csi-attacher  --csi-address=<driver socket> --kubeconfig=admin    only for an attachRequired driver: turns the
                                                                   attach-detach controller's VolumeAttachments
                                                                   into ControllerPublishVolume, attached=true
```
Processes are started and ended by PID (testbed/processes.py, under the testbed's pids/ and logs/); `stop_all` ends
every one this module started on a testbed, and `Testbed.down` calls it. The driver keeps its volumes in memory:
volumes "1", "2" and "3" always exist, and `provision` makes more with CreateVolume, which the driver journals in
<testbed>/csi/<driver>.volumes and makes again, under the same IDs, when it restarts (`restart_driver`).
Node ID = driver name (the mock's NodeGetInfo), which ControllerPublishVolume checks against the VolumeAttachment's
node's CSINode entry. Every call the driver serves is logged as `gRPCCall: {json}` (read them with `driver_calls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csi.capability import volume_capability
from csi.client import connect
from csi.errors import CSIError
from csi.v1 import csi_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import processes
from nodeagent.testbed.layout import Layout
from nodeagent.testbed.processes import ComponentFailed
from nodeagent.testbed.versions import csi_attacher_path, csi_mock_path, csi_registrar_path

log = logging.getLogger(__name__)

Obj = dict[str, Any]

STORAGE = "storage.k8s.io"
# The prefixes of this module's process names under pids/: `stop_all` ends exactly those.
MOCK, REGISTRAR, ATTACHER = "csi-mock", "csi-registrar", "csi-attacher"
# What the mock driver reports as its version (service.VendorVersion of the e2e mock).
MOCK_VENDOR_VERSION = "0.3.0"
# Volumes the mock driver makes at every start (service.New): usable as volumeHandles without CreateVolume.
BUILTIN_VOLUMES = ("1", "2", "3")
# The driver's call log: one line per gRPC call at -v=3 (driver.logGRPC of the e2e mock).
CALL_MARKER = "gRPCCall: "


class CSIStackError(RuntimeError):
    """The CSI stack could not be started, or the driver refused a call made while provisioning."""


@dataclass(frozen=True)
class DriverSpec:
    """One CSI driver of the stack and the CSIDriver object it is announced with."""

    name: str
    attach_required: bool
    pod_info_on_mount: bool = True
    lifecycle_modes: tuple[str, ...] = ("Persistent", "Ephemeral")
    # More flags of csimock/main.go (--node-expand-required, --enable-topology, --attach-limit=N, ...).
    mock_args: tuple[str, ...] = ()


# The two attach modes, as the CSI tests use them.
ATTACH = DriverSpec(name="attach.csi-mock.nodeagent.test", attach_required=True)
NO_ATTACH = DriverSpec(name="noattach.csi-mock.nodeagent.test", attach_required=False)


def driver_socket(kubelet_root: Path, driver: str) -> Path:
    """Upstream's layout: the driver's DaemonSet mounts <root>/plugins/<driver>/ and serves csi.sock there."""
    return kubelet_root / "plugins" / driver / "csi.sock"


def registry_dir(kubelet_root: Path) -> Path:
    """Where the kubelet's plugin watcher looks for registration sockets."""
    return kubelet_root / "plugins_registry"


def registration_socket(kubelet_root: Path, driver: str) -> Path:
    """As node-driver-registrar names it: <plugins_registry>/<driver>-reg.sock."""
    return registry_dir(kubelet_root) / f"{driver}-reg.sock"


def process_name(kind: str, driver: str) -> str:
    return f"{kind}-{driver}"


def volumes_file(layout: Layout, driver: str) -> Path:
    """The driver's journal of the volumes it made, replayed when it restarts (csimock/main.go)."""
    return layout.root / "csi" / f"{driver}.volumes"


def faults_file(layout: Layout, driver: str) -> Path:
    """The faults the driver injects, read at every call (csimock/main.go): absent, none."""
    return layout.root / "csi" / f"{driver}.faults"


def set_faults(layout: Layout, driver: str, faults: dict[str, Obj]) -> None:
    """Faults per method short name, e.g. {"NodePublishVolume": {"code": 13, "message": "..."}} (or "sleep" seconds
    before, or {"abnormal": "message"} for NodeGetVolumeStats); {} clears them. Replaced atomically: the driver
    reads the file at every call."""
    path = faults_file(layout, driver)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.replace(path)


def mock_argv(binary: Path, spec: DriverSpec, socket: Path, volumes: Path, faults: Path | None = None) -> list[str]:
    argv = [str(binary), f"--csi-address={socket}", f"--drivername={spec.name}", f"--volumes-file={volumes}", "--v=3"]
    if faults is not None:
        argv.append(f"--faults-file={faults}")
    if spec.attach_required:
        argv.append("--enable-attach")
    return [*argv, *spec.mock_args]


def registrar_argv(binary: Path, socket: Path, registry: Path) -> list[str]:
    return [
        str(binary),
        f"--csi-address={socket}",
        # A host process: the path the kubelet dials is the one the driver serves on.
        f"--kubelet-registration-path={socket}",
        f"--plugin-registration-path={registry}",
        "--v=2",
    ]


def attacher_argv(binary: Path, socket: Path, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--csi-address={socket}",
        f"--kubeconfig={kubeconfig}",
        # One attacher per driver and testbed: no leader election (its default, said out loud).
        "--leader-election=false",
        "--timeout=15s",
        # A failed ControllerPublish is retried after 1 s, not minutes, so tests see the retry.
        "--retry-interval-start=1s",
        "--retry-interval-max=5s",
        "--v=4",
    ]


def csidriver_object(spec: DriverSpec) -> Obj:
    """The CSIDriver object of `spec`: attachRequired, podInfoOnMount and the lifecycle modes it serves."""
    return {
        "apiVersion": f"{STORAGE}/v1",
        "kind": "CSIDriver",
        "metadata": {"name": spec.name},
        "spec": {
            "attachRequired": spec.attach_required,
            "podInfoOnMount": spec.pod_info_on_mount,
            "volumeLifecycleModes": list(spec.lifecycle_modes),
        },
    }


def persistent_volume(
    name: str,
    *,
    driver: str,
    volume_handle: str,
    capacity_bytes: int,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    fs_type: str = "ext4",
    volume_attributes: dict[str, str] | None = None,
    storage_class: str = "",
    reclaim_policy: str = "Retain",
) -> Obj:
    """A PV with a CSI source, as external-provisioner would write it for a volume CreateVolume returned."""
    csi: Obj = {"driver": driver, "volumeHandle": volume_handle, "fsType": fs_type}
    if volume_attributes:
        csi["volumeAttributes"] = dict(volume_attributes)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": str(capacity_bytes)},
            "accessModes": list(access_modes),
            "persistentVolumeReclaimPolicy": reclaim_policy,
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "csi": csi,
        },
    }


def parse_calls(text: str) -> list[Obj]:
    """The driver's call log: each `gRPCCall: {json}` line as {"Method", "Request", "Response", "Error", ...}."""
    calls = []
    for line in text.splitlines():
        _, marker, payload = line.partition(CALL_MARKER)
        if marker:
            with contextlib.suppress(ValueError):
                calls.append(json.loads(payload))
    return calls


def driver_log(layout: Layout, driver: str) -> Path:
    return layout.logs / f"{process_name(MOCK, driver)}.log"


def driver_calls(layout: Layout, driver: str) -> list[Obj]:
    try:
        return parse_calls(driver_log(layout, driver).read_text(errors="replace"))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class DriverStack:
    spec: DriverSpec
    kubelet_root: Path
    socket: Path
    registration_socket: Path
    mock: processes.Process
    registrar: processes.Process
    attacher: processes.Process | None


async def _wait_until(check: Callable[[], Awaitable[bool]], timeout: float, what: str, proc: processes.Process) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if not proc.alive():
            raise ComponentFailed(proc.name, "exited", proc.log_path)
        if time.monotonic() > deadline:
            raise ComponentFailed(proc.name, f"not ready after {timeout:.0f}s ({what})", proc.log_path)
        await asyncio.sleep(0.05)


async def probe(socket: Path, timeout: float = 2.0) -> bool:
    """The driver answers Identity.Probe with ready."""
    try:
        async with connect(str(socket), timeout=timeout) as plugin:
            return await plugin.identity.probe()
    except CSIError:
        return False


async def start_driver(
    layout: Layout, spec: DriverSpec, *, kubelet_root: Path | None = None, timeout: float = 30.0
) -> DriverStack:
    """Start the driver, then its registrar (which asks it for its name), then its attacher if it needs one; each
    checked ready before the next. A part that fails is reported with its log; the parts already up are stopped.

    The sockets go under `kubelet_root`: nodeagent's root dir by default, the upstream kubelet's
    (upstreamkubelet.root_dir) when that one is the node."""
    root = kubelet_root or layout.kubelet_root
    binaries = (csi_mock_path(), csi_registrar_path(), *((csi_attacher_path(),) if spec.attach_required else ()))
    missing = [str(b) for b in binaries if not b.exists()]
    if missing:
        raise CSIStackError(f"not built: {', '.join(missing)}: run `nodeagent testbed install --with-csi`")
    socket = driver_socket(root, spec.name)
    reg_socket = registration_socket(root, spec.name)
    socket.parent.mkdir(parents=True, exist_ok=True)
    registry_dir(root).mkdir(parents=True, exist_ok=True)
    volumes_file(layout, spec.name).parent.mkdir(parents=True, exist_ok=True)
    started: list[processes.Process] = []
    try:
        mock = await _start_mock(layout, spec, socket, timeout)
        started.append(mock)
        registrar = processes.start(
            process_name(REGISTRAR, spec.name),
            registrar_argv(csi_registrar_path(), socket, registry_dir(root)),
            pid_dir=layout.pids,
            log_dir=layout.logs,
        )
        started.append(registrar)

        async def registered() -> bool:
            return reg_socket.is_socket()

        await _wait_until(registered, timeout, f"socket {reg_socket}", registrar)
        attacher = await _start_attacher(layout, spec, socket, timeout) if spec.attach_required else None
    except BaseException:
        for proc in reversed(started):
            processes.stop(proc, pid_dir=layout.pids)
        _remove_sockets(socket, reg_socket)
        raise
    log.info("csi driver started driver=%s socket=%s attach=%s", spec.name, socket, spec.attach_required)
    return DriverStack(spec, root, socket, reg_socket, mock, registrar, attacher)


async def _start_mock(layout: Layout, spec: DriverSpec, socket: Path, timeout: float) -> processes.Process:
    mock = processes.start(
        process_name(MOCK, spec.name),
        mock_argv(csi_mock_path(), spec, socket, volumes_file(layout, spec.name), faults_file(layout, spec.name)),
        pid_dir=layout.pids,
        log_dir=layout.logs,
    )
    try:
        await _wait_until(lambda: probe(socket), timeout, f"Probe on {socket}", mock)
    except BaseException:
        processes.stop(mock, pid_dir=layout.pids)
        raise
    return mock


async def _start_attacher(layout: Layout, spec: DriverSpec, socket: Path, timeout: float) -> processes.Process:
    # The log is appended to across restarts: only what this attacher writes counts.
    offset = _size(layout.logs / f"{process_name(ATTACHER, spec.name)}.log")
    attacher = processes.start(
        process_name(ATTACHER, spec.name),
        attacher_argv(csi_attacher_path(), socket, layout.admin_kubeconfig),
        pid_dir=layout.pids,
        log_dir=layout.logs,
    )
    try:
        await _wait_until(lambda: _attacher_running(attacher, offset), timeout, "controller start", attacher)
    except BaseException:
        processes.stop(attacher, pid_dir=layout.pids)
        raise
    return attacher


async def restart_driver(layout: Layout, stack: DriverStack, *, timeout: float = 30.0) -> DriverStack:
    """Kill the driver (SIGKILL: no clean-up of its own), start it again, and the attacher with it, which exits when
    it loses the driver (as upstream's, whose container is then restarted). The registrar keeps running. The driver
    knows the volumes it made before (its --volumes-file), but nothing of what it staged or published."""
    spec = stack.spec
    mock = processes.load(layout.pids, process_name(MOCK, spec.name))
    if mock is not None:
        if mock.alive():
            os.kill(mock.pid, signal.SIGKILL)
        processes.stop(mock, pid_dir=layout.pids)
    attacher = processes.load(layout.pids, process_name(ATTACHER, spec.name))
    if attacher is not None:
        processes.stop(attacher, pid_dir=layout.pids)
    new_mock = await _start_mock(layout, spec, stack.socket, timeout)
    new_attacher = await _start_attacher(layout, spec, stack.socket, timeout) if spec.attach_required else None
    return dataclasses.replace(stack, mock=new_mock, attacher=new_attacher)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def _attacher_running(proc: processes.Process, offset: int) -> bool:
    # The attacher logs this once it probed the driver, read its name and capabilities and built its handler.
    try:
        with proc.log_path.open("rb") as log_file:
            log_file.seek(offset)
            text = log_file.read().decode(errors="replace")
    except FileNotFoundError:
        return False
    return "Starting CSI attacher" in text


def _remove_sockets(socket: Path, reg_socket: Path) -> None:
    # The registrar and the mock remove their own sockets on SIGTERM; a SIGKILL or a failed start leaves them.
    for path in (reg_socket, socket):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        socket.parent.rmdir()


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `--flag=value` in `argv`, or None."""
    for arg in argv:
        if arg.startswith(f"{flag}="):
            return arg.removeprefix(f"{flag}=")
    return None


def stop_driver(layout: Layout, driver: str) -> None:
    """Stop the attacher, the registrar (its socket gone, the kubelet deregisters the driver), then the driver; and
    remove the sockets a kill left, found in the command lines recorded when they started."""
    sockets: list[Path] = []
    for kind in (ATTACHER, REGISTRAR, MOCK):
        proc = processes.load(layout.pids, process_name(kind, driver))
        if proc is None:
            continue
        processes.stop(proc, pid_dir=layout.pids)
        if kind == REGISTRAR and (registry := flag_value(proc.argv, "--plugin-registration-path")):
            sockets.append(Path(registry) / f"{driver}-reg.sock")
        if kind == MOCK and (socket := flag_value(proc.argv, "--csi-address")):
            sockets.append(Path(socket))
    for path in sockets:
        path.unlink(missing_ok=True)
        if path.name == "csi.sock":
            with contextlib.suppress(OSError):
                path.parent.rmdir()


def started_drivers(layout: Layout) -> list[str]:
    """The drivers this module has processes recorded for on the testbed."""
    drivers = set()
    for path in layout.pids.glob("csi-*.json"):
        for kind in (ATTACHER, REGISTRAR, MOCK):
            if path.stem.startswith(kind + "-"):
                drivers.add(path.stem.removeprefix(kind + "-"))
    return sorted(drivers)


def stop_all(layout: Layout) -> None:
    for driver in started_drivers(layout):
        stop_driver(layout, driver)


async def create_csidriver(admin: KubeClient, spec: DriverSpec) -> Obj:
    return await admin.create(paths.api_path("csidrivers", group=STORAGE), csidriver_object(spec))


async def delete_csidriver(admin: KubeClient, name: str) -> None:
    with contextlib.suppress(NotFound):
        await admin.delete(paths.api_path("csidrivers", group=STORAGE, name=name))


@dataclass(frozen=True)
class ProvisionedVolume:
    pv: Obj
    volume_id: str
    capacity_bytes: int
    volume_context: dict[str, str]


async def create_volume(
    socket: Path, name: str, *, capacity_bytes: int, access_modes: Sequence[str], fs_type: str, timeout: float = 10.0
) -> csi_pb2.Volume:
    """Controller.CreateVolume on the driver's socket, one capability per access mode, as external-provisioner
    calls it for a claim."""
    capabilities = [volume_capability(mode, fs_type=fs_type) for mode in access_modes]
    try:
        async with connect(str(socket), timeout=timeout) as plugin:
            return await plugin.controller.create_volume(name, capabilities, required_bytes=capacity_bytes)
    except CSIError as exc:
        raise CSIStackError(f"CreateVolume {name} on {socket}: {exc}") from exc


async def provision(
    admin: KubeClient,
    stack: DriverStack,
    pv_name: str,
    *,
    capacity_bytes: int = 1 << 30,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    fs_type: str = "ext4",
    storage_class: str = "",
) -> ProvisionedVolume:
    """What external-provisioner does for a claim, without a StorageClass: CreateVolume (named after the PV, so a
    retry returns the same volume), then the PV with its CSI source. Bind a claim to it with volumeName."""
    driver = stack.spec.name
    volume = await create_volume(
        stack.socket,
        pv_name,
        capacity_bytes=capacity_bytes,
        access_modes=access_modes,
        fs_type=fs_type,
    )
    context = dict(volume.volume_context)
    pv = persistent_volume(
        pv_name,
        driver=driver,
        volume_handle=volume.volume_id,
        capacity_bytes=volume.capacity_bytes or capacity_bytes,
        access_modes=access_modes,
        fs_type=fs_type,
        volume_attributes=context,
        storage_class=storage_class,
    )
    created = await admin.create(paths.api_path("persistentvolumes"), pv)
    return ProvisionedVolume(created, volume.volume_id, volume.capacity_bytes, context)
