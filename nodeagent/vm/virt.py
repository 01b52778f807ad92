"""Which hypervisor a Vagrant VM can use on this host, and the message when there is none.

The decision is a pure function of what was probed, so it is tested with a table; `probe()` gathers the facts.
KVM counts only when /dev/kvm opens read-write and the CPU advertises vmx or svm: on nested PVM hosts /dev/kvm
exists but QEMU aborts with "failed to set MSR 0x10a" under `-cpu host`, so such a host uses QEMU's software
emulation (TCG) with a qemu64 CPU instead.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nodeagent.vm.errors import VMError


@dataclass(frozen=True)
class HostVirt:
    kvm_device: bool  # /dev/kvm exists and opens read-write
    cpu_virt_flags: bool  # /proc/cpuinfo has vmx or svm
    qemu: bool  # qemu-system-x86_64 is on PATH
    virtualbox: bool  # VBoxManage is on PATH


@dataclass(frozen=True)
class Choice:
    provider: str  # "libvirt" or "virtualbox"
    driver: str  # libvirt's domain type: "kvm" or "qemu" (TCG); "" for VirtualBox
    cpu_model: str  # "" for the hypervisor's default, "qemu64" under TCG


class NoVirtualisation(VMError):
    """Neither KVM, QEMU nor VirtualBox is usable here; the message names what is missing."""


def choose(host: HostVirt) -> Choice:
    """libvirt with KVM when KVM really works, else libvirt with QEMU's TCG, else VirtualBox; else an error."""
    kvm = host.kvm_device and host.cpu_virt_flags
    if host.qemu and kvm:
        return Choice("libvirt", "kvm", "")
    if host.qemu:
        return Choice("libvirt", "qemu", "qemu64")
    if host.virtualbox:
        return Choice("virtualbox", "", "")
    raise NoVirtualisation(missing_message(host))


def missing_message(host: HostVirt) -> str:
    """What is missing, in the words a user acts on."""
    kvm_reasons = []
    if not host.kvm_device:
        kvm_reasons.append("/dev/kvm is missing or not usable (no read-write access)")
    if not host.cpu_virt_flags:
        kvm_reasons.append("the CPU has no vmx/svm flag")
    kvm = "KVM: " + ("; ".join(kvm_reasons) if kvm_reasons else "usable, but QEMU is missing")
    return (
        "no virtualisation for the Vagrant VM: "
        "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86), "
        "VBoxManage (VirtualBox) is not installed, "
        f"{kvm}"
    )


def probe(cpuinfo: Path = Path("/proc/cpuinfo"), kvm: Path = Path("/dev/kvm")) -> HostVirt:
    try:
        flags = any(
            line.startswith("flags") and ({"vmx", "svm"} & set(line.split()))
            for line in cpuinfo.read_text().splitlines()
        )
    except OSError:
        flags = False
    return HostVirt(
        kvm_device=kvm.exists() and os.access(kvm, os.R_OK | os.W_OK),
        cpu_virt_flags=flags,
        qemu=shutil.which("qemu-system-x86_64") is not None,
        virtualbox=shutil.which("VBoxManage") is not None,
    )
