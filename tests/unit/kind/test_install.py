"""Docker from Debian: the simulation decides, and nothing of the testbed's runtime may move."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.kind import install
from nodeagent.kind.errors import KindError
from nodeagent.testbed.install import Progress

# What `apt-get -s install --no-install-recommends docker.io` printed on this host (bookworm, trixie pinned at 100).
BOOKWORM_SIMULATION = """\
The following NEW packages will be installed:
  docker.io tini
0 upgraded, 2 newly installed, 0 to remove and 131 not upgraded.
Inst tini (0.19.0-1+b3 Debian:12.15/oldstable [amd64])
Inst docker.io (20.10.24+dfsg1-1+deb12u1+b6 Debian:12.15/oldstable [amd64])
Conf tini (0.19.0-1+b3 Debian:12.15/oldstable [amd64])
Conf docker.io (20.10.24+dfsg1-1+deb12u1+b6 Debian:12.15/oldstable [amd64])
"""


def test_parse_the_hosts_simulation() -> None:
    plan = install.parse_simulation(BOOKWORM_SIMULATION)
    assert plan.installs == {"tini": "0.19.0-1+b3", "docker.io": "20.10.24+dfsg1-1+deb12u1+b6"}
    assert plan.upgrades == {}
    assert plan.removes == ()
    assert install.refusals(plan) == []


def test_upgrading_containerd_or_removing_anything_is_refused() -> None:
    plan = install.parse_simulation(
        "Remv runc [1.1.5+ds1-1+deb12u1]\n"
        "Inst containerd:amd64 [1.7.24~ds1-6+deb13u1] (2.1.4~ds1-1 Debian:13 [amd64])\n"
        "Inst docker.io (26.1.5+dfsg1-9 Debian:13 [amd64])\n"
    )
    assert install.refusals(plan) == [
        "would remove runc",
        "would upgrade containerd:amd64 1.7.24~ds1-6+deb13u1 -> 2.1.4~ds1-1",
    ]


class FakeApt:
    def __init__(self, simulation: str, policy: Path) -> None:
        self.simulation = simulation
        self.policy = policy
        self.calls: list[list[str]] = []
        self.policy_during_install: str | None = None
        self.installed: dict[str, str | None] = {"containerd": "1.7.24~ds1-6+deb13u1", "runc": "1.1.5+ds1-1+deb12u1"}

    def run(self, cmd: Sequence[str], *, env: dict[str, str] | None = None, step: str) -> str:
        self.calls.append(list(cmd))
        if "-s" in cmd:
            return self.simulation
        self.policy_during_install = self.policy.read_text() if self.policy.exists() else None
        self.installed["docker.io"] = "20.10.24+dfsg1-1+deb12u1+b6"
        return ""

    def version(self, package: str) -> str | None:
        return self.installed.get(package)


@pytest.fixture
def fake_apt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeApt:
    policy = tmp_path / "policy-rc.d"
    fake = FakeApt(BOOKWORM_SIMULATION, policy)
    monkeypatch.setattr(install, "POLICY_RC", policy)
    monkeypatch.setattr(install, "_run", fake.run)
    monkeypatch.setattr(install, "installed_version", fake.version)
    return fake


def test_install_simulates_then_installs_with_no_daemon_start(fake_apt: FakeApt) -> None:
    lines: list[str] = []
    plan = install.install_docker(Progress(lines.append))
    assert plan is not None and list(plan.installs) == ["tini", "docker.io"]
    assert fake_apt.calls == [
        ["apt-get", "-s", "install", "--no-install-recommends", "docker.io"],
        ["apt-get", "install", "-y", "--no-install-recommends", "docker.io"],
    ]
    assert fake_apt.policy_during_install == "#!/bin/sh\nexit 101\n"
    assert not fake_apt.policy.exists()  # ours, removed again
    assert lines == [
        "[nodeagent install] apt-get install docker.io: adds tini 0.19.0-1+b3, docker.io 20.10.24+dfsg1-1+deb12u1+b6"
    ]


def test_a_refused_plan_installs_nothing(fake_apt: FakeApt) -> None:
    fake_apt.simulation = "Inst runc [1.1.5+ds1-1+deb12u1] (1.3.0+ds1-1 Debian:13 [amd64])\n"
    with pytest.raises(KindError, match=r"refused: would upgrade runc 1.1.5\+ds1-1\+deb12u1 -> 1.3.0"):
        install.install_docker(Progress(lambda _: None))
    assert len(fake_apt.calls) == 1


def test_present_docker_is_left_alone(fake_apt: FakeApt) -> None:
    fake_apt.installed["docker.io"] = "20.10.24+dfsg1-1+deb12u1+b6"
    assert install.install_docker(Progress(lambda _: None)) is None
    assert fake_apt.calls == []
