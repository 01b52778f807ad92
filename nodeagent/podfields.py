"""The pod field audit: what nodeagent does with every Pod field a kubelet could act on (issue 29).

The table is data, `podfields.yaml` next to this module; this module loads it, walks a Pod schema (the OpenAPI v3
document the apiserver serves at /openapi/v3/api/v1) and compares the two. Why a walk of the served schema and not a
list kept by hand: a list kept by hand rots silently when a release adds a field, and the walk does not. The tests
run it both ways: every schema field must have a row, and every row must name a field the schema has.

Rows are keyed by `Type.field` (the schema type that declares the field, by its short name, and the field's JSON
name), so one row covers every path where the type appears: `Probe.periodSeconds` stands for the liveness, readiness
and startup probes of regular, init and sidecar containers alike. A row keyed by a full path (`spec.containers[].x`)
wins over the type's row for that one path. A row marked `whole` stands for its field's subtree: the walk does not
descend there (the scheduler's affinity terms, a volume type this node refuses outright).

Four statuses: `honoured` (named modules do it), `refused` (the pod gets upstream's failure: a reason and a
message), `not-node` (the apiserver, scheduler, controllers or a Windows kubelet act on it, never a Linux kubelet)
and `ignored` (upstream acts on it, nodeagent does not: allowed only when listed in `known_gaps` with an issue).

`render_markdown` draws the table for docs/pod-fields.md; scripts/render-pod-fields.py writes it there and a unit
test checks that the committed page is what the table renders.
"""

from __future__ import annotations

import enum
import importlib.util
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TABLE_PATH = Path(__file__).with_name("podfields.yaml")
POD_SCHEMA = "io.k8s.api.core.v1.Pod"
GENERATED_BEGIN = "<!-- BEGIN GENERATED: scripts/render-pod-fields.py renders this from nodeagent/podfields.yaml -->"
GENERATED_END = "<!-- END GENERATED -->"


class Status(enum.StrEnum):
    HONOURED = "honoured"
    REFUSED = "refused"
    NOT_NODE = "not-node"
    IGNORED = "ignored"


class TableError(ValueError):
    """The table breaks its own rules (every problem is in the message, one a line)."""


class SchemaError(ValueError):
    """The schema cannot be walked (a missing root type or property, an unresolved $ref, a name collision)."""


@dataclass(frozen=True, kw_only=True)
class Row:
    key: str
    status: Status
    modules: tuple[str, ...] = ()
    reason: str = ""
    message: str = ""
    upstream: str = ""
    note: str = ""
    whole: bool = False
    gate: str = ""
    pending: str = ""


@dataclass(frozen=True)
class KnownGap:
    key: str
    issue: int
    note: str


@dataclass(frozen=True)
class Table:
    release: str
    roots: tuple[str, ...]
    rows: Mapping[str, Row]
    known_gaps: Mapping[str, KnownGap]

    def is_path_key(self, key: str) -> bool:
        """A full path (`spec.x[].y`) rather than a `Type.field` key."""
        return key.split(".", 1)[0].removesuffix("[]") in self.roots

    def row_for(self, schema_field: SchemaField) -> Row | None:
        """The path's own row, else its type's row, else None."""
        return self.rows.get(schema_field.path) or self.rows.get(schema_field.key)

    def counts(self) -> dict[Status, int]:
        """Rows per status, every status present."""
        counter = Counter(row.status for row in self.rows.values())
        return {status: counter.get(status, 0) for status in Status}


@dataclass(frozen=True)
class SchemaField:
    #: e.g. spec.containers[].securityContext.privileged (`[]` marks an array, `{}` a map of objects)
    path: str
    #: e.g. SecurityContext.privileged
    key: str
    #: the full name of the type the field refers to ("" for a scalar, a string map or a list of scalars)
    ref: str = ""


