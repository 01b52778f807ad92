"""The audit policy for one user or a group, and the counts read back by a name or a test of names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.testbed import audit


def test_policy_for_a_user_or_a_group(tmp_path: Path) -> None:
    log, flags = audit.enable(tmp_path, "system:node:n1")
    policy = (tmp_path / "audit-policy.yaml").read_text()
    assert 'users: ["system:node:n1"]' in policy and 'verbs: ["list", "watch"]' in policy
    assert f"--audit-log-path={log}" in flags
    audit.enable(tmp_path, group="system:nodes", verbs=("create", "list"))
    policy = (tmp_path / "audit-policy.yaml").read_text()
    assert 'userGroups: ["system:nodes"]' in policy and "users:" not in policy
    assert 'verbs: ["create", "list"]' in policy
    with pytest.raises(ValueError):
        audit.enable(tmp_path)
    with pytest.raises(ValueError):
        audit.enable(tmp_path, "u", group="g")


def event(user: str, verb: str, resource: str, stage: str = "ResponseComplete") -> str:
    return json.dumps({
        "user": {"username": user}, "verb": verb, "stage": stage, "objectRef": {"resource": resource},
        "requestReceivedTimestamp": "2026-11-30T12:00:01.000000Z", "requestURI": f"/api/v1/{resource}",
    })  # fmt: skip


def test_requests_by_name_or_by_a_test_of_names(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        event("system:node:f-0", "list", "pods"),
        event("system:node:f-1", "create", "nodes"),
        event("system:node:f-1", "watch", "pods", stage="ResponseStarted"),
        event("system:node:f-1", "watch", "pods", stage="ResponseComplete"),  # a watch counts once, when it starts
        event("system:node:other", "list", "pods"),
    ]
    log.write_text("\n".join(lines) + "\n")
    since, until = 1796040000.0, 1796050000.0  # 2026-11-30 around 12:00 UTC
    assert audit.requests(log, "system:node:f-0", since, until) == {"list pods": 1}
    fleet = audit.requests(log, lambda user: user.startswith("system:node:f-"), since, until)
    assert fleet == {"create nodes": 1, "list pods": 1, "watch pods": 1}
    assert audit.requests(log, "system:node:f-0", until, until + 1) == {}
