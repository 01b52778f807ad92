"""Docker from Debian for kind: `apt-get install --no-install-recommends docker.io`, only after a simulation shows it
adds packages and touches none of the testbed's (containerd, runc).

The simulation (`apt-get -s`) prints one `Inst <pkg> [<old version>] (<new version> <release> [<arch>])` line per
package it would install or upgrade and one `Remv <pkg> [<version>]` line per removal. Any removal at all, and any
`Inst` of a protected package (an upgrade or a replacement), refuses the install. The package's own daemon never
starts: a `policy-rc.d` that says 101 is in place for the install, as for the testbed's packages; dockerd runs only as
nodeagent/kind/dockerd.py starts it, on its own containerd.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from nodeagent.kind.errors import KindError
from nodeagent.testbed.install import POLICY_RC, Progress, _run, installed_version

log = logging.getLogger(__name__)

DOCKER_PACKAGE = "docker.io"
# The testbed's runtime: Docker must use these as they are, never upgrade, replace or remove them.
PROTECTED_PACKAGES = ("containerd", "runc")

_INST = re.compile(r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])? \((?P<version>\S+)")
_REMV = re.compile(r"^Remv (?P<name>\S+)")


@dataclass(frozen=True)
class AptPlan:
    """What `apt-get -s install` would do: package -> new version, the old one of upgrades, and the removals."""

    installs: dict[str, str] = field(default_factory=dict)
    upgrades: dict[str, str] = field(default_factory=dict)
    removes: tuple[str, ...] = ()


def parse_simulation(text: str) -> AptPlan:
    installs: dict[str, str] = {}
    upgrades: dict[str, str] = {}
    removes: list[str] = []
    for line in text.splitlines():
        if m := _INST.match(line):
            installs[m["name"]] = m["version"]
            if m["old"]:
                upgrades[m["name"]] = m["old"]
        elif m := _REMV.match(line):
            removes.append(m["name"])
    return AptPlan(installs=installs, upgrades=upgrades, removes=tuple(removes))


def _base_name(package: str) -> str:
    return package.split(":", 1)[0]


def refusals(plan: AptPlan, protected: tuple[str, ...] = PROTECTED_PACKAGES) -> list[str]:
    """Why the plan may not run: every removal, and every install or upgrade of a protected package."""
    problems = [f"would remove {name}" for name in plan.removes]
    for name, version in plan.installs.items():
        if _base_name(name) in protected:
            old = plan.upgrades.get(name)
            problems.append(f"would {'upgrade' if old else 'install'} {name} {old + ' -> ' if old else ''}{version}")
    return problems


def simulate(package: str = DOCKER_PACKAGE) -> AptPlan:
    out = _run(
        ["apt-get", "-s", "install", "--no-install-recommends", package],
        env={"DEBIAN_FRONTEND": "noninteractive"},
        step="apt-get -s install",
    )
    return parse_simulation(out)


def install_docker(progress: Progress, package: str = DOCKER_PACKAGE) -> AptPlan | None:
    """Install `package` (docker.io) when missing; the plan apt ran, or None when it was already there."""
    present = installed_version(package)
    if present is not None:
        progress.step(f"{package} {present}: present")
        return None
    before = {name: installed_version(name) for name in PROTECTED_PACKAGES}
    plan = simulate(package)
    problems = refusals(plan)
    if problems:
        raise KindError(f"apt-get install {package} refused: " + "; ".join(problems))
    progress.step(f"apt-get install {package}: adds {', '.join(f'{k} {v}' for k, v in plan.installs.items())}")
    own_policy = not POLICY_RC.exists()
    if own_policy:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC.chmod(0o755)
    try:
        _run(
            ["apt-get", "install", "-y", "--no-install-recommends", package],
            env={"DEBIAN_FRONTEND": "noninteractive"},
            step=f"apt-get install {package}",
        )
    finally:
        if own_policy:
            POLICY_RC.unlink(missing_ok=True)
    after = {name: installed_version(name) for name in PROTECTED_PACKAGES}
    if after != before:
        raise KindError(f"apt-get install {package} changed the testbed's runtime: {before} -> {after}")
    if installed_version(package) is None:
        raise KindError(f"{package} still not installed after apt-get install")
    log.info("docker installed package=%s added=%s", package, ",".join(plan.installs))
    return plan
