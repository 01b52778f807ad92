"""Safe decoding of a pod manifest: bytes from a file or a URL become JSON data, or a clear `ManifestError`.

Whoever can write the manifest directory or serve the manifest URL hands the agent bytes; decoding them must never
crash or exhaust the agent. So, before anything else is looked at:

- a size cap of 1 MiB per manifest (upstream reads up to 10 MB), checked before parsing;
- UTF-8 only;
- YAML through PyYAML's safe loader (plain data, never Python objects);
- a first pass over the parser's events, before anything is built, refuses aliases (an alias bomb, "billion laughs",
  expands a few hundred bytes into gigabytes of nested lists, and a pod has no use for aliases), a second document,
  and nesting deeper than `MAX_DEPTH` (libyaml's composer recurses in C);
- YAML 1.1 timestamps stay strings (otherwise `creationTimestamp: 2024-01-01T00:00:00Z` would become a datetime);
- the result must be JSON data (string keys; strings, integers, floats, booleans, null, lists and maps), so the
  rest of the agent (hashing, deep copies, JSON encoding) can trust its shape.

JSON is YAML, so JSON manifests take the same path (as upstream's utilyaml.ToJSON).
"""

from __future__ import annotations

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
                stack.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                stack.append((child, f"{path}[{i}]", depth + 1))
        elif not (value is None or isinstance(value, str | bool | int | float)):
            raise ManifestError(f"{type(value).__name__} values are not allowed in pod manifests, at {path or '.'}")


def load_manifest(data: bytes) -> Any:
    """The JSON data in `data` (one YAML or JSON document). Raises ManifestError, never anything else."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"the manifest is over the size limit of {MAX_MANIFEST_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"the manifest is not UTF-8: {exc}") from exc
    try:
        _check_events(text)
        loaded = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: plain data only
    except ManifestError:
        raise
    except yaml.YAMLError as exc:
        raise ManifestError(f"not valid YAML or JSON: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise ManifestError("the manifest nests too deeply") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # Scalars the safe constructor cannot build (e.g. an invalid !!binary or !!float).
        raise ManifestError(f"not valid YAML or JSON: {exc}") from exc
    if loaded is None:
        raise ManifestError("the manifest is empty")
    _check_json_data(loaded)
    return loaded
