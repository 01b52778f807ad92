"""KWOK beside `nodeagent fleet`: its controller built from the Go module proxy, and what it is run with so that
both emulate the same nodes (`benchmarks/fleet.py --peer kwok`, docs/fleet.md).

KWOK (`sigs.k8s.io/kwok`) fakes nodes and pods with declarative "stages": a stage selects objects by their fields and
patches their status (or deletes them) after a delay. It has no kubelet logic. Here it runs as its out-of-cluster
controller (`kwok --kubeconfig ...`), not through kwokctl, which downloads release binaries and so cannot run on
these machines. `nodeagent testbed install --with-kwok` builds it with `go install pkg@version`, its own go.mod and
go.sum picking the dependencies (the module has no `replace` lines), into the versioned cache.

What makes the comparison fair:
- **The same Node.** KWOK does not register nodes; the benchmark creates them. Each is made from a Node that a fleet
  node registered (`kwok_node`): its labels, annotations, taints, capacity, allocatable, nodeInfo, daemonEndpoints
  and images, with the name, the fleet label's value and the addresses of the KWOK node. Conditions are left to
  KWOK: the `node-ready` stage writes the template's own conditions (type, status, reason, message) with fresh
  times, as a kubelet posts them at its first status update.
- **Only its own nodes.** `--manage-nodes-with-label-selector node.nodeagent.io/fleet=<its prefix>`: the fleet's
  nodes carry the same label key with another value, so neither touches the other's nodes or their pods.
- **The same lease.** `--node-lease-duration-seconds 40`, a kubelet's default (kwokctl's is 200 s). KWOK then renews
  every 10 s with 4 % jitter, as upstream's lease controller and the fleet's lease thread do. Node status is posted
  again every 5 minutes (`node-heartbeat` stage, 300 to 310 s), a kubelet's nodeStatusReportFrequency; without the
  lease KWOK would rely on status updates alone.
- **The same pods.** `pod-running` sets a scheduled pod Running at once, with the status fields a fleet node
  reports (conditions, containerStatuses with a containerID, host and pod addresses, startTime): the fleet's fake
  runtime has no latency by default either. `pod-delete` deletes a pod whose deletion has begun, which a kubelet
  does once its containers are stopped.
- **Addresses** from the network-testing range: node InternalIPs as the fleet plans them, pod IPs from `--cidr`.
- **The same credential:** the testbed's admin kubeconfig for both, so the apiserver's priority and fairness treat
  them alike (system:masters, the exempt priority level). KWOK's client has no client-side rate limit.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from nodeagent.testbed.install import Progress, go_install_into_cache
from nodeagent.testbed.versions import cache_root

KWOK_MODULE = "sigs.k8s.io/kwok"
# `go list -m -versions sigs.k8s.io/kwok` on 2026-11-29: v0.6.1 v0.7.0 v0.8.0; the newest, which builds on Go 1.26.
KWOK_VERSION = "v0.8.0"
KWOK_PACKAGE = f"{KWOK_MODULE}/cmd/kwok"
# A kubelet's nodeLeaseDurationSeconds, what every fleet node and the testbed's agent use.
LEASE_DURATION_SECONDS = 40
# A kubelet's nodeStatusReportFrequency: how often the node's status is posted when nothing changed.
STATUS_REPORT_MS = 300_000
STAGE_API = "kwok.x-k8s.io/v1alpha1"
# The Ready condition's status as KWOK's selectors read it (a jq expression over the object).
_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def kwok_path() -> Path:
    return cache_root() / f"kwok-{KWOK_VERSION}" / "kwok"


def kwok_build_argv(go: str, version: str = KWOK_VERSION) -> list[str]:
    """Static and stripped; the version is already the module's own (pkg/consts.Version), nothing to stamp."""
    return [go, "install", "-trimpath", "-ldflags", "-s -w", f"{KWOK_PACKAGE}@{version}"]


def build_kwok(progress: Progress) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    return go_install_into_cache(progress, label=f"kwok {KWOK_VERSION}", argv=kwok_build_argv(go), binary=kwok_path())


def kwok_argv(
    binary: Path,
    *,
    kubeconfig: Path,
    config: Path,
    label_selector: str,
    pod_cidr: str,
    lease_seconds: int = LEASE_DURATION_SECONDS,
) -> list[str]:
    """KWOK's controller against an apiserver: stages from `config`, only the nodes `label_selector` selects. Its
    log at WARN, as quiet as the fleet's without -v: at INFO it writes a line for every lease renewal and patch."""
    return [
        str(binary),
        "-v=WARN",
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        f"--manage-nodes-with-label-selector={label_selector}",
        f"--node-lease-duration-seconds={lease_seconds}",
        f"--cidr={pod_cidr}",
    ]


def template_conditions(node: Mapping[str, Any]) -> list[dict[str, str]]:
    """The conditions a Ready node reports (type, status, reason, message), without their times."""
    conditions = (node.get("status") or {}).get("conditions") or []
    kept = [{key: str(c.get(key, "")) for key in ("type", "status", "reason", "message")} for c in conditions]
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in kept):
        raise ValueError(f"node {node.get('metadata', {}).get('name')!r} is not Ready: not a template")
    return kept


