"""An apiserver audit log of one user's list and watch requests, to count a client's re-lists (issue 34's "no storm of
re-lists" after an apiserver outage), or of a group's (a fleet's nodes, `system:nodes`), with more verbs (a fleet's
re-registrations: `create nodes`).

`enable` writes the policy and returns the kube-apiserver flags (for `Testbed.start_apiserver(extra_args=...)`);
`requests` reads back "verb resource" → count over a window.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  {who}
  verbs: {verbs}
- level: None
"""


def enable(
    directory: Path, user: str = "", *, group: str = "", verbs: Sequence[str] = ("list", "watch")
) -> tuple[Path, list[str]]:
    """The audit log's path and the flags that make the apiserver write it (at most 20 MB, one backup): the requests
    of `user`, or of every member of `group`, with one of `verbs`."""
    if bool(user) == bool(group):
        raise ValueError("audit.enable: one of user and group")
    who = f"users: [{json.dumps(user)}]" if user else f"userGroups: [{json.dumps(group)}]"
    policy = directory / "audit-policy.yaml"
    policy.write_text(POLICY.replace("{who}", who).replace("{verbs}", json.dumps(list(verbs))))
    log = directory / "apiserver-audit.log"
    return log, [
        f"--audit-log-path={log}",
        f"--audit-policy-file={policy}",
        "--audit-log-maxsize=20",
        "--audit-log-maxbackup=1",
    ]


def _wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def requests(log: Path, user: str | Callable[[str], bool], since: float, until: float) -> dict[str, int]:
    """ "verb resource" → how many of the user's requests the apiserver received in [since, until] (wall seconds):
    a list once it completed, a watch once its response started. `user`: a name, or a test of names."""
    wants = user if callable(user) else user.__eq__
    counts: dict[str, int] = {}
    if not log.exists():
        return counts
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            event = json.loads(line)
            verb = event["verb"]
            wanted = "ResponseStarted" if verb == "watch" else "ResponseComplete"
            if not wants(event["user"]["username"]) or event.get("stage") != wanted:
                continue
            if not since <= _wall(event["requestReceivedTimestamp"]) <= until:
                continue
            key = f"{verb} {(event.get('objectRef') or {}).get('resource', event['requestURI'])}"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def total(counts: dict[str, int], verb: str) -> int:
    return sum(n for key, n in counts.items() if key.split(" ", 1)[0] == verb)