@dataclass(frozen=True)
class Audit:
    #: schema fields without a row
    missing: tuple[SchemaField, ...] = ()
    #: rows whose key names no field of the schema
    stale: tuple[str, ...] = ()
    #: ignored rows not listed in known_gaps
    unlisted_gaps: tuple[str, ...] = ()
    #: known_gaps entries whose row is missing or not ignored
    stale_gaps: tuple[str, ...] = ()
    #: schema paths per status of the row that covers them
    path_counts: Mapping[Status, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.unlisted_gaps or self.stale_gaps)

    def problems(self) -> list[str]:
        out = [f"no row for {f.path} (add `{f.key}` to nodeagent/podfields.yaml)" for f in self.missing]
        out += [f"row `{key}` names no field of the schema" for key in self.stale]
        out += [f"row `{key}` is ignored but not listed in known_gaps" for key in self.unlisted_gaps]
        out += [f"known_gaps lists `{key}`, whose row is not ignored" for key in self.stale_gaps]
        return out


# --- the table ---------------------------------------------------------------------------------------------------

_ROW_ATTRIBUTES = frozenset({"status", "modules", "reason", "message", "upstream", "note", "whole", "gate", "pending"})


def _text(value: Any, where: str, errors: list[str]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.append(f"{where}: must be a string, not {value!r}")
        return ""
    return value


def _parse_row(key: str, raw: Any, errors: list[str]) -> Row | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{key}: a row must be a mapping")
        return None
    unknown = sorted(set(raw) - _ROW_ATTRIBUTES)
    if unknown:
        errors.append(f"{key}: unknown attributes {unknown}")
    try:
        status = Status(str(raw.get("status")))
    except ValueError:
        errors.append(f"{key}: status must be one of {[s.value for s in Status]}, not {raw.get('status')!r}")
        return None
    modules_raw = raw.get("modules") or []
    if not isinstance(modules_raw, list) or not all(isinstance(m, str) and m for m in modules_raw):
        errors.append(f"{key}: modules must be a list of module names")
        modules_raw = []
    whole = raw.get("whole", False)
    if not isinstance(whole, bool):
        errors.append(f"{key}: whole must be true or false")
        whole = False
    row = Row(
        key=key,
        status=status,
        modules=tuple(modules_raw),
        reason=_text(raw.get("reason"), f"{key}.reason", errors),
        message=_text(raw.get("message"), f"{key}.message", errors),
        upstream=_text(raw.get("upstream"), f"{key}.upstream", errors),
        note=_text(raw.get("note"), f"{key}.note", errors),
        whole=whole,
        gate=_text(raw.get("gate"), f"{key}.gate", errors),
        pending=_text(raw.get("pending"), f"{key}.pending", errors),
    )
    if status in (Status.HONOURED, Status.REFUSED) and not row.modules:
        errors.append(f"{key}: {status} rows name the modules that do it")
    if status is Status.REFUSED and not (row.reason and row.message):
        errors.append(f"{key}: refused rows give upstream's reason and message")
    if status in (Status.NOT_NODE, Status.IGNORED) and row.modules:
        errors.append(f"{key}: {status} rows name no modules")
    if status in (Status.NOT_NODE, Status.IGNORED) and not row.note:
        errors.append(f"{key}: {status} rows say why in a note")
    if status is Status.HONOURED and row.whole:
        errors.append(f"{key}: honoured rows cannot stand for their subtree: list the fields below")
    return row


def _parse_gap(key: str, raw: Any, errors: list[str]) -> KnownGap | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("issue"), int) or not raw.get("note"):
        errors.append(f"known_gaps.{key}: needs an issue number and a note")
        return None
    return KnownGap(key=key, issue=int(raw["issue"]), note=str(raw["note"]))


def parse_table(data: Any) -> Table:
    """The table from its YAML document; raises TableError naming every problem."""
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise TableError("the table must be a mapping")
    roots = data.get("roots")
    if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
        errors.append("roots: a list of the Pod's top-level properties to walk")
        roots = []
    rows: dict[str, Row] = {}
    raw_rows = data.get("fields")
    if not isinstance(raw_rows, Mapping):
        errors.append("fields: a mapping of keys to rows")
        raw_rows = {}
    for key, raw in raw_rows.items():
        row = _parse_row(str(key), raw, errors)
        if row is not None:
            rows[row.key] = row
    gaps: dict[str, KnownGap] = {}
    raw_gaps = data.get("known_gaps") or {}
    if not isinstance(raw_gaps, Mapping):
        errors.append("known_gaps: a mapping of keys to {issue, note}")
        raw_gaps = {}
    for key, raw in raw_gaps.items():
        gap = _parse_gap(str(key), raw, errors)
        if gap is not None:
            gaps[gap.key] = gap
    if errors:
        raise TableError("\n".join(errors))
    return Table(release=str(data.get("release", "")), roots=tuple(roots), rows=rows, known_gaps=gaps)


