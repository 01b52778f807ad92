"""What a node holds against what the API says it should run: every container and sandbox containerd lists (in
any state), the veths on the testbed bridge and the CNI plugin's IPAM files (the checks of
tests/integration/test_crash_leftovers.py, for the soak, which runs many pods and several restarts).

`problems` returns every difference from a clean node running exactly the given pods, empty when clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.testbed import Testbed

UID_LABEL = "io.kubernetes.pod.uid"
STATE_NAMES = {v: k for k, v in api_pb2.ContainerState.items()}
SANDBOX_STATE_NAMES = {v: k for k, v in api_pb2.PodSandboxState.items()}
_STUCK = re.compile(r"(?:containerd keeps its task id|sandbox kept for an unremovable container sandbox)=([0-9a-f]+)")


def veths(bridge: str) -> list[str]:
    if not Path("/sys/class/net", bridge).exists():
        return []  # the plugin makes the bridge at its first ADD
    out = subprocess.run(
        ["ip", "-o", "link", "show", "master", bridge], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(":", 2)[1].strip().split("@", 1)[0] for line in out.splitlines() if line.strip()]


def ipam_addresses(bed: Testbed) -> dict[str, str]:
    """Address → owning sandbox ID, from the plugin's files (cni/ipam.py: one file per address)."""
    directory = bed.layout.cni_data_dir / f"nodeagent-{bed.settings.bridge}"
    found: dict[str, str] = {}
    for name in os.listdir(directory) if directory.exists() else []:
        with contextlib.suppress(ValueError, FileNotFoundError):  # FileNotFoundError: released meanwhile
            ipaddress.IPv4Address(name)
            found[name] = next(iter((directory / name).read_text().splitlines()), "").strip()
    return found


def containerd_stuck(bed: Testbed) -> set[str]:
    """ID prefixes the agent logged as containerd's to keep (a task no call deletes; see test_crash_leftovers)."""
    found: set[str] = set()
    for log_file in bed.layout.logs.glob("*agent*.log"):
        found.update(_STUCK.findall(log_file.read_text(errors="replace")))
    return found


async def live_pods(admin: KubeClient, namespace: str, selector: str) -> dict[str, dict[str, Any]]:
    """uid → pod, for the pods of `selector` not being deleted."""
    listed = await admin.list(paths.pods(namespace), label_selector=selector)
    return {p["metadata"]["uid"]: p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")}


async def problems(cri: CRIClient, admin: KubeClient, bed: Testbed, namespace: str, selector: str) -> list[str]:
    """Every difference from a clean node running exactly the live pods of `selector` (and nothing else), each
    Running with restartCount 0 (1 for a pod whose first instance containerd keeps)."""
    out: list[str] = []
    listed = (await admin.list(paths.pods(namespace), label_selector=selector))["items"]
    dying = [p["metadata"]["name"] for p in listed if p["metadata"].get("deletionTimestamp")]
    if dying:
        out.append(f"{len(dying)} pods still being deleted: {sorted(dying)[:5]}")
    pods = {p["metadata"]["uid"]: p for p in listed if not p["metadata"].get("deletionTimestamp")}
    uids = set(pods)
    stuck = await asyncio.to_thread(containerd_stuck, bed)
    stuck_pods: set[str] = set()
    containers = []
    for c in await cri.runtime.list_containers():  # no filter: every state
        if c.id[:12] in stuck:
            stuck_pods.add(c.labels.get(UID_LABEL, ""))
            continue
        containers.append(c)
    sandboxes = [s for s in await cri.runtime.list_pod_sandbox() if s.id[:12] not in stuck]
    out += [
        f"container {c.id[:12]} ({c.metadata.name}) is {STATE_NAMES[c.state]}"
        for c in containers
        if c.state != api_pb2.CONTAINER_RUNNING
    ]
    out += [
        f"sandbox {s.id[:12]} ({s.metadata.name} attempt {s.metadata.attempt}) is NOTREADY"
        for s in sandboxes
        if s.state != api_pb2.SANDBOX_READY
    ]
    ready_ips: dict[str, str] = {}
    for uid, pod in pods.items():
        name = pod["metadata"]["name"]
        mine = [c for c in containers if c.labels.get(UID_LABEL) == uid]
        boxes = [s for s in sandboxes if s.labels.get(UID_LABEL) == uid]
        if len(mine) != 1:
            out.append(f"pod {name}: {len(mine)} containers {[STATE_NAMES[c.state] for c in mine]}")
        if len(boxes) != 1:
            out.append(f"pod {name}: {len(boxes)} sandboxes {[SANDBOX_STATE_NAMES[s.state] for s in boxes]}")
        st = pod.get("status") or {}
        if st.get("phase") != "Running":
            out.append(f"pod {name} is {st.get('phase')}")
        for cs in st.get("containerStatuses") or []:
            # A successor of an unremovable instance takes the next attempt's name, so its count is 1 (as upstream).
            if cs.get("restartCount") != (1 if uid in stuck_pods else 0):
                out.append(f"pod {name} container {cs['name']} restartCount {cs.get('restartCount')}")
            if "running" not in (cs.get("state") or {}) or not cs.get("ready"):
                out.append(f"pod {name} container {cs['name']} not running and ready")
        ready = [s for s in boxes if s.state == api_pb2.SANDBOX_READY]
        if ready and st.get("podIP"):
            ready_ips[st["podIP"]] = ready[0].id
    strangers = {s.labels.get(UID_LABEL) for s in sandboxes} | {c.labels.get(UID_LABEL) for c in containers}
    if strangers - uids:
        out.append(f"runtime objects of {len(strangers - uids)} pods not live in the API")
    links = await asyncio.to_thread(veths, bed.settings.bridge)
    if len(links) != len(uids):
        out.append(f"{len(links)} veths on {bed.settings.bridge} for {len(uids)} pods")
    addresses = await asyncio.to_thread(ipam_addresses, bed)
    if addresses != ready_ips:
        extra = sorted(set(addresses) - set(ready_ips))
        missing = sorted(set(ready_ips) - set(addresses))
        out.append(
            f"IPAM holds {len(addresses)} addresses for {len(ready_ips)} pods (extra {extra}, missing {missing})"
        )
    return out


async def runtime_records(cri: CRIClient, bed: Testbed) -> int:
    """How many pod containers and sandboxes containerd lists, but for those it keeps for good."""
    stuck = await asyncio.to_thread(containerd_stuck, bed)
    containers = [c for c in await cri.runtime.list_containers() if c.id[:12] not in stuck]
    sandboxes = [s for s in await cri.runtime.list_pod_sandbox() if s.id[:12] not in stuck]
    return len(containers) + len(sandboxes)
