"""The systemd cgroup driver: the unit properties libcontainer's systemd manager sends for what the kubelet sets
(genV2ResourcesProperties, addCpuQuota, Apply), the unit and parent names of the kubelet's libctCgroupConfig, and the
calls the driver makes to systemd in order (Create = start, controllers, properties, files; Destroy = stop, reset).

The calls go to a recording `SystemdBus` (the same Protocol as DBusSystemd); the real bus is exercised in the VM
(tests/integration/test_vm_systemd_cgroups.py). The cgroup trees are directories shaped like a v2 mount.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from jeepney import new_method_call
from jeepney.low_level import Parser

from nodeagent.kuberuntime.cgroups import PodCgroupError, PodResourceConfig, pod_resource_config
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups
from nodeagent.kuberuntime.systemd_cgroups import (
    SystemdCgroupManager,
    SystemdPodCgroups,
    SystemdResources,
    apply_properties,
    cpu_quota_properties,
    resource_properties,
    resources_for,
    unit_and_parent,
)
from nodeagent.kuberuntime.systemd_dbus import (
    NO_SUCH_UNIT,
    SYSTEMD,
    UNIT_EXISTS,
    Property,
    SystemdError,
    version_number,
)

INFINITY = 2**64 - 1
POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1.slice"
POD_UNIT = "kubepods-burstable-pod1b4e28ba_2fa1.slice"


class RecordingSystemd:
    """SystemdBus recording its calls; a started slice gets its cgroup directory, as systemd makes it."""

    def __init__(self, root: Path, *, exists: Sequence[str] = (), version: str = "252.39-1~deb12u1") -> None:
        self.root = root
        self.calls: list[tuple[str, str, list[Property]]] = []
        self._exists = set(exists)
        self._version = version

    def _directory(self, name: str) -> Path:
        parts = name.removesuffix(".slice").split("-")
        return self.root.joinpath(*("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts))))

    def start_transient_unit(self, name: str, properties: Sequence[Property]) -> None:
        self.calls.append(("start", name, list(properties)))
        if name in self._exists:
            raise SystemdError(f"Unit {name} was already loaded or has a fragment file.", UNIT_EXISTS)
        self._exists.add(name)
        self._directory(name).mkdir(parents=True, exist_ok=True)

    def set_unit_properties(self, name: str, properties: Sequence[Property]) -> None:
        self.calls.append(("set", name, list(properties)))

    def stop_unit(self, name: str) -> None:
        self.calls.append(("stop", name, []))
        if name not in self._exists:
            raise SystemdError(f"Unit {name} not loaded.", NO_SUCH_UNIT)
        self._exists.discard(name)
        self._directory(name).rmdir()

    def reset_failed_unit(self, name: str) -> None:
        self.calls.append(("reset-failed", name, []))
        raise SystemdError(f"Unit {name} not loaded.", NO_SUCH_UNIT)

    def version(self) -> str:
        return self._version


def v2_tree(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


# --- the properties, against libcontainer's outputs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "period", "version", "expected"),
    [
        (0, 0, 252, []),  # neither set: nothing (a Burstable pod without cpu limits)
        (10000, 100000, 252, [("CPUQuotaPeriodUSec", 100000), ("CPUQuotaPerSecUSec", 100000)]),  # 100m
        (50000, 100000, 252, [("CPUQuotaPeriodUSec", 100000), ("CPUQuotaPerSecUSec", 500000)]),  # 500m
        # 1.5 ms per 100 ms is 15000 us per second: systemd keeps whole percents, so up to 20000
        (1500, 100000, 252, [("CPUQuotaPeriodUSec", 100000), ("CPUQuotaPerSecUSec", 20000)]),
        (25000, 50000, 252, [("CPUQuotaPeriodUSec", 50000), ("CPUQuotaPerSecUSec", 500000)]),
        (-1, 100000, 252, [("CPUQuotaPeriodUSec", 100000), ("CPUQuotaPerSecUSec", INFINITY)]),  # unlimited
        (0, 100000, 252, [("CPUQuotaPeriodUSec", 100000), ("CPUQuotaPerSecUSec", INFINITY)]),
        (20000, 0, 252, [("CPUQuotaPerSecUSec", 200000)]),  # the default period assumed
        (10000, 100000, 241, [("CPUQuotaPerSecUSec", 100000)]),  # no CPUQuotaPeriodUSec before v242
    ],
)
def test_cpu_quota_as_libcontainer_add_cpu_quota(
    quota: int, period: int, version: int, expected: list[tuple[str, int]]
) -> None:
    assert cpu_quota_properties(quota, period, version) == [(name, ("t", value)) for name, value in expected]


@pytest.mark.parametrize(
    ("config", "pids", "expected"),
    [
        # Guaranteed 100m / 32Mi: shares 102 -> weight 4
        (
            PodResourceConfig(cpu_shares=102, cpu_quota=10000, cpu_period=100000, memory=32 << 20),
            None,
            [
                ("MemoryMax", 32 << 20),
                ("CPUWeight", 4),
                ("CPUQuotaPeriodUSec", 100000),
                ("CPUQuotaPerSecUSec", 100000),
            ],
        ),
        # Burstable, requests cpu 50m, limits memory 64Mi
        (PodResourceConfig(cpu_shares=51, memory=64 << 20), None, [("MemoryMax", 64 << 20), ("CPUWeight", 2)]),
        # BestEffort with podPidsLimit 1024
        (PodResourceConfig(cpu_shares=2), 1024, [("CPUWeight", 1), ("TasksMax", 1024)]),
        # a memory limit taken away (resize): infinity, as libcontainer's uint64(-1)
        (PodResourceConfig(memory=0), None, [("MemoryMax", INFINITY)]),
        (PodResourceConfig(), None, []),
    ],
)
def test_resource_properties_as_libcontainer_gen_v2(
    config: PodResourceConfig, pids: int | None, expected: list[tuple[str, int]]
) -> None:
    properties = resource_properties(resources_for(config, pids_limit=pids), 252)
    assert properties == [(name, ("t", value)) for name, value in expected]


def test_unlimited_pids_is_infinity_and_zero_is_unset() -> None:
    assert resource_properties(SystemdResources(pids_limit=-1), 252) == [("TasksMax", ("t", INFINITY))]
    assert resource_properties(SystemdResources(pids_limit=0), 252) == []


def test_a_slice_wants_its_parent_and_a_scope_is_delegated_into_it() -> None:
    accounting: list[Property] = [
        ("MemoryAccounting", ("b", True)),
        ("CPUAccounting", ("b", True)),
        ("IOAccounting", ("b", True)),
        ("TasksAccounting", ("b", True)),
        ("DefaultDependencies", ("b", False)),
    ]
    assert apply_properties(POD_UNIT, "kubepods-burstable.slice") == [
        ("Description", ("s", f"libcontainer container {POD_UNIT}")),
        ("Wants", ("as", ["kubepods-burstable.slice"])),
        *accounting,
    ]
    assert apply_properties("cri-containerd-abc.scope", POD_UNIT) == [
        ("Description", ("s", "libcontainer container cri-containerd-abc.scope")),
        ("Slice", ("s", POD_UNIT)),
        ("Delegate", ("b", True)),
        *accounting,
    ]


@pytest.mark.parametrize(
    ("cgroup", "unit", "parent"),
    [
        ("/kubepods.slice", "kubepods.slice", "-.slice"),
        ("/kubepods.slice/kubepods-besteffort.slice", "kubepods-besteffort.slice", "kubepods.slice"),
        (POD, POD_UNIT, "kubepods-burstable.slice"),
        ("/kubepods.slice/kubepods-pod1.slice/", "kubepods-pod1.slice", "kubepods.slice"),
    ],
)
def test_unit_and_parent_as_the_kubelets_lib_ct_cgroup_config(cgroup: str, unit: str, parent: str) -> None:
    assert unit_and_parent(cgroup) == (unit, parent)


def test_a_path_that_is_no_slice_is_refused() -> None:
    with pytest.raises(PodCgroupError, match="not a systemd slice path"):
        unit_and_parent("/kubepods/burstable/pod1")


@pytest.mark.parametrize(("version", "number"), [("252.39-1~deb12u1", 252), ('"249"', 249), ("v255", 255), ("", 0)])
def test_systemd_version_number(version: str, number: int) -> None:
    assert version_number(version) == number


def test_the_start_transient_unit_call_marshals_as_systemd_expects() -> None:
    # StartTransientUnit(s name, s mode, a(sv) properties, a(sa(sv)) aux): jeepney must encode every value with the
    # signature systemd checks (t for the limits, as for Wants, b for the booleans).
    properties = apply_properties(POD_UNIT, "kubepods-burstable.slice") + resource_properties(
        SystemdResources(memory=-1, cpu_weight=4, cpu_quota=10000, cpu_period=100000, pids_limit=-1), 252
    )
    message = new_method_call(SYSTEMD, "StartTransientUnit", "ssa(sv)a(sa(sv))", (POD_UNIT, "replace", properties, []))
    parser = Parser()
    parser.add_data(message.serialise(serial=1))
    parsed = parser.get_next_message()
    assert parsed is not None
    assert parsed.body == (POD_UNIT, "replace", properties, [])


# --- the driver's calls ---------------------------------------------------------------------------------------------


def test_create_starts_the_slice_then_sets_its_properties(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cgroup")
    bus = RecordingSystemd(root)
    manager = SystemdCgroupManager(bus, root)
    manager.create(POD, resources_for(PodResourceConfig(cpu_shares=51, memory=64 << 20)))
    assert [(kind, name) for kind, name, _ in bus.calls] == [("start", POD_UNIT), ("set", POD_UNIT)]
    assert bus.calls[0][2] == apply_properties(POD_UNIT, "kubepods-burstable.slice")
    assert bus.calls[1][2] == [("MemoryMax", ("t", 64 << 20)), ("CPUWeight", ("t", 2))]
    # fs2's CreateCgroupPath: the controllers on down to the pod slice.
    assert (root / "kubepods.slice" / "kubepods-burstable.slice" / "cgroup.subtree_control").read_text()
    assert manager.exists(POD)


def test_create_keeps_a_slice_that_exists(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cgroup")
    bus = RecordingSystemd(root, exists=[POD_UNIT])
    SystemdCgroupManager(bus, root).create(POD, SystemdResources(cpu_weight=1))
    assert [kind for kind, _, _ in bus.calls] == ["start", "set"]


def test_a_failed_start_is_a_pod_cgroup_error(tmp_path: Path) -> None:
    class Refusing(RecordingSystemd):
        def start_transient_unit(self, name: str, properties: Sequence[Property]) -> None:
            raise SystemdError("job ended failed", "failed")

    root = v2_tree(tmp_path / "cgroup")
    with pytest.raises(PodCgroupError, match=f"unable to start unit '{POD_UNIT}'"):
        SystemdCgroupManager(Refusing(root), root).create(POD, SystemdResources())


def test_destroy_stops_the_slice_and_its_cgroup_goes(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cgroup")
    bus = RecordingSystemd(root)
    manager = SystemdCgroupManager(bus, root)
    manager.create(POD, SystemdResources())
    bus.calls.clear()
    manager.destroy(POD)
    assert [(kind, name) for kind, name, _ in bus.calls] == [("stop", POD_UNIT), ("reset-failed", POD_UNIT)]
    assert not manager.exists(POD)
    bus.calls.clear()
    manager.destroy(POD)  # gone already (another QoS tier's path, a second cleanup): systemd is not asked
    assert bus.calls == []


def test_pod_cgroups_size_the_slice_through_systemd_and_its_files(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cgroup")
    bus = RecordingSystemd(root)
    pod: dict[str, Any] = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": "100m", "memory": "32Mi"},
                    },
                }
            ]
        }
    }
    guaranteed = "/kubepods.slice/kubepods-pod1.slice"
    cgroups = SystemdPodCgroups(SystemdCgroupManager(bus, root), pod_pids_limit=512)
    cgroups.ensure(guaranteed, pod_resource_config(pod))
    [(_, _, started), (_, _, properties)] = bus.calls
    assert ("Wants", ("as", ["kubepods.slice"])) in started
    assert properties == [
        ("MemoryMax", ("t", 32 << 20)),
        ("CPUWeight", ("t", 4)),
        ("CPUQuotaPeriodUSec", ("t", 100000)),
        ("CPUQuotaPerSecUSec", ("t", 100000)),
        ("TasksMax", ("t", 512)),
    ]
    directory = root / "kubepods.slice" / "kubepods-pod1.slice"
    files = {name: (directory / name).read_text() for name in ("cpu.weight", "cpu.max", "memory.max", "pids.max")}
    assert files == {"cpu.weight": "4", "cpu.max": "10000 100000", "memory.max": "33554432", "pids.max": "512"}
    # An in-place resize: the unit's properties (without the pids limit, as upstream's Update) and the files.
    bus.calls.clear()
    cgroups.write(guaranteed, PodResourceConfig(memory=64 << 20))
    assert bus.calls == [("set", "kubepods-pod1.slice", [("MemoryMax", ("t", 64 << 20))])]
    assert (directory / "memory.max").read_text() == str(64 << 20)


def test_qos_slices_made_through_systemd(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cgroup")
    bus = RecordingSystemd(root)
    burstable: dict[str, Any] = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}
    qos = QOSCgroups(lambda: [burstable], root=root, systemd=SystemdCgroupManager(bus, root))
    qos.update()
    assert [(kind, name) for kind, name, _ in bus.calls] == [
        ("start", "kubepods.slice"),
        ("start", "kubepods-burstable.slice"),
        ("set", "kubepods-burstable.slice"),
        ("start", "kubepods-besteffort.slice"),
        ("set", "kubepods-besteffort.slice"),
    ]
    assert bus.calls[0][2] == apply_properties("kubepods.slice", "-.slice")
    assert bus.calls[2][2] == [("CPUWeight", ("t", 4))]  # 100m: 102 shares
    assert bus.calls[4][2] == [("CPUWeight", ("t", 1))]
    assert (root / "kubepods.slice" / "kubepods-burstable.slice" / "cpu.weight").read_text() == "4"
    # The next round: the slices exist, only their properties are set again.
    bus.calls.clear()
    qos.update()
    assert [kind for kind, _, _ in bus.calls] == ["set", "set"]
