"""`nodeagent vm check|network`: the hypervisor chosen, or one clear line naming what is missing."""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent import cli
from nodeagent.vm import virt

NOTHING = virt.HostVirt(kvm_device=False, cpu_virt_flags=False, qemu=False, virtualbox=False)


def test_check_without_any_virtualisation_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(virt, "probe", lambda: NOTHING)
    assert cli.main(["vm", "check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nodeagent: no virtualisation for the Vagrant VM")
    assert "qemu-system-x86_64 is not installed" in err
    assert "VBoxManage" in err


def test_box_refuses_before_building_without_virtualisation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(virt, "probe", lambda: NOTHING)
    assert cli.main(["vm", "box", "--no-add"]) == 1
    assert "no virtualisation" in capsys.readouterr().err


def test_check_with_qemu_only(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(virt, "probe", lambda: virt.HostVirt(True, False, True, False))
    assert cli.main(["vm", "check"]) == 0
    assert capsys.readouterr().out.strip() == "provider=libvirt driver=qemu cpu=qemu64"


def test_network_is_a_free_24_of_198_18(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["vm", "network"]) == 0
    network = ipaddress.IPv4Network(capsys.readouterr().out.strip())
    assert network.prefixlen == 24
    assert network.subnet_of(ipaddress.IPv4Network("198.18.0.0/16"))
