"""The pod field audit against the Pod schema the testbed's apiserver serves (/openapi/v3/api/v1): every field
reachable from the Pod's metadata and spec has a row in nodeagent/podfields.yaml, every row names a field of that
schema, and every field nodeagent ignores is a known gap with an issue (issue 29). A release that adds a field fails
here, naming the path, until someone decides what the node does with it."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent import podfields
from nodeagent.kube.client import KubeClient

pytestmark = pytest.mark.integration


async def _served_schemas(admin: KubeClient) -> Any:
    return podfields.schemas_of(await admin.get("/openapi/v3/api/v1"))


async def test_every_pod_field_the_apiserver_serves_has_a_row(admin: KubeClient) -> None:
    version = await admin.get("/version")
    schemas = await _served_schemas(admin)
    table = podfields.load_table()
    fields = podfields.walk_for_table(schemas, table)
    result = podfields.audit(table, fields)

    print(f"apiserver {version.get('gitVersion')}, table {table.release}: {len(fields)} schema paths")
    print("paths per status:", ", ".join(f"{status} {n}" for status, n in result.path_counts.items()))
    print("rows per status:", ", ".join(f"{status} {n}" for status, n in table.counts().items()))
    print("known gaps (status ignored):", *podfields.known_gap_lines(table), sep="\n  ")
    assert result.ok, "the pod field table and the served schema disagree:\n" + "\n".join(result.problems())
    # The walk reached every kind of type the table is about, not a truncated schema.
    assert {"Probe.periodSeconds", "SeccompProfile.type", "Volume.csi", "ObjectMeta.uid"} <= {f.key for f in fields}


async def test_every_row_is_needed(admin: KubeClient) -> None:
    """Removing any one row makes the audit fail: no row is dead weight, and the audit notices a lost row."""
    schemas = await _served_schemas(admin)
    table = podfields.load_table()
    survivors = []
    for key in table.rows:
        rows = {k: row for k, row in table.rows.items() if k != key}
        known_gaps = {k: gap for k, gap in table.known_gaps.items() if k != key}
        cut = podfields.Table(release=table.release, roots=table.roots, rows=rows, known_gaps=known_gaps)
        if podfields.audit(cut, podfields.walk_for_table(schemas, cut)).ok:
            survivors.append(key)
    assert survivors == []