def load_table(path: Path = TABLE_PATH) -> Table:
    return parse_table(yaml.safe_load(path.read_text(encoding="utf-8")))


def missing_modules(table: Table) -> list[tuple[str, str, str]]:
    """(row key, module, pending) for every module a row names that cannot be found; `pending` is the row's."""
    out: list[tuple[str, str, str]] = []
    for row in table.rows.values():
        for module in row.modules:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append((row.key, module, row.pending))
    return out


# --- the schema walk ---------------------------------------------------------------------------------------------


def short_name(type_name: str) -> str:
    """`io.k8s.api.core.v1.PodSpec` → `PodSpec`."""
    return type_name.rsplit(".", 1)[-1]


def _ref_of(prop: Mapping[str, Any]) -> str:
    ref = prop.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    all_of = prop.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        return _ref_of(all_of[0])
    return ""


def _target(prop: Mapping[str, Any]) -> tuple[str, str]:
    """(the referenced type, the path suffix that reaches it): `[]` per array level, `{}` per map level."""
    suffix = ""
    current: Mapping[str, Any] = prop
    while True:
        ref = _ref_of(current)
        if ref:
            return ref, suffix
        items = current.get("items")
        values = current.get("additionalProperties")
        if current.get("type") == "array" and isinstance(items, Mapping):
            current, suffix = items, suffix + "[]"
        elif isinstance(values, Mapping):
            current, suffix = values, suffix + "{}"
        else:
            return "", ""


def walk_pod_schema(
    schemas: Mapping[str, Any],
    *,
    roots: Sequence[str],
    stop: Callable[[SchemaField], bool] = lambda _: False,
    root_type: str = POD_SCHEMA,
) -> list[SchemaField]:
    """Every field reachable from the root type's `roots` properties, depth first in property order.

    `schemas` is the OpenAPI v3 document's components.schemas. A field whose referenced type has properties is
    descended into unless `stop(field)` says no, or the type is already on the way down (a cycle). The root
    properties themselves are not fields of the result: their types' fields are.
    """
    if root_type not in schemas:
        raise SchemaError(f"the schema has no {root_type}")
    root_props: Mapping[str, Any] = schemas[root_type].get("properties") or {}
    seen_names: dict[str, str] = {}
    out: list[SchemaField] = []

    def resolve(type_name: str, where: str) -> Mapping[str, Any]:
        schema = schemas.get(type_name)
        if not isinstance(schema, Mapping):
            raise SchemaError(f"{where}: $ref to {type_name}, which the schema does not define")
        short = short_name(type_name)
        if seen_names.setdefault(short, type_name) != type_name:
            raise SchemaError(f"two types named {short}: {seen_names[short]} and {type_name}")
        return schema

    def descend(type_name: str, prefix: str, stack: frozenset[str]) -> None:
        schema = resolve(type_name, prefix.rstrip("."))
        for name in sorted(schema.get("properties") or {}):
            prop: Mapping[str, Any] = schema["properties"][name]
            ref, suffix = _target(prop)
            item = SchemaField(path=prefix + name, key=f"{short_name(type_name)}.{name}", ref=ref)
            out.append(item)
            if not ref:
                continue
            target = resolve(ref, item.path)
            if target.get("properties") and ref not in stack and not stop(item):
                descend(ref, item.path + suffix + ".", stack | {ref})

    for root in roots:
        if root not in root_props:
            raise SchemaError(f"{root_type} has no property {root!r}")
        ref, suffix = _target(root_props[root])
        if not ref:
            raise SchemaError(f"{root_type}.{root} refers to no type")
        descend(ref, f"{root}{suffix}.", frozenset({root_type, ref}))
    return out


