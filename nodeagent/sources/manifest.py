"""Safe decoding of a pod manifest: bytes from a file or a URL become JSON data, or a clear `ManifestError`.

Whoever can write the manifest directory or serve the manifest URL hands the agent bytes; decoding them must never
crash or exhaust the agent. So, before anything else is looked at:

- a size cap of 1 MiB per manifest (upstream reads up to 10 MB), checked before parsing;
- UTF-8 only;
- JSON or YAML, decided as upstream's utilyaml.ToJSON does: a document whose first non-blank character is "{" is
  JSON and is read as JSON (so "\\ud83d\\ude00" is one emoji and 1e3 is a number, as the kubelet reads them); any
  other document is YAML;
- JSON through the standard library's decoder, after a first pass over its brackets (outside strings) that refuses
  nesting deeper than `MAX_DEPTH` before anything is built; NaN and Infinity, which are not JSON, are refused, and so
  is a number too large for a float;
- YAML through PyYAML's safe loader (plain data, never Python objects), after a first pass over the parser's events,
  before anything is built, that refuses aliases (an alias bomb, "billion laughs", expands a few hundred bytes into
  gigabytes of nested lists, and a pod has no use for aliases), a second document, and nesting deeper than
  `MAX_DEPTH` (libyaml's composer recurses in C);
- YAML 1.1 timestamps stay strings (otherwise `creationTimestamp: 2024-01-01T00:00:00Z` would become a datetime);
- the result must be JSON data (string keys; strings, integers, finite floats, booleans, null, lists and maps; no
  unpaired UTF-16 surrogate, which could not be written out as UTF-8), so the rest of the agent (hashing, deep
  copies, JSON encoding) can trust its shape.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

MAX_MANIFEST_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 64


class ManifestError(ValueError):
    """The bytes are not a usable manifest: too large, not UTF-8, not YAML/JSON, or not plain JSON data."""


# libyaml when PyYAML was built with it (about three times faster on a 1 MiB manifest), else the pure-Python parser.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[valid-type, misc]
    """The safe loader with YAML 1.1 timestamps kept as strings."""


def _timestamp_as_string(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_string)


def _check_events(text: str) -> None:
    """First pass over the parser's events: no alias, one document, bounded nesting (before anything is built)."""
    depth = 0
    documents = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark is not None else 0
            raise ManifestError(f"YAML aliases are not allowed in pod manifests (alias *{event.anchor} at line {line})")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestError(f"the manifest nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise ManifestError("a manifest holds one document; found a second one (---)")


# A JSON string (quotes and escapes included) or a bracket; strings are matched whole so brackets in them do not count.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_json_depth(text: str) -> None:
    """First pass over a JSON document's brackets: bounded nesting (before the recursive decoder builds anything)."""
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestError(f"the manifest nests deeper than {MAX_DEPTH} levels")
        elif token in "]}":
            depth -= 1


def _refuse_constant(name: str) -> Any:
    raise ManifestError(f"not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ManifestError(f"not valid JSON: the number {text} is out of range")
    return value


def _load_json(text: str) -> Any:
    _check_json_depth(text)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ManifestError:
        raise
    except json.JSONDecodeError as exc:
        raise ManifestError(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ManifestError("the manifest nests too deeply") from exc
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise ManifestError(f"not valid JSON: {exc}") from exc


def _load_yaml(text: str) -> Any:
    try:
        _check_events(text)
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: plain data only
    except ManifestError:
        raise
    except yaml.YAMLError as exc:
        raise ManifestError(f"not valid YAML or JSON: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise ManifestError("the manifest nests too deeply") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # Scalars the safe constructor cannot build (e.g. an invalid !!binary or !!float).
        raise ManifestError(f"not valid YAML or JSON: {exc}") from exc


def _check_string(value: str, path: str) -> None:
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        raise ManifestError(
            f"the manifest holds an unpaired UTF-16 surrogate (\\u{ord(surrogate.group()):04x}) at {path or '.'}"
        )


def _check_json_data(root: Any) -> None:
    """Iterative (a hostile manifest could nest deeper than Python's recursion limit)."""
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ManifestError(f"the manifest nests deeper than {MAX_DEPTH} levels at {path or '.'}")
        if isinstance(value, dict):
            for key, child in value.items():
                if not isinstance(key, str):
                    raise ManifestError(f"map keys must be strings, found {key!r} at {path or '.'}")
                _check_string(key, path)
                stack.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                stack.append((child, f"{path}[{i}]", depth + 1))
        elif isinstance(value, str):
            _check_string(value, path)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ManifestError(f"{value} is not a JSON number, at {path or '.'}")
        elif not (value is None or isinstance(value, bool | int)):
            raise ManifestError(f"{type(value).__name__} values are not allowed in pod manifests, at {path or '.'}")


def is_json(text: str) -> bool:
    """Upstream's test (utilyaml.ToJSON): JSON when the first non-blank character is an opening brace."""
    return text.lstrip().startswith("{")


def load_manifest(data: bytes) -> Any:
    """The JSON data in `data` (one JSON or YAML document). Raises ManifestError, never anything else."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"the manifest is over the size limit of {MAX_MANIFEST_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"the manifest is not UTF-8: {exc}") from exc
    loaded = _load_json(text) if is_json(text) else _load_yaml(text)
    if loaded is None:
        raise ManifestError("the manifest is empty")
    _check_json_data(loaded)
    return loaded
