"""Strategies the targets share: odd strings and numbers, JSON data, mutations of a known-good document, and the
hostile YAML/JSON shapes (alias bombs, deep nesting)."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

# Strings that have broken parsers before: empty, blanks, control bytes, path tricks, numbers past every bound,
# unit-like suffixes, YAML and JSON syntax, odd Unicode (RTL, combining, astral, full-width digits).
ODD_STRINGS = (
    "", " ", "\t", "\n", "\x00", "a\x00b", "\x7f", "..", "../..", "/..", "%00", "%2e%2e", "%", "%zz", "~", "-", "+",
    ".", "0", "-0", "00", "01", "1", "-1", "+1", "1.", ".5", "1e3", "1e309", "1e-999999", "1e999999999", "9" * 400,
    "-" + "9" * 40, "0x10", "1_000", "nan", "NaN", "inf", "-Infinity", "true", "null", "~", "yes", "no", "on",
    "1Ki", "1Mi", "100Mi", "1Gi", "1Ei", "1E", "1m", "500m", "1n", "1u", "10%", "100%", "-5%", "1e2%", "%%",
    "1h", "1h30m", "-1s", "1.5s", "9999999999h", "0s", "1ns", "1us", "1µs", "1ms", "300ms", "1d",
    "{", "}", "[", "]", "{}", "[]", ":", "- ", "&a", "*a", "!!python/object:os.system", "!!binary AA==", "---",
    "a:b", "a=b", "a=b;c", ";", "=", "k8s.io/x", "Exists", "NoExecute", "TCP", "Always", "RuntimeDefault",
    "Localhost", "Unconfined", "localhost/../../etc/passwd", "ALL", "CAP_SYS_ADMIN", "\u202e", "e\u0301", "\U0001f600",
    "\uff11", "\u0660", "ǅ", "İ", "ß", "a" * 64, "a" * 254, "A" * 5000, "<script>", "&amp;", "'", '"', "\\", "$(X)",
    "$$(X)", "$(", "${X}", "0.0.0.0", "::1", "198.18.0.1", "198.18.0.0/24", "256.1.1.1", "unix:///x.sock",
)  # fmt: skip

odd_strings = st.sampled_from(ODD_STRINGS)
short_text = st.text(max_size=20)
strings = st.one_of(odd_strings, short_text, st.text(alphabet="0123456789.eEkKMGTPimnu+-%hsµ", max_size=12))

# Integers at and past the bounds protobuf, Go and the CRI use.
_BOUNDS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), 2**32, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64]
odd_ints = st.one_of(st.sampled_from(_BOUNDS), st.integers(min_value=-1000, max_value=100_000), st.integers())
int64s = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    odd_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON data: scalars, lists and string-keyed maps."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(strings, children, max_size=4)),
        max_leaves=max_leaves,
    )


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into the document (map keys and list indexes), the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index))
    return out


def _apply(doc: Any, path: tuple[Any, ...], op: str, value: Any, key: str) -> Any:
    if not path:
        return value if op == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "replace":
        parent[last] = value
    elif op == "delete":
        del parent[last]
    elif op == "empty":
        parent[last] = type(parent[last])() if isinstance(parent[last], dict | list | str) else None
    elif op == "wrap":
        parent[last] = [parent[last]] if not isinstance(parent[last], list) else {"x": parent[last]}
    elif op == "add" and isinstance(parent[last], dict):
        parent[last][key] = value
    elif op == "add" and isinstance(parent[last], list):
        parent[last].append(value)
    elif op == "duplicate" and isinstance(parent[last], list) and parent[last]:
        parent[last].append(copy.deepcopy(parent[last][0]))
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any, *, values: st.SearchStrategy[Any] | None = None, max_mutations: int = 4) -> Any:
    """`base` (JSON data) with a few random edits: a value replaced (with any JSON data, or a value of the same kind),
    a key deleted or added, a container emptied, wrapped or its first item duplicated."""
    doc = copy.deepcopy(base)
    replacement = values if values is not None else json_values(8)
    for _ in range(draw(st.integers(0, max_mutations))):
        paths = _paths(doc)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        op = draw(st.sampled_from(("replace", "replace", "delete", "empty", "wrap", "add", "duplicate")))
        if not path and op != "replace":
            continue
        doc = _apply(doc, path, op, draw(replacement), draw(strings))
    return doc


def alias_bomb(levels: int, width: int, *, key: str = "a") -> str:
    """The "billion laughs" YAML: each level is a list of `width` aliases of the previous one."""
    lines = [f"l0: &l0 [{json.dumps('lol')}]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    lines.append(f"{key}: *l{levels}")
    return "\n".join(lines) + "\n"


def deep_nesting(kind: str, depth: int) -> str:
    """Nesting `depth` levels deep, as JSON brackets, YAML flow, YAML block maps or block lists."""
    if kind == "json-list":
        return "[" * depth + "]" * depth
    if kind == "json-map":
        return '{"a":' * depth + "1" + "}" * depth
    if kind == "yaml-flow":
        return "a: " + "[" * depth + "]" * depth + "\n"
    if kind == "yaml-block-map":
        return "".join(" " * i + "a:\n" for i in range(depth)) + " " * depth + "b: 1\n"
    return "".join(" " * (2 * i) + "-\n" for i in range(depth)) + " " * (2 * depth) + "- x\n"


hostile_documents = st.one_of(
    st.builds(alias_bomb, st.integers(1, 12), st.integers(1, 12), key=st.sampled_from(["a", "spec", "metadata"])),
    st.builds(
        deep_nesting,
        st.sampled_from(["json-list", "json-map", "yaml-flow", "yaml-block-map", "yaml-block-list"]),
        st.integers(1, 1500),
    ),
)


def dump_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, default_flow_style=False, allow_unicode=True)


@st.composite
def encoded(draw: st.DrawFn, docs: st.SearchStrategy[Any]) -> bytes:
    """A document as JSON or YAML bytes, sometimes with its text cut, spliced or byte-flipped."""
    doc = draw(docs)
    text = json.dumps(doc) if draw(st.booleans()) else dump_yaml(doc)
    data = text.encode("utf-8", "surrogatepass")
    edit = draw(st.sampled_from(("none", "none", "none", "cut", "insert", "flip")))
    if edit == "cut" and data:
        data = data[: draw(st.integers(0, len(data)))]
    elif edit == "insert":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.one_of(st.binary(max_size=8), odd_strings.map(str.encode))) + data[at:]
    elif edit == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    return data