def _stage(name: str, kind: str, selector: list[dict[str, Any]], next_: dict[str, Any], delay_ms: int = 0) -> Any:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "next": next_,
    }
    if delay_ms:
        # KWOK waits between durationMilliseconds and jitterDurationMilliseconds.
        spec["delay"] = {"durationMilliseconds": delay_ms, "jitterDurationMilliseconds": delay_ms + 10_000}
    return {"apiVersion": STAGE_API, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _conditions_template(conditions: Sequence[Mapping[str, str]], *, transition: bool) -> str:
    """A status template's `conditions:`, heartbeat now; the transition time too when it is a change of state."""
    lines = ["conditions:"]
    for condition in conditions:
        lines.append(f"- type: {_quote(condition['type'])}")
        if transition:
            lines += [
                f"  status: {_quote(condition['status'])}",
                f"  reason: {_quote(condition['reason'])}",
                f"  message: {_quote(condition['message'])}",
                "  lastTransitionTime: {{ $now | Quote }}",
            ]
        lines.append("  lastHeartbeatTime: {{ $now | Quote }}")
    return "\n".join(lines)


def _quote(text: str) -> str:
    """A YAML string (JSON's is one) that the template engine leaves alone: `{{` would start an action."""
    if "{{" in text:
        raise ValueError(f"{text!r}: a condition's text with '{{{{' cannot go into a status template")
    return json.dumps(text)


# The status a fleet node gives a running pod of one container, as a template over the pod.
_POD_RUNNING = """{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
conditions:
{{ range list "PodReadyToStartContainers" "Initialized" "Ready" "ContainersReady" }}
- type: {{ . | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: {{ .image | Quote }}
  containerID: {{ printf "kwok://%s" (printf "%s/%s" $.metadata.uid .name | sha256sum) | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName (or .spec.hostNetwork false) (or .metadata.uid "") (or .metadata.name "") \
(or .metadata.namespace "") }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
""".replace("\\\n", "")


def stages(conditions: Sequence[Mapping[str, str]]) -> list[Any]:
    """The four stages KWOK runs with (the module docstring says why each)."""
    ready_in = {"key": _READY_STATUS, "operator": "In", "values": ["True"]}
    ready_not_in = {"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]}
    now = "{{ $now := Now }}\n"
    return [
        _stage(
            "node-ready",
            "Node",
            [ready_not_in],
            {"statusTemplate": now + _conditions_template(conditions, transition=True)},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [ready_in],
            {"statusTemplate": now + _conditions_template(conditions, transition=False)},
            delay_ms=STATUS_REPORT_MS,
        ),
        _stage(
            "pod-running",
            "Pod",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            ],
            {"statusTemplate": _POD_RUNNING},
        ),
        _stage("pod-delete", "Pod", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}], {"delete": True}),
    ]


def kwok_config(conditions: Sequence[Mapping[str, str]]) -> str:
    """KWOK's --config: the stages, one YAML document each (its options are on the command line)."""
    return yaml.safe_dump_all(stages(conditions), sort_keys=False, width=10_000)


# Taints that the control plane puts on a node for its state (not-ready, unreachable, pressure), not the node's own.
_STATE_TAINT_PREFIX = "node.kubernetes.io/"


def kwok_node(
    template: Mapping[str, Any], *, name: str, label: str, value: str, internal_ip: str, machine_id: str
) -> dict[str, Any]:
    """A Node for KWOK made from a fleet node's (`template`): the name, the `label`'s value (the fleet's prefix,
    KWOK's selector) and the addresses are this node's; the rest is the template's. No conditions: KWOK's node-ready
    stage writes them. Every label, annotation or taint value that was the template's name or `label` value is
    replaced by this node's."""
    meta = template["metadata"]
    old = {meta["name"]: name, meta["labels"][label]: value}

    def swap(text: str) -> str:
        return old.get(text, text)

    status = template.get("status") or {}
    node_info = dict(status.get("nodeInfo") or {})
    if node_info:
        node_info["machineID"] = machine_id
        node_info["systemUUID"] = str(uuid.UUID(machine_id))
        node_info["bootID"] = str(uuid.uuid5(uuid.NAMESPACE_OID, machine_id))
    taints = [
        {**t, "value": swap(t.get("value", ""))} if "value" in t else dict(t)
        for t in (template.get("spec") or {}).get("taints") or []
        if not t["key"].startswith(_STATE_TAINT_PREFIX)
    ]
    new_status: dict[str, Any] = {
        key: status[key] for key in ("capacity", "allocatable", "daemonEndpoints", "images") if key in status
    }
    new_status["nodeInfo"] = node_info
    new_status["addresses"] = [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {k: swap(v) for k, v in (meta.get("labels") or {}).items()},
            "annotations": {k: swap(v) for k, v in (meta.get("annotations") or {}).items()},
        },
        "spec": {"taints": taints} if taints else {},
        "status": new_status,
    }
