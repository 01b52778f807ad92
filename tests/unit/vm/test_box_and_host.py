"""The box recipe's pure parts and the libvirt host's: the cache key, grub.cfg, missing tools, qemu.conf, leftovers."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.vm import box
from nodeagent.vm.host import Leftovers, with_root_qemu


def test_recipe_hash_is_stable_and_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    first = box.recipe_hash()
    assert first == box.recipe_hash()
    monkeypatch.setattr(box, "PACKAGES", (*box.PACKAGES, "strace"))
    assert box.recipe_hash() != first
    monkeypatch.undo()
    monkeypatch.setattr(box, "KERNEL_ARGS", box.KERNEL_ARGS + " quiet")
    assert box.recipe_hash() != first


def test_grub_cfg_boots_by_label_on_the_serial_console_with_cgroup_v2() -> None:
    cfg = box.grub_cfg(("vmlinuz-6.1.0-37-amd64", "initrd.img-6.1.0-37-amd64"))
    assert "linux /boot/vmlinuz-6.1.0-37-amd64 root=LABEL=rootfs ro console=ttyS0" in cfg
    assert "initrd /boot/initrd.img-6.1.0-37-amd64" in cfg
    assert "systemd.unified_cgroup_hierarchy=1" in cfg
    assert "/dev/loop" not in cfg


@pytest.mark.parametrize(
    ("which", "missing"),
    [
        ({"mmdebstrap": "/usr/bin/mmdebstrap", "qemu-img": "/usr/bin/qemu-img"}, []),
        ({"mmdebstrap": None, "qemu-img": "/usr/bin/qemu-img"}, ["mmdebstrap"]),
        ({"mmdebstrap": None, "qemu-img": None, "sfdisk": None}, ["fdisk", "mmdebstrap", "qemu-utils"]),
    ],
)
def test_missing_tools(which: dict[str, str | None], missing: list[str]) -> None:
    assert box.missing_tools(which) == missing


@pytest.mark.parametrize(
    ("conf", "changed"),
    [
        ('#user = "root"\n', True),
        ("", True),
        ('user = "root"\ngroup = "root"\n', False),
        ('user = "root"\n', True),
    ],
)
def test_with_root_qemu(conf: str, changed: bool) -> None:
    out = with_root_qemu(conf)
    assert (out != conf) == changed
    assert out.startswith(conf)
    assert with_root_qemu(out) == out  # idempotent


def test_leftovers_difference() -> None:
    before = Leftovers(domains={"a"}, networks={"default"}, loops={"/dev/loop1"}, iptables={":LIBVIRT_INP - [0:0]"})
    after = Leftovers(
        domains={"a", "vagrant_default"},
        networks={"default"},
        loops={"/dev/loop1", "/dev/loop2"},
        iptables={":LIBVIRT_INP - [0:0]"},
    )
    assert after.new_since(before) == {"domains": ["vagrant_default"], "loop devices": ["/dev/loop2"]}
    assert before.new_since(before) == {}


def test_a_half_built_box_is_never_reused(tmp_path: Path) -> None:
    partial = tmp_path / f".box-{box.recipe_hash()}.partial-abc"
    partial.mkdir()
    (partial / "nodeagent.box").write_bytes(b"half")
    assert box.cached_box(tmp_path) is None
    assert box.stale_partials(tmp_path) == [partial]
    complete = tmp_path / f"box-{box.recipe_hash()}"
    complete.mkdir()
    (complete / "nodeagent.box").write_bytes(b"box")
    found = box.cached_box(tmp_path)
    assert found is not None
    assert found.directory == complete
    # A box of another recipe is not this one.
    (tmp_path / "box-0000000000000000").mkdir()
    assert box.cached_box(tmp_path) == found
