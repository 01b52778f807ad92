"""The systemd cgroup driver's names for the kubelet's cgroups, as upstream's cgroup manager spells them.

Upstream keeps a cgroup's name as its components ("kubepods", "burstable", "pod<uid>") and turns them into the
driver's form. cgroupfs joins them with "/". systemd makes one slice per level: each component has its "-" replaced
by "_" (a "-" in a slice name means nesting), they are joined with "-" and ".slice" is appended, and the slice is
expanded into its parents (ToSystemd, then libcontainer's ExpandSlice):

    /kubepods/burstable/pod1234-5678  ->  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice

The reverse (ParseSystemdToCgroupName) takes the last slice, drops ".slice", splits at "-" and puts "-" back for
"_". Pure functions; the slices are made by systemd_cgroups.py (StartTransientUnit over D-Bus).

`driver_cgroup` is upstream's cgroupManager.Name: a cgroup's path in the driver's form, which is also its directory
under the cgroup v2 mount and what the kubelet passes to the runtime as a sandbox's cgroup_parent (containerd with
SystemdCgroup = true keeps the last slice and runs each container in `cri-containerd-<id>.scope` below it).
"""

from __future__ import annotations

SLICE_SUFFIX = ".slice"
SYSTEMD = "systemd"
CONTAINERD_SCOPE_PREFIX = "cri-containerd"  # containerd's CRI: cgroupsPath "<slice>:cri-containerd:<id>"


class SliceNameError(ValueError):
    """A name that is not a valid systemd slice name."""


def escape(part: str) -> str:
    return part.replace("-", "_")


def unescape(part: str) -> str:
    return part.replace("_", "-")


def expand_slice(slice_name: str) -> str:
    """libcontainer's ExpandSlice: "a-b-c.slice" -> "/a.slice/a-b.slice/a-b-c.slice"; "-.slice" is the root."""
    if not slice_name.endswith(SLICE_SUFFIX) or "/" in slice_name:
        raise SliceNameError(f"invalid slice name: {slice_name}")
    if slice_name == "-" + SLICE_SUFFIX:
        return "/"
    stem = slice_name[: -len(SLICE_SUFFIX)]
    if stem.startswith("-") or stem.endswith("-") or "--" in stem or not stem:
        raise SliceNameError(f"invalid slice name: {slice_name}")
    path, prefix = "", ""
    for component in stem.split("-"):
        path += f"/{prefix}{component}{SLICE_SUFFIX}"
        prefix += f"{component}-"
    return path


def to_systemd(cgroupfs_name: str) -> str:
    """Upstream CgroupName.ToSystemd from the cgroupfs form: "/kubepods/besteffort/pod<uid>" ->
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid, - as _>.slice"; "/" stays "/"."""
    parts = [p for p in cgroupfs_name.strip("/").split("/") if p]
    if not parts:
        return "/"
    return expand_slice("-".join(escape(p) for p in parts) + SLICE_SUFFIX)


def from_systemd(systemd_name: str) -> str:
    """Upstream ParseSystemdToCgroupName, to the cgroupfs form: ".../kubepods-burstable.slice" ->
    "/kubepods/burstable"."""
    last = systemd_name.rstrip("/").rsplit("/", 1)[-1]
    if last.endswith(SLICE_SUFFIX):
        last = last[: -len(SLICE_SUFFIX)]
    if last in ("", "-"):
        return "/"
    return "/" + "/".join(unescape(p) for p in last.split("-"))


def driver_cgroup(cgroupfs_name: str, driver: str) -> str:
    """The cgroup's path for the cgroup driver ("cgroupfs" or "systemd"), from its cgroupfs form."""
    return to_systemd(cgroupfs_name) if driver == SYSTEMD else cgroupfs_name


def container_cgroup(pod_cgroup: str, container_id: str, driver: str) -> str:
    """Where the runtime puts a container below its pod's cgroup: runc's `<parent>/<id>` with cgroupfs, the scope
    containerd asks runc for with systemd."""
    leaf = f"{CONTAINERD_SCOPE_PREFIX}-{container_id}.scope" if driver == SYSTEMD else container_id
    return f"{pod_cgroup.rstrip('/')}/{leaf}"
