"""Which hypervisor the Vagrant VM uses, and the message naming what is missing when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.vm.virt import Choice, HostVirt, NoVirtualisation, choose, probe


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (HostVirt(kvm_device=True, cpu_virt_flags=True, qemu=True, virtualbox=False), Choice("libvirt", "kvm", "")),
        (HostVirt(kvm_device=True, cpu_virt_flags=True, qemu=True, virtualbox=True), Choice("libvirt", "kvm", "")),
        # Nested PVM: /dev/kvm is there but the CPU has no vmx/svm; `-cpu host` would abort. TCG with qemu64.
        (
            HostVirt(kvm_device=True, cpu_virt_flags=False, qemu=True, virtualbox=False),
            Choice("libvirt", "qemu", "qemu64"),
        ),
        (
            HostVirt(kvm_device=False, cpu_virt_flags=True, qemu=True, virtualbox=False),
            Choice("libvirt", "qemu", "qemu64"),
        ),
        (
            HostVirt(kvm_device=False, cpu_virt_flags=False, qemu=False, virtualbox=True),
            Choice("virtualbox", "", ""),
        ),
        (HostVirt(kvm_device=True, cpu_virt_flags=True, qemu=False, virtualbox=True), Choice("virtualbox", "", "")),
    ],
)
def test_choose(host: HostVirt, expected: Choice) -> None:
    assert choose(host) == expected


@pytest.mark.parametrize(
    ("host", "named"),
    [
        (
            HostVirt(kvm_device=False, cpu_virt_flags=False, qemu=False, virtualbox=False),
            ["qemu-system-x86_64 is not installed", "VBoxManage", "/dev/kvm is missing", "no vmx/svm"],
        ),
        (
            HostVirt(kvm_device=True, cpu_virt_flags=False, qemu=False, virtualbox=False),
            ["qemu-system-x86_64 is not installed", "VBoxManage", "no vmx/svm"],
        ),
        (
            HostVirt(kvm_device=True, cpu_virt_flags=True, qemu=False, virtualbox=False),
            ["qemu-system-x86_64 is not installed", "VBoxManage", "usable, but QEMU is missing"],
        ),
    ],
)
def test_no_virtualisation_names_what_is_missing(host: HostVirt, named: list[str]) -> None:
    with pytest.raises(NoVirtualisation) as caught:
        choose(host)
    for words in named:
        assert words in str(caught.value)
    if host.kvm_device:
        assert "/dev/kvm is missing" not in str(caught.value)


def test_probe_reads_cpu_flags_and_kvm(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu vme svm sse\n")
    assert probe(cpuinfo=cpuinfo, kvm=tmp_path / "kvm").cpu_virt_flags
    assert not probe(cpuinfo=cpuinfo, kvm=tmp_path / "kvm").kvm_device
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu vme sse hypervisor\n")
    assert not probe(cpuinfo=cpuinfo, kvm=tmp_path / "kvm").cpu_virt_flags
