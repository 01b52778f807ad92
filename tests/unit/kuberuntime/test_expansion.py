from __future__ import annotations

import pytest

from nodeagent.kuberuntime.expansion import expand

ENV = {"A": "a", "B": "$(A)", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "a"),
        ("x$(A)y$(A)", "xaya"),
        ("$(B)", "$(A)"),  # no recursion
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$a"),
        ("$$", "$"),
        ("$", "$"),
        ("a$", "a$"),
        ("$x", "$x"),
        ("$(A", "$(A"),
        ("$()", "$()"),
        ("$(EMPTY)z", "z"),
        ("plain", "plain"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, ENV) == expected
