"""Pod bodies for a scenario's pods: a busybox shell running the workload, bound to the experiment's node.

- sleeper: sleeps;
- memory-hog: writes `rate` bytes a second into a memory-backed emptyDir (tmpfs pages are charged to the pod's
  memory cgroup and are not reclaimable file cache, so they count in its working set) up to `max`, then holds them;
- disk-filler: the same into an emptyDir on the node's disk (ephemeral storage);
- process-spawner: starts `rate` sleeping processes a second up to `max`, then waits.

Pods are bound to the node (`nodeName`): the scheduler would keep them off a node tainted by pressure, and the
point of a late pod is to meet the node's admission. The QoS class follows from requests and limits as for any pod;
a priority becomes a PriorityClass the runner makes (`priority_class_name`) and deletes at the end.
"""

from __future__ import annotations

from typing import Any

from nodeagent.experiment.scenario import PodPlan, Workload, WorkloadType

KI = 1024
LABEL = "nodeagent.io/eviction-experiment"
VOLUME = "work"
MOUNT = "/work"
# A workload writes its progress here (bytes written or processes started), for the pod's logs.
SLEEP_FOREVER = "exec sleep 1000000"


def priority_class_name(run_id: str, value: int) -> str:
    return f"eviction-experiment-{run_id}-{'m' if value < 0 else 'p'}{abs(value)}"


def priority_class(run_id: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(run_id, value), "labels": {LABEL: run_id}},
        "value": value,
        "preemptionPolicy": "Never",  # the experiment watches the kubelet's choice, not the scheduler's
        "description": "made by nodeagent experiment eviction for one run; deleted at its end",
    }


def _writer(workload: Workload) -> str:
    """Write rate bytes a second (in KiB blocks, one file a second) until max, then hold."""
    per_second = workload.rate // KI
    seconds = -(-workload.max // workload.rate)  # ceiling
    return (
        f"i=0; while [ $i -lt {seconds} ]; do "
        f"dd if=/dev/zero of={MOUNT}/chunk-$i bs={KI} count={per_second} 2>/dev/null || break; "
        f'i=$((i+1)); echo "written $((i*{per_second}))KiB"; sleep 1; done; {SLEEP_FOREVER}'
    )


def _spawner(workload: Workload) -> str:
    return (
        f"n=0; while [ $n -lt {workload.max} ]; do j=0; "
        f"while [ $j -lt {workload.rate} ] && [ $n -lt {workload.max} ]; do "
        f"sleep 1000000 & j=$((j+1)); n=$((n+1)); done; "
        f'echo "started $n"; sleep 1; done; wait'
    )


def script(workload: Workload) -> str:
    if workload.type in (WorkloadType.MEMORY_HOG, WorkloadType.DISK_FILLER):
        return _writer(workload)
    if workload.type == WorkloadType.PROCESS_SPAWNER:
        return _spawner(workload)
    return SLEEP_FOREVER


def pod_body(plan: PodPlan, *, namespace: str, node_name: str, image: str, run_id: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script(plan.workload)],
    }
    resources: dict[str, Any] = {}
    if plan.requests:
        resources["requests"] = dict(plan.requests)
    if plan.limits:
        resources["limits"] = dict(plan.limits)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "restartPolicy": "Never",  # a workload that fails shows as Failed, not as a restart loop
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if plan.workload.type in (WorkloadType.MEMORY_HOG, WorkloadType.DISK_FILLER):
        empty_dir = {"medium": "Memory"} if plan.workload.type == WorkloadType.MEMORY_HOG else {}
        spec["volumes"] = [{"name": VOLUME, "emptyDir": empty_dir}]
        container["volumeMounts"] = [{"name": VOLUME, "mountPath": MOUNT}]
    if plan.priority is not None:
        spec["priorityClassName"] = priority_class_name(run_id, plan.priority)
    elif plan.priority_class_name is not None:
        spec["priorityClassName"] = plan.priority_class_name
    if plan.termination_grace_period_seconds is not None:
        spec["terminationGracePeriodSeconds"] = plan.termination_grace_period_seconds
    if plan.tolerations:
        spec["tolerations"] = [dict(t) for t in plan.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": plan.name,
            "namespace": namespace,
            "labels": {LABEL: run_id, f"{LABEL}-workload": str(plan.workload.type)},
        },
        "spec": spec,
    }


__all__ = ["LABEL", "pod_body", "priority_class", "priority_class_name", "script"]
