from __future__ import annotations

import re

import pytest

from nodeagent.conformance import subset


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("a b", "a b"),  # a space stays as it is: RE2 refuses "\ "
        ("[sig-node] x", "\\[sig-node\\] x"),
        ("(root,0666,tmpfs)", "\\(root,0666,tmpfs\\)"),
        ("/etc/hosts", "/etc/hosts"),
        ("a.b*c+d?e|f^g$h{1}\\", "a\\.b\\*c\\+d\\?e\\|f\\^g\\$h\\{1\\}\\\\"),
    ],
)
def test_escape(text: str, pattern: str) -> None:
    assert subset.escape(text) == pattern
    assert re.fullmatch(pattern, text)


def test_ci_subset_focus_selects_each_name_and_nothing_near_it() -> None:
    names = subset.CI
    assert len(names) >= 20
    assert len(set(names)) == len(names)
    regex = re.compile(subset.focus(names))
    for name in names:
        assert regex.search(name), name
    # A neighbour of a selected spec (same words, another variant) is not selected.
    assert not regex.search("[sig-storage] EmptyDir volumes should support (root,0666,tmpfs) [LinuxOnly]")
    assert not regex.search("[sig-node] Pods should get a host IP address")


def test_ci_subset_covers_pods_probes_volumes_logs_and_exec() -> None:
    text = "\n".join(subset.CI)
    for needle in ("Pods should", "Probing container", "[sig-storage]", "logs", "remote command execution"):
        assert needle in text, needle
    assert all("[NodeConformance]" in name for name in subset.CI)
    assert not any(tag in name for name in subset.CI for tag in ("[Serial]", "[Slow]", "[Disruptive]", "[Flaky]"))
