"""The pod field audit's pure parts: the schema walk on a small fragment recorded from the testbed's apiserver
(v1.34.4, /openapi/v3/api/v1, cut to a few properties per type), the audit both ways, the table's own rules, the
modules it names, and the rendered page. The live walk of the whole schema is tests/integration/
test_pod_fields_audit.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nodeagent import podfields
from nodeagent.podfields import SchemaError, SchemaField, Status, TableError

FRAGMENT = Path(__file__).with_name("podfields_schema_fragment.json")
DOC = Path(__file__).resolve().parents[2] / "docs" / "pod-fields.md"


def fragment() -> Mapping[str, Any]:
    return podfields.schemas_of(json.loads(FRAGMENT.read_text()))


def paths(fields: list[SchemaField]) -> list[str]:
    return [f.path for f in fields]


# --- the walk ------------------------------------------------------------------------------------------------------

FULL_WALK = [
    ("metadata.labels", "ObjectMeta.labels"),
    ("metadata.managedFields", "ObjectMeta.managedFields"),
    ("metadata.managedFields[].manager", "ManagedFieldsEntry.manager"),
    ("metadata.name", "ObjectMeta.name"),
    ("spec.affinity", "PodSpec.affinity"),
    ("spec.affinity.nodeAffinity", "Affinity.nodeAffinity"),
    (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        "NodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    ),
    (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        "NodeSelector.nodeSelectorTerms",
    ),
    (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchFields",
        "NodeSelectorTerm.matchFields",
    ),
    (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchFields[]"
        ".key",
        "NodeSelectorRequirement.key",
    ),
    ("spec.affinity.podAffinity", "Affinity.podAffinity"),
    (
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        "PodAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    ),
    (
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[].topologyKey",
        "PodAffinityTerm.topologyKey",
    ),
    ("spec.containers", "PodSpec.containers"),
    ("spec.containers[].livenessProbe", "Container.livenessProbe"),
    ("spec.containers[].livenessProbe.exec", "Probe.exec"),
    ("spec.containers[].livenessProbe.exec.command", "ExecAction.command"),
    ("spec.containers[].livenessProbe.periodSeconds", "Probe.periodSeconds"),
    ("spec.containers[].name", "Container.name"),
    ("spec.containers[].ports", "Container.ports"),
    ("spec.containers[].ports[].hostPort", "ContainerPort.hostPort"),
    ("spec.initContainers", "PodSpec.initContainers"),
    ("spec.initContainers[].livenessProbe", "Container.livenessProbe"),
    ("spec.initContainers[].livenessProbe.exec", "Probe.exec"),
    ("spec.initContainers[].livenessProbe.exec.command", "ExecAction.command"),
    ("spec.initContainers[].livenessProbe.periodSeconds", "Probe.periodSeconds"),
    ("spec.initContainers[].name", "Container.name"),
    ("spec.initContainers[].ports", "Container.ports"),
    ("spec.initContainers[].ports[].hostPort", "ContainerPort.hostPort"),
    ("spec.overhead", "PodSpec.overhead"),
    ("spec.volumes", "PodSpec.volumes"),
    ("spec.volumes[].name", "Volume.name"),
    ("spec.volumes[].nfs", "Volume.nfs"),
    ("spec.volumes[].nfs.server", "NFSVolumeSource.server"),
]


def test_walk_follows_refs_arrays_and_allof_into_every_nested_type() -> None:
    fields = podfields.walk_pod_schema(fragment(), roots=("metadata", "spec"))
    assert [(f.path, f.key) for f in fields] == FULL_WALK


def test_walk_records_the_referenced_type_and_treats_quantity_maps_as_leaves() -> None:
    by_path = {f.path: f for f in podfields.walk_pod_schema(fragment(), roots=("spec",))}
    assert by_path["spec.containers"].ref == "io.k8s.api.core.v1.Container"
    assert by_path["spec.overhead"].ref == "io.k8s.apimachinery.pkg.api.resource.Quantity"  # no properties: a leaf
    assert by_path["spec.containers[].name"].ref == ""


def test_walk_never_enters_the_pod_status_or_unlisted_roots() -> None:
    fields = podfields.walk_pod_schema(fragment(), roots=("spec",))
    assert not [p for p in paths(fields) if not p.startswith("spec.")]


def test_stop_keeps_the_field_and_skips_its_subtree() -> None:
    fields = podfields.walk_pod_schema(
        fragment(), roots=("spec",), stop=lambda f: f.key in {"Affinity.podAffinity", "Volume.nfs"}
    )
    got = paths(fields)
    assert "spec.affinity.podAffinity" in got
    assert "spec.volumes[].nfs" in got
    assert not [p for p in got if p.startswith(("spec.affinity.podAffinity.", "spec.volumes[].nfs."))]


def _schemas(**types: Mapping[str, Any]) -> dict[str, Any]:
    pod = {"properties": {"spec": {"$ref": "#/components/schemas/x.Spec"}}}
    return {"io.k8s.api.core.v1.Pod": pod, **{f"x.{name}": schema for name, schema in types.items()}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/x.{name}"}


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        # a map of objects is spelled {} and descended into
        (
            {
                "Spec": {"properties": {"m": {"type": "object", "additionalProperties": _ref("V")}}},
                "V": {"properties": {"a": {"type": "string"}}},
            },
            ["spec.m", "spec.m{}.a"],
        ),
        # an array of arrays
        (
            {
                "Spec": {"properties": {"l": {"type": "array", "items": {"type": "array", "items": _ref("V")}}}},
                "V": {"properties": {"a": {"type": "string"}}},
            },
            ["spec.l", "spec.l[][].a"],
        ),
        # a cycle is walked once
        (
            {
                "Spec": {"properties": {"n": _ref("Node")}},
                "Node": {"properties": {"next": _ref("Node"), "v": {"type": "integer"}}},
            },
            ["spec.n", "spec.n.next", "spec.n.v"],
        ),
    ],
)
def test_walk_shapes(types: dict[str, Mapping[str, Any]], expected: list[str]) -> None:
    assert paths(podfields.walk_pod_schema(_schemas(**types), roots=("spec",))) == expected


@pytest.mark.parametrize(
    ("schemas", "roots", "message"),
    [
        ({}, ("spec",), "no io.k8s.api.core.v1.Pod"),
        (_schemas(Spec={"properties": {}}), ("status",), "no property 'status'"),
        (_schemas(Spec={"properties": {"a": _ref("Gone")}}), ("spec",), "spec.a: $ref to x.Gone"),
        (
            {
                **_schemas(Spec={"properties": {"a": _ref("V"), "b": {"$ref": "#/components/schemas/y.V"}}}),
                "x.V": {"properties": {"p": {"type": "string"}}},
                "y.V": {"properties": {"q": {"type": "string"}}},
            },
            ("spec",),
            "two types named V",
        ),
    ],
)
def test_walk_refuses_schemas_it_cannot_walk(schemas: dict[str, Any], roots: tuple[str, ...], message: str) -> None:
    with pytest.raises(SchemaError, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
        podfields.walk_pod_schema(schemas, roots=roots)


# --- the audit -----------------------------------------------------------------------------------------------------

FRAGMENT_TABLE: dict[str, Any] = {
    "release": "test",
    "roots": ["metadata", "spec"],
    "fields": {
        "ObjectMeta.labels": {"status": "honoured", "modules": ["nodeagent.kuberuntime.labels"]},
        "ObjectMeta.managedFields": {"status": "not-node", "whole": True, "note": "apply bookkeeping"},
        "ObjectMeta.name": {"status": "honoured", "modules": ["nodeagent.kuberuntime.labels"]},
        "PodSpec.affinity": {"status": "honoured", "modules": ["nodeagent.admission.predicates"]},
        "Affinity.nodeAffinity": {"status": "honoured", "modules": ["nodeagent.admission.predicates"]},
        "NodeAffinity.requiredDuringSchedulingIgnoredDuringExecution": {
            "status": "honoured",
            "modules": ["nodeagent.admission.predicates"],
        },
        "NodeSelector.nodeSelectorTerms": {"status": "honoured", "modules": ["nodeagent.admission.predicates"]},
        "NodeSelectorTerm.matchFields": {"status": "honoured", "modules": ["nodeagent.admission.predicates"]},
        "NodeSelectorRequirement.key": {"status": "honoured", "modules": ["nodeagent.admission.predicates"]},
        "Affinity.podAffinity": {"status": "not-node", "whole": True, "note": "the scheduler's"},
        "PodSpec.containers": {"status": "honoured", "modules": ["nodeagent.kuberuntime.manager"]},
        "PodSpec.initContainers": {"status": "honoured", "modules": ["nodeagent.kuberuntime.manager"]},
        "Container.livenessProbe": {"status": "honoured", "modules": ["nodeagent.prober.manager"]},
        "Probe.exec": {"status": "honoured", "modules": ["nodeagent.prober.execprobe"]},
        "ExecAction.command": {"status": "honoured", "modules": ["nodeagent.prober.execprobe"]},
        "Probe.periodSeconds": {"status": "honoured", "modules": ["nodeagent.prober.worker"]},
        "Container.name": {"status": "honoured", "modules": ["nodeagent.kuberuntime.labels"]},
        "Container.ports": {"status": "honoured", "modules": ["nodeagent.kuberuntime.sandbox_config"]},
        "ContainerPort.hostPort": {"status": "honoured", "modules": ["nodeagent.kuberuntime.sandbox_config"]},
        "spec.initContainers[].ports": {"status": "not-node", "whole": True, "note": "a path row wins"},
        "PodSpec.overhead": {"status": "ignored", "note": "a gap"},
        "PodSpec.volumes": {"status": "honoured", "modules": ["nodeagent.volume"]},
        "Volume.name": {"status": "honoured", "modules": ["nodeagent.volumemanager.desired"]},
        "Volume.nfs": {
            "status": "refused",
            "whole": True,
            "modules": ["nodeagent.volume"],
            "reason": "FailedMount",
            "message": "nfs volumes are not supported on this node (no volume plugin matched)",
        },
    },
    "known_gaps": {"PodSpec.overhead": {"issue": 29, "note": "a gap"}},
}


def _table(edit: Any = None) -> podfields.Table:
    data = json.loads(json.dumps(FRAGMENT_TABLE))
    if edit is not None:
        edit(data)
    return podfields.parse_table(data)


def _audit(table: podfields.Table) -> podfields.Audit:
    return podfields.audit(table, podfields.walk_for_table(fragment(), table))


def test_a_complete_table_audits_clean_and_counts_paths_per_status() -> None:
    result = _audit(_table())
    assert result.ok, result.problems()
    assert result.path_counts == {
        Status.HONOURED: 24,
        Status.REFUSED: 1,
        Status.NOT_NODE: 3,  # managedFields, podAffinity, the init containers' ports: their subtrees not walked
        Status.IGNORED: 1,
    }


def test_a_deleted_row_fails_naming_every_path_it_covered() -> None:
    result = _audit(_table(lambda d: d["fields"].pop("Probe.periodSeconds")))
    assert not result.ok
    assert [f.path for f in result.missing] == [
        "spec.containers[].livenessProbe.periodSeconds",
        "spec.initContainers[].livenessProbe.periodSeconds",
    ]
    assert result.problems()[0] == (
        "no row for spec.containers[].livenessProbe.periodSeconds (add `Probe.periodSeconds` to "
        "nodeagent/podfields.yaml)"
    )


def test_a_row_for_a_field_the_schema_lacks_fails() -> None:
    result = _audit(_table(lambda d: d["fields"].update({"Probe.noSuchField": {"status": "not-node", "note": "x"}})))
    assert result.stale == ("Probe.noSuchField",)
    assert not result.ok


def test_a_row_below_a_whole_row_is_stale() -> None:
    result = _audit(
        _table(lambda d: d["fields"].update({"NFSVolumeSource.server": {"status": "not-node", "note": "x"}}))
    )
    assert result.stale == ("NFSVolumeSource.server",)


def test_a_path_row_wins_over_its_type_row_for_that_path_only() -> None:
    table = _table()
    fields = {f.path: f for f in podfields.walk_for_table(fragment(), table)}
    init_ports = table.row_for(fields["spec.initContainers[].ports"])
    ports = table.row_for(fields["spec.containers[].ports"])
    assert init_ports is not None and init_ports.status is Status.NOT_NODE
    assert ports is not None and ports.status is Status.HONOURED
    assert "spec.initContainers[].ports[].hostPort" not in fields


def test_an_ignored_row_outside_known_gaps_fails() -> None:
    result = _audit(_table(lambda d: d["known_gaps"].clear()))
    assert result.unlisted_gaps == ("PodSpec.overhead",)
    assert not result.ok


def test_a_known_gap_whose_row_is_no_longer_ignored_fails() -> None:
    def honour(d: dict[str, Any]) -> None:
        d["fields"]["PodSpec.overhead"] = {"status": "honoured", "modules": ["nodeagent.admission.resources"]}

    result = _audit(_table(honour))
    assert result.stale_gaps == ("PodSpec.overhead",)
    assert not result.ok


# --- the table's own rules -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"status": "honoured"}, "honoured rows name the modules"),
        ({"status": "refused", "modules": ["nodeagent.volume"]}, "refused rows give upstream's reason and message"),
        ({"status": "not-node"}, "not-node rows say why in a note"),
        ({"status": "ignored", "note": "x", "modules": ["nodeagent.volume"]}, "ignored rows name no modules"),
        ({"status": "honoured", "modules": ["nodeagent.volume"], "whole": True}, "cannot stand for their subtree"),
        ({"status": "maybe"}, "status must be one of"),
        ({"status": "not-node", "note": "x", "colour": "red"}, "unknown attributes ['colour']"),
        ({"status": "honoured", "modules": "nodeagent.volume"}, "modules must be a list"),
    ],
)
def test_table_rules(row: dict[str, Any], message: str) -> None:
    with pytest.raises(TableError, match=message.replace("[", r"\[").replace("]", r"\]")):
        podfields.parse_table({"roots": ["spec"], "fields": {"PodSpec.x": row}})


def test_a_known_gap_needs_an_issue() -> None:
    with pytest.raises(TableError, match="needs an issue number"):
        podfields.parse_table({"roots": ["spec"], "fields": {}, "known_gaps": {"PodSpec.x": {"note": "x"}}})


# --- the real table ------------------------------------------------------------------------------------------------


def test_the_table_loads_and_every_ignored_row_is_a_known_gap() -> None:
    table = podfields.load_table()
    assert table.release == "v1.34.4"
    assert table.roots == ("metadata", "spec")
    ignored = {key for key, row in table.rows.items() if row.status is Status.IGNORED}
    print("known gaps (status ignored):", *podfields.known_gap_lines(table), sep="\n  ")
    assert ignored == set(table.known_gaps)
    assert table.counts()[Status.HONOURED] > 0


def test_every_module_the_table_names_exists() -> None:
    missing = podfields.missing_modules(podfields.load_table())
    pending = [m for m in missing if m[2]]
    if pending:
        print("modules of pending rows not found yet:", *(f"{k}: {m} ({p})" for k, m, p in pending), sep="\n  ")
    assert [(key, module) for key, module, p in missing if not p] == []


def test_the_module_check_can_fail() -> None:
    table = podfields.parse_table(
        {"roots": ["spec"], "fields": {"PodSpec.x": {"status": "honoured", "modules": ["nodeagent.no_such_module"]}}}
    )
    assert podfields.missing_modules(table) == [("PodSpec.x", "nodeagent.no_such_module", "")]


def test_the_page_renders_the_table_as_it_is() -> None:
    page = DOC.read_text(encoding="utf-8")
    expected = podfields.render_markdown(podfields.load_table())
    assert podfields.generated_block(page) == expected, (
        "docs/pod-fields.md is stale: run python3 scripts/render-pod-fields.py"
    )


def test_a_stale_page_is_noticed() -> None:
    page = DOC.read_text(encoding="utf-8")
    stale = podfields.splice_generated(page, "| a row that is no longer there |\n")
    assert podfields.generated_block(stale) != podfields.render_markdown(podfields.load_table())
    assert podfields.splice_generated(stale, podfields.render_markdown(podfields.load_table())) == page
