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
        # JSON (first non-blank character "{", as upstream's ToJSON decides) is read as JSON: a surrogate pair is one
        # character (libyaml refuses the escapes), and brackets inside strings are not nesting
        (b' \n\t{"s": "\\ud83d\\ude00", "t": "' + b"[" * 100 + b'"}', {"s": "\U0001f600", "t": "[" * 100}),
        # duplicate keys: the last wins, as in Go's decoder and the YAML path
        (b'{"a": 1, "a": 2}', {"a": 2}),
        # a list at the top is not JSON by upstream's test: YAML reads it
        (b'["a", 1]', ["a", 1]),
    ],
)
def test_valid_documents(data: bytes, expected: Any) -> None:
    assert load_manifest(data) == expected


def test_json_numbers_are_json_numbers() -> None:
    """YAML 1.1 reads 1e3 as a string; JSON (and the kubelet) as a number."""
    loaded = load_manifest(b'{"e": 1e3, "f": 2.5, "i": 7, "z": -0}')
    assert loaded == {"e": 1000.0, "f": 2.5, "i": 7, "z": 0}
    assert [type(loaded[k]) for k in "efiz"] == [float, float, int, int]
    assert load_manifest(b"e: 1e3\n") == {"e": "1e3"}  # YAML stays YAML


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
        (b"a: .inf\n", "inf is not a JSON number"),
        # JSON: refused as the YAML path refuses, where that applies, with JSON's own messages
        (b'{"a": [1,}', "not valid JSON: Expecting value"),
        (b'{"a": 1_000}', "not valid JSON"),  # YAML 1.1 would have read 1000
        (b'{"a": 1} {"b": 2}', "not valid JSON: Extra data"),  # a second document
        (b'{"a": "\\ud800"}', r"unpaired UTF-16 surrogate \(\\ud800\) at .a"),
        (b'{"a": ["\\udc00x"]}', "unpaired UTF-16 surrogate"),
        (b'{"\\ud800": 1}', "unpaired UTF-16 surrogate"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"a": 1e400}', "the number 1e400 is out of range"),
        (b'{"a": 1' + b"0" * 5000 + b"}", "not valid JSON"),  # more digits than Python converts
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
        (b'{"a": ' + b"[" * 100_000, "deeper than"),  # refused before the recursive decoder runs
        (b"\xc2\xa0{}", "not valid JSON"),  # a no-break space is blank to Go's test, not to a JSON decoder
    ],
)
def test_bad_bytes_are_a_manifest_error(data: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifest(data)


@pytest.mark.parametrize(
    ("head", "tail"), [(b"a: '", b"'\n"), (b'{"a": "', b'"}')], ids=["yaml", "json"]
)  # fmt: skip
def test_the_size_cap_is_checked_before_parsing(head: bytes, tail: bytes) -> None:
    at_cap = head + b"x" * (MAX_MANIFEST_BYTES - len(head) - len(tail)) + tail
    assert len(at_cap) == MAX_MANIFEST_BYTES
    assert len(load_manifest(at_cap)["a"]) == MAX_MANIFEST_BYTES - len(head) - len(tail)
    with pytest.raises(ManifestError, match="size limit"):
        load_manifest(at_cap + b" ")


def test_a_json_depth_at_the_limit_is_fine() -> None:
    nested = b'{"a":' * (MAX_DEPTH - 1) + b"[1]" + b"}" * (MAX_DEPTH - 1)
    value = load_manifest(nested)
    for _ in range(MAX_DEPTH - 1):
        value = value["a"]
    assert value == [1]