def walk_for_table(schemas: Mapping[str, Any], table: Table, *, root_type: str = POD_SCHEMA) -> list[SchemaField]:
    """The walk, stopping at the table's `whole` rows."""

    def stop(item: SchemaField) -> bool:
        row = table.row_for(item)
        return row is not None and row.whole

    return walk_pod_schema(schemas, roots=table.roots, stop=stop, root_type=root_type)


def audit(table: Table, fields: Iterable[SchemaField]) -> Audit:
    """Compare the table with the walked fields, both ways, and the ignored rows with known_gaps."""
    fields = list(fields)
    missing = tuple(f for f in fields if table.row_for(f) is None)
    used = {f.path for f in fields} | {f.key for f in fields}
    stale = tuple(key for key in table.rows if key not in used)
    ignored = {key for key, row in table.rows.items() if row.status is Status.IGNORED}
    unlisted = tuple(sorted(ignored - set(table.known_gaps)))
    stale_gaps = tuple(sorted(set(table.known_gaps) - ignored))
    counter = Counter(row.status for f in fields if (row := table.row_for(f)) is not None)
    return Audit(
        missing=missing,
        stale=stale,
        unlisted_gaps=unlisted,
        stale_gaps=stale_gaps,
        path_counts={status: counter.get(status, 0) for status in Status},
    )


def schemas_of(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """components.schemas of an OpenAPI v3 document."""
    schemas = (document.get("components") or {}).get("schemas")
    if not isinstance(schemas, Mapping):
        raise SchemaError("the document has no components.schemas")
    return schemas


def known_gap_lines(table: Table) -> list[str]:
    """One line per known gap, for the tests to print."""
    return [
        f"{gap.key} (issue {gap.issue}): {gap.note}"
        for gap in sorted(table.known_gaps.values(), key=lambda g: (g.issue, g.key))
    ]


# --- the rendered page -------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _what(row: Row) -> str:
    parts: list[str] = []
    if row.status is Status.REFUSED:
        parts.append(f"`{row.reason}`: {row.message}")
    if row.upstream:
        parts.append(f"upstream: {row.upstream}")
    if row.note:
        parts.append(row.note)
    if row.gate:
        parts.append(f"gate {row.gate}")
    if row.pending:
        parts.append(f"({row.pending})")
    if row.whole:
        parts.append("(and everything below it)")
    return _cell("; ".join(parts))


def render_markdown(table: Table) -> str:
    """The generated part of docs/pod-fields.md: counts, known gaps, then every row in the table's order."""
    counts = table.counts()
    lines = [
        f"Release {table.release}: {len(table.rows)} rows.",
        "",
        "| status | rows |",
        "|---|---|",
        *(f"| {status} | {counts[status]} |" for status in Status),
        "",
        "### Known gaps",
        "",
        *(
            [f"- {_cell(line)}" for line in known_gap_lines(table)]
            or ["None: every field upstream's kubelet acts on is honoured, refused or not the node's."]
        ),
        "",
        "### Every row",
        "",
        "| field | status | modules | what |",
        "|---|---|---|---|",
    ]
    for row in table.rows.values():
        modules = ", ".join(f"`{m}`" for m in row.modules)
        lines.append(f"| `{row.key}` | {row.status} | {modules} | {_what(row)} |")
    return "\n".join(lines) + "\n"


def splice_generated(page: str, generated: str) -> str:
    """The page with its generated block replaced; raises ValueError when the markers are missing."""
    start = page.index(GENERATED_BEGIN) + len(GENERATED_BEGIN)
    end = page.index(GENERATED_END, start)
    return page[:start] + "\n" + generated + page[end:]


def generated_block(page: str) -> str:
    """The page's generated block, as `splice_generated` writes it."""
    start = page.index(GENERATED_BEGIN) + len(GENERATED_BEGIN)
    end = page.index(GENERATED_END, start)
    return page[start:end].removeprefix("\n")
