"""The Network contract scenarios on the FakeNetwork (the same run on pyroute2 in tests/integration/test_cni.py)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from cni.network import Network
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


@pytest.mark.parametrize("scenario", contract.SCENARIOS, ids=lambda s: s.__name__)
def test_contract_on_the_fake(scenario: Callable[[contract.Bench], None], tmp_path: Path) -> None:
    scenario(FakeBench(tmp_path / "ipam"))
