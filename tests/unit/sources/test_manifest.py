"""load_manifest: bytes become JSON data or a clear ManifestError, whatever the bytes are."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.sources.manifest import MAX_DEPTH, MAX_MANIFEST_BYTES, ManifestError, load_manifest


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"apiVersion: v1\nkind: Pod\n", {"apiVersion": "v1", "kind": "Pod"}),
        (b'{"apiVersion": "v1", "items": [1, 2.5, true, null]}', {"apiVersion": "v1", "items": [1, 2.5, True, None]}),
        # YAML 1.1 timestamps stay the strings they were written as
        (b"t: 2024-01-01T00:00:00Z\nd: 2024-01-01\n", {"t": "2024-01-01T00:00:00Z", "d": "2024-01-01"}),
        # one document, with or without its markers
        (b"---\na: 1\n...\n", {"a": 1}),
        # an anchor nobody refers to is harmless
        (b"a: &x 1\n", {"a": 1}),
    ],
)
def test_valid_documents(data: bytes, expected: Any) -> None:
    assert load_manifest(data) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"# only a comment\n", "empty"),
        (b"\xff\xfe", "not UTF-8"),
        (b"a: [1,\n", "not valid YAML or JSON"),
        (b"a: 1\n---\nb: 2\n", "one document"),
        (b"a: &x [1]\nb: *x\n", "aliases are not allowed"),
        # the billion laughs: refused at the first alias, before anything is expanded
        (
            b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
            + b"".join(
                b"%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n" % ((c, c) + (c - 1,) * 9) for c in range(98, 106)
            ),
            "aliases are not allowed",
        ),
        (b"<<: *base\n", "aliases are not allowed"),  # merge keys need aliases
        (b"b: !!binary aGVsbG8=\n", "bytes values are not allowed"),
        (b"s: !!set {a, b}\n", "set values are not allowed"),
        (b"x: !!python/object:os.system {}\n", "could not determine a constructor"),
        (b"1: a\n", "map keys must be strings"),
        (b"? [a, b]\n: c\n", "not valid YAML or JSON"),  # an unhashable key
        (b"a: !!float nope\n", "not valid YAML or JSON"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
        (b"[" * 100_000, "deeper than"),
        (b"- " * 1000 + b"x\n", "deeper than"),
    ],
)
def test_bad_bytes_are_a_manifest_error(data: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifest(data)


def test_the_size_cap_is_checked_before_parsing() -> None:
    at_cap = b"a: '" + b"x" * (MAX_MANIFEST_BYTES - 6) + b"'\n"
    assert len(at_cap) == MAX_MANIFEST_BYTES
    assert len(load_manifest(at_cap)["a"]) == MAX_MANIFEST_BYTES - 6
    with pytest.raises(ManifestError, match="size limit"):
        load_manifest(at_cap + b" ")
