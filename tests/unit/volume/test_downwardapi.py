from __future__ import annotations

from typing import Any

import pytest

from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.downwardapi import collect_data, field_path_value, format_map, go_quote
from nodeagent.volume.errors import SetUpError

POD: dict[str, Any] = {
    "metadata": {
        "name": "web",
        "namespace": "prod",
        "uid": "1234",
        "labels": {"b": "2", "a": "1"},
        "annotations": {"note": 'say "hi"\n'},
    },
    "spec": {
        "containers": [
            {"name": "app", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "250m"}}}
        ]
    },
}


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("plain", '"plain"'),
        ('a"b', '"a\\"b"'),
        ("back\\slash", '"back\\\\slash"'),
        ("tab\tnew\nline", '"tab\\tnew\\nline"'),
        ("bell\x07", '"bell\\a"'),
        ("nul\x00", '"nul\\x00"'),
        ("é ünïcode", '"é ünïcode"'),
        ("soft\u00adhyphen", '"soft\\u00adhyphen"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_format_map_sorts_and_quotes() -> None:
    assert format_map({"b": "2", "a": "x y"}) == 'a="x y"\nb="2"'
    assert format_map({}) == ""


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "web"),
        ("metadata.namespace", "prod"),
        ("metadata.uid", "1234"),
        ("metadata.labels", 'a="1"\nb="2"'),
        ("metadata.annotations", 'note="say \\"hi\\"\\n"'),
        ("metadata.labels['a']", "1"),
        ("metadata.labels['missing']", ""),
        ("metadata.annotations['note']", 'say "hi"\n'),
    ],
)
def test_field_path_value(path: str, value: str) -> None:
    assert field_path_value(POD, path) == value


def test_unsupported_field_path() -> None:
    with pytest.raises(SetUpError, match=r"^unsupported fieldPath: spec.nodeName$"):
        field_path_value(POD, "spec.nodeName")


def test_collect_data() -> None:
    items: list[dict[str, Any]] = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}, "mode": 0o400},
        {"path": "cpu_limit", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}},
        {"path": "cpu_request", "resourceFieldRef": {"containerName": "app", "resource": "requests.cpu"}},
        {"path": "node_mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.ephemeral-storage"}},
    ]
    payload = collect_data(items, POD, {"ephemeral-storage": "10Gi"}, 0o644)
    assert payload == {
        "name": FileProjection(b"web", 0o644),
        "labels": FileProjection(b'a="1"\nb="2"', 0o400),
        "cpu_limit": FileProjection(b"500", 0o644),
        "mem": FileProjection(b"64", 0o644),
        "cpu_request": FileProjection(b"1", 0o644),
        "node_mem": FileProjection(str(10 * 1024**3).encode(), 0o644),
    }


def test_collect_data_reports_all_errors() -> None:
    items = [
        {"path": "a", "fieldRef": {"fieldPath": "spec.nodeName"}},
        {"path": "b", "resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}},
    ]
    with pytest.raises(SetUpError) as caught:
        collect_data(items, POD, {}, 0o644)
    assert str(caught.value) == "[unsupported fieldPath: spec.nodeName, container nope not found]"
