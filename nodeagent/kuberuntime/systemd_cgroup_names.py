"""The systemd cgroup driver's names for the kubelet's cgroups, as upstream's cgroup manager spells them.

Upstream keeps a cgroup's name as its components ("kubepods", "burstable", "pod<uid>") and turns them into the
driver's form. cgroupfs joins them with "/". systemd makes one slice per level: each component has its "-" replaced
by "_" (a "-" in a slice name means nesting), they are joined with "-" and ".slice" is appended, and the slice is
expanded into its parents (ToSystemd, then libcontainer's ExpandSlice):

    /kubepods/burstable/pod1234-5678  ->  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice

The reverse (ParseSystemdToCgroupName) takes the last slice, drops ".slice", splits at "-" and puts "-" back for
"_". Pure functions; creating the slices is systemd's (StartTransientUnit over D-Bus), not done here.
"""

from __future__ import annotations

SLICE_SUFFIX = ".slice"


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
