"""Pod traffic between the nodes of a cluster on one machine.

Each node's bridge is made as a testbed's (testbed/hostnet.py): forwarding on for that bridge, behind a FORWARD rule
that drops whatever would leave it for another interface, so no pod traffic leaves the machine or enters another
testbed. The nodes of one cluster are the exception: a pair of ACCEPT rules per pair of its bridges, inserted before
the guards, lets their pods reach each other (routed by the host between the two bridges, as between two real
nodes' pod ranges), and nothing else.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Sequence

COMMENT = "nodeagent cluster: pods between its nodes"


def accept_rule(source: str, destination: str) -> list[str]:
    """FORWARD rule arguments (after the chain) letting pods of bridge `source` reach pods of bridge `destination`."""
    return ["-i", source, "-o", destination, "-m", "comment", "--comment", COMMENT, "-j", "ACCEPT"]


def rules_between(bridges: Sequence[str]) -> list[list[str]]:
    """Both directions of every pair of `bridges`."""
    return [accept_rule(a, b) for a, b in itertools.permutations(bridges, 2)]


def _iptables(*args: str) -> bool:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, check=False).returncode == 0


def connect(bridges: Sequence[str]) -> None:
    """The ACCEPT rules between `bridges`, each once, first in FORWARD (before the testbed guards)."""
    for rule in rules_between(bridges):
        if not _iptables("-C", "FORWARD", *rule) and not _iptables("-I", "FORWARD", "1", *rule):
            raise RuntimeError(f"cannot add FORWARD rule {' '.join(rule)}")


def disconnect(bridges: Sequence[str]) -> list[str]:
    """Remove the ACCEPT rules between `bridges`; what was removed."""
    removed = []
    for rule in rules_between(bridges):
        while _iptables("-D", "FORWARD", *rule):
            removed.append(f"FORWARD {rule[1]} -> {rule[3]}")
    return removed
