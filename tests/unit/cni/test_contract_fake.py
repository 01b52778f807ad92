"""The Network contract scenarios on the FakeNetwork (the same run on pyroute2 in tests/integration/test_cni.py)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from cni.network import Link, Network
from tests.unit.cni import contract
from tests.unit.cni.fakenet import FakeKernel, FakeNetwork


class FakeBench:
    bridge = "nacontract0"
    subnet = "198.18.250.0/24"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.kernel = FakeKernel()
        self._ids = itertools.count()

    def network(self) -> Network:
        return FakeNetwork(self.kernel)

    def new_netns(self) -> str:
        path = f"/run/netns/fake-{next(self._ids)}"
        self.kernel.add_netns(path)
        return path

    def remove_netns(self, path: str) -> None:
        self.kernel.remove_netns(path)

    def drop_address(self, netns: str, ifname: str) -> None:
        ns = self.kernel.netns[netns]
        ns.links[ifname] = dataclasses.replace(ns.links[ifname], addresses=())

    def add_foreign_veth(self, netns: str, ifname: str) -> None:
        with self.kernel.lock:
            ns = self.kernel.netns[netns]
            host_index, peer_index = self.kernel.next_index(), 2 + len(ns.links)
            ns.links[ifname] = Link(
                ifname, peer_index, "veth", self.kernel.next_mac(), 1500, True, peer_index=host_index
            )
            name = f"foreign{host_index}"
            self.kernel.host[name] = Link(
                name, host_index, "veth", self.kernel.next_mac(), 1500, True, peer_index=peer_index
            )

    def rename_host_link(self, old: str, new: str) -> None:
        with self.kernel.lock:
            self.kernel.host[new] = dataclasses.replace(self.kernel.host.pop(old), name=new)


@pytest.mark.parametrize("scenario", contract.SCENARIOS, ids=lambda s: s.__name__)
def test_contract_on_the_fake(scenario: Callable[[contract.Bench], None], tmp_path: Path) -> None:
    scenario(FakeBench(tmp_path / "ipam"))
