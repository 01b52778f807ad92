"""The host's Debian packages for the Vagrant VM: building the box, running libvirt + QEMU, and Vagrant.

Installed by `nodeagent vm install` (scripts/test-all.sh runs it) through the testbed's apt installer, so a fresh
machine gets them from its project files. Without recommends on purpose: libvirt-daemon-system recommends
libvirt-daemon-config-network, whose `default` network is 192.168.122.0/24 with NAT to the outside, and that must
never start here (the VM's own network is an isolated /24 of 198.18.0.0/16).
"""

from __future__ import annotations

from nodeagent.testbed.install import Progress, install_debian_packages

# package -> version prefix (any version: bookworm's).
VM_PACKAGES: dict[str, str] = {
    "qemu-system-x86": "",
    "qemu-utils": "",
    "mmdebstrap": "",
    "fdisk": "",
    "e2fsprogs": "",
    "rsync": "",
    "vagrant": "",
    "vagrant-libvirt": "",
    "libvirt-daemon-system": "",
    "libvirt-daemon-driver-qemu": "",
    "libvirt-clients": "",
    "dnsmasq-base": "",
    "iptables": "",
}


def install_vm_packages(progress: Progress | None = None) -> None:
    install_debian_packages(progress or Progress(print), VM_PACKAGES, {})
