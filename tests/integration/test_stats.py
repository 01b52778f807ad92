"""The stats provider against the real containerd and cgroupfs: a sandbox with a busybox container that burns CPU and
holds 48 MiB, made through CRI directly (in the agent's cgroup layout), then the summary's numbers against what the
cgroup files say (within 10%), its JSON against upstream's Go types (k8s.io/kubelet's stats/v1alpha1, fetched with
`go mod download`), /stats/summary and /metrics/{resource,cadvisor} through the kubelet server on loopback, and the
Prometheus text parsed back with prometheus_client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent
from nodeagent.server.host import AgentHost
from nodeagent.server.http import HTTPServer
from nodeagent.server.server import KubeletServer
from nodeagent.stats.provider import StatsProvider
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.versions import CRI_API_VERSION
from tests.integration.crifixtures import container_config, sandbox_config

CGROUPS = Path("/sys/fs/cgroup")
HOLD_MIB = 48
NAMESPACE = "nodeagent-tests"
KUBELET_MODULE = "k8s.io/kubelet"
STATS_TYPES = "pkg/apis/stats/v1alpha1/types.go"


@dataclass
class Burner:
    uid: str
    sandbox_id: str
    container_id: str
    pod_cgroup: str
    log_root: Path


def cgroup_file(controller: str, cgroup: str, name: str) -> str:
    return (CGROUPS / controller / cgroup.strip("/") / name).read_text()


def cpu_ns(cgroup: str) -> int:
    return int(cgroup_file("cpuacct", cgroup, "cpuacct.usage"))


def working_set(cgroup: str) -> int:
    """What cAdvisor and containerd call the working set on cgroup v1: usage - total_inactive_file."""
    usage = int(cgroup_file("memory", cgroup, "memory.usage_in_bytes"))
    stat = dict(line.split() for line in cgroup_file("memory", cgroup, "memory.stat").splitlines())
    return usage - int(stat["total_inactive_file"])


def within(found: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(found - expected) <= tolerance * abs(expected)


def burner_sandbox(log_root: Path, cgroup_root: str) -> api_pb2.PodSandboxConfig:
    """A BestEffort pod as the agent lays it out: its cgroup under kubepods, its logs under <root>/<ns>_<name>_<uid>."""
    config = sandbox_config("stats-burner", log_root / "unused")
    uid = config.metadata.uid
    config.log_directory = str(log_root / f"{NAMESPACE}_stats-burner_{uid}")
    Path(config.log_directory).mkdir(parents=True)
    config.linux.cgroup_parent = pod_cgroup_parent(uid, QOSClass.BEST_EFFORT, cgroup_root)
    return config


@pytest_asyncio.fixture(loop_scope="session")
async def burner(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> AsyncIterator[Burner]:
    if (CGROUPS / "cgroup.controllers").exists():
        pytest.fail("these checks read cgroup v1 files; the testbed machines are v1 (hybrid)")
    runtime = cri_client.runtime
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    log_root = tmp_path / "pods"
    config = burner_sandbox(log_root, configs.agent_cgroup_root(settings))
    uid, pod_cgroup = config.metadata.uid, config.linux.cgroup_parent
    sandbox_id = await runtime.run_pod_sandbox(config)
    try:
        script = f"echo holding; dd if=/dev/zero of=/dev/shm/hold bs=1M count={HOLD_MIB}; while :; do :; done"
        container = container_config("burn", image, ["sh", "-c", script])
        container.labels.update(config.labels)
        container_id = await runtime.create_container(sandbox_id, container, config)
        await runtime.start_container(container_id)
        # let the burner fill its memory and run for a while, so the cumulative numbers are large
        await asyncio.sleep(3)
        yield Burner(uid, sandbox_id, container_id, pod_cgroup, log_root)
    finally:
        with contextlib.suppress(Exception):
            await runtime.stop_pod_sandbox(sandbox_id)
        with contextlib.suppress(Exception):
            await runtime.remove_pod_sandbox(sandbox_id)
        await asyncio.to_thread(remove_cgroup_tree, pod_cgroup)


def provider_for(cri_client: CRIClient, settings: Settings, burner: Burner, root_dir: Path) -> StatsProvider:
    root_dir.mkdir(exist_ok=True)
    return StatsProvider(
        cri_client.runtime,
        cri_client.image,
        node_name=settings.node_name,
        root_dir=str(root_dir),
        pod_log_dir_root=str(burner.log_root),
        cgroup_root=configs.agent_cgroup_root(settings),
    )


async def test_summary_matches_the_cgroups(
    cri_client: CRIClient, settings: Settings, burner: Burner, tmp_path: Path
) -> None:
    provider = provider_for(cri_client, settings, burner, tmp_path / "kubelet")
    container_cgroup = f"{burner.pod_cgroup}/{burner.container_id}"

    cpu_before = (cpu_ns(container_cgroup), cpu_ns(burner.pod_cgroup), time.monotonic())
    await provider.summary()
    await asyncio.sleep(3)
    summary = await provider.summary()
    cpu_after = (cpu_ns(container_cgroup), cpu_ns(burner.pod_cgroup), time.monotonic())
    node_cpu, node_ws = cpu_ns("/"), working_set("/")
    container_ws, pod_ws = working_set(container_cgroup), working_set(burner.pod_cgroup)

    [pod] = [p for p in summary.pods if p.pod_ref.uid == burner.uid]
    assert (pod.pod_ref.name, pod.pod_ref.namespace) == ("stats-burner", NAMESPACE)
    [burn] = pod.containers
    assert burn.name == "burn"
    assert burn.cpu is not None and burn.memory is not None and pod.cpu is not None and pod.memory is not None

    # cumulative CPU: the cgroup, read right after, is at most a few milliseconds ahead
    assert burn.cpu.usage_core_nano_seconds is not None and pod.cpu.usage_core_nano_seconds is not None
    assert burn.cpu.usage_core_nano_seconds <= cpu_after[0]
    assert within(burn.cpu.usage_core_nano_seconds, cpu_after[0])
    assert within(pod.cpu.usage_core_nano_seconds, cpu_after[1])
    # the rates, against the cgroups' own over the same ~3 s (containerd's for the container, ours for the pod)
    window = cpu_after[2] - cpu_before[2]
    container_rate = (cpu_after[0] - cpu_before[0]) / window
    pod_rate = (cpu_after[1] - cpu_before[1]) / window
    assert container_rate > 0.2e9, "the burner should get a good part of a core"
    assert burn.cpu.usage_nano_cores is not None and within(burn.cpu.usage_nano_cores, container_rate)
    assert pod.cpu.usage_nano_cores is not None and within(pod.cpu.usage_nano_cores, pod_rate)
    # memory: the 48 MiB it holds, as the cgroup counts it
    assert burn.memory.working_set_bytes is not None and pod.memory.working_set_bytes is not None
    assert burn.memory.working_set_bytes >= HOLD_MIB << 20
    assert within(burn.memory.working_set_bytes, container_ws)
    assert within(pod.memory.working_set_bytes, pod_ws)
    assert burn.memory.available_bytes is None  # no limit: left out, as upstream

    node = summary.node
    assert node.cpu is not None and node.memory is not None
    assert node.cpu.usage_core_nano_seconds is not None and within(node.cpu.usage_core_nano_seconds, node_cpu)
    assert node.cpu.usage_nano_cores is not None and node.cpu.usage_nano_cores >= container_rate * 0.9
    assert node.memory.working_set_bytes is not None and within(node.memory.working_set_bytes, node_ws)
    assert node.memory.available_bytes is not None and node.memory.available_bytes > 0
    pods_container = next(c for c in node.system_containers if c.name == "pods")
    assert pods_container.cpu is not None and pods_container.cpu.usage_core_nano_seconds is not None
    assert pods_container.cpu.usage_core_nano_seconds >= pod.cpu.usage_core_nano_seconds

    # the filesystems: the container's writable layer and its log file, the pod's ephemeral storage, imageFs
    assert burn.rootfs is not None and burn.rootfs.capacity_bytes and burn.rootfs.used_bytes is not None
    assert burn.logs is not None and burn.logs.used_bytes is not None and burn.logs.used_bytes > 0
    assert pod.ephemeral_storage is not None and pod.ephemeral_storage.used_bytes is not None
    assert pod.ephemeral_storage.used_bytes >= burn.rootfs.used_bytes + burn.logs.used_bytes
    assert node.runtime is not None and node.runtime.image_fs is not None
    assert node.runtime.image_fs.used_bytes and node.runtime.image_fs.capacity_bytes
    assert node.fs is not None and node.fs.capacity_bytes and node.rlimit is not None and node.rlimit.max_pid
    assert pod.network is not None and pod.network.default is not None and pod.network.default.name == "eth0"
    assert pod.process_stats is not None and pod.process_stats.process_count


# --- upstream's field names ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream_types(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """k8s.io/kubelet's stats types as struct → {json name: Go type}, inline fields merged in."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    work = tmp_path_factory.mktemp("kubelet-api-oracle")
    subprocess.run([go, "mod", "init", "nodeagent.local/kubelet-oracle"], cwd=work, check=True, capture_output=True)
    fetched = subprocess.run(
        [go, "mod", "download", "-json", f"{KUBELET_MODULE}@{CRI_API_VERSION}"],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if fetched.returncode != 0:
        pytest.fail(f"go mod download {KUBELET_MODULE} failed:\n{fetched.stdout}{fetched.stderr}")
    return parse_go_structs((Path(json.loads(fetched.stdout)["Dir"]) / STATS_TYPES).read_text())


def parse_go_structs(source: str) -> dict[str, dict[str, str]]:
    raw: dict[str, list[tuple[str, str]]] = {}
    for name, body in re.findall(r"^type (\w+) struct \{(.*?)^\}", source, re.MULTILINE | re.DOTALL):
        fields = []
        for line in body.splitlines():
            match = re.match(r'\s*(?:(\w+)\s+)?([\w.*\[\]]+)\s+`json:"([^"]*)"', line)
            if match:
                fields.append((match.group(3).split(",")[0], match.group(2)))
        raw[name] = fields

    def resolve(struct: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for json_name, go_type in raw[struct]:
            if json_name == "":  # ,inline: the embedded struct's fields
                out.update(resolve(go_type.lstrip("*")))
            else:
                out[json_name] = go_type
        return out

    return {name: resolve(name) for name in raw}


def check_against(value: Any, go_type: str, types: dict[str, dict[str, str]], where: str) -> None:
    """Every key is a json field of the Go struct there, and every value fits the field's Go type."""
    if go_type.startswith("[]"):
        assert value is None or isinstance(value, list), where
        for i, item in enumerate(value or []):
            check_against(item, go_type[2:], types, f"{where}[{i}]")
        return
    go_type = go_type.lstrip("*")
    if go_type == "metav1.Time":
        assert value is None or re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value), where
    elif go_type in ("uint64", "int64"):
        assert isinstance(value, int) and (go_type == "int64" or value >= 0), where
    elif go_type == "string":
        assert isinstance(value, str), where
    elif go_type == "float64":
        assert isinstance(value, int | float), where
    elif go_type == "bool":
        assert isinstance(value, bool), where
    else:
        assert go_type in types, f"{where}: unknown Go type {go_type}"
        assert isinstance(value, dict), where
        unknown = set(value) - set(types[go_type])
        assert not unknown, f"{where}: not fields of {go_type}: {unknown}"
        for key, item in value.items():
            check_against(item, types[go_type][key], types, f"{where}.{key}")


def test_go_struct_parser_reads_inline_fields() -> None:
    source = (
        'type A struct {\n\tB `json:",inline"`\n\tX *uint64 `json:"x,omitempty"`\n}\n'
        'type B struct {\n\tName string `json:"name"`\n}\n'
    )
    assert parse_go_structs(source) == {"A": {"name": "string", "x": "*uint64"}, "B": {"name": "string"}}


async def test_json_uses_upstreams_field_names_through_the_server(
    cri_client: CRIClient,
    settings: Settings,
    burner: Burner,
    tmp_path: Path,
    upstream_types: dict[str, dict[str, str]],
) -> None:
    provider = provider_for(cri_client, settings, burner, tmp_path / "kubelet")
    host = AgentHost(
        pods_fn=list,
        status_of=lambda uid: None,
        static_pods_of=lambda pod: [],
        list_runtime_pods=dict,
        runtime_pod=dict,
        config={},
        registries={},
        stats_summary=provider.summary,
        cadvisor_containers=provider.cadvisor_containers,
    )
    server = HTTPServer(KubeletServer(host, cri_client.runtime, node_name=settings.node_name).handle)
    port = await server.listen("127.0.0.1", 0)
    try:
        bodies = {}
        for path in (
            "/stats/summary",
            "/stats/summary?only_cpu_and_memory=true",
            "/metrics/resource",
            "/metrics/cadvisor",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = await reader.read()
            writer.close()
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), (path, head)
            bodies[path] = body.decode()
    finally:
        await server.close()

    for path in ("/stats/summary", "/stats/summary?only_cpu_and_memory=true"):
        summary = json.loads(bodies[path])
        check_against(summary, "Summary", upstream_types, "summary")
        [pod] = [p for p in summary["pods"] if p["podRef"]["uid"] == burner.uid]
        assert pod["containers"][0]["name"] == "burn"
        assert summary["node"]["nodeName"] == settings.node_name
    full = json.loads(bodies["/stats/summary"])
    assert {"fs", "runtime", "rlimit", "network"} <= set(full["node"])
    assert {"imageFs", "containerFs"} == set(full["node"]["runtime"])

    container_labels = {"container": "burn", "pod": "stats-burner", "namespace": NAMESPACE}
    resource = {f.name: f for f in text_string_to_metric_families(bodies["/metrics/resource"])}
    [burn_cpu] = [s for s in resource["container_cpu_usage_seconds"].samples if s.labels == container_labels]
    cgroup_seconds = cpu_ns(f"{burner.pod_cgroup}/{burner.container_id}") / 1e9
    assert burn_cpu.timestamp is not None and within(burn_cpu.value, cgroup_seconds)
    for name in (
        "node_cpu_usage_seconds",
        "node_memory_working_set_bytes",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
        "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes",
    ):
        assert resource[name].samples, name
    assert resource["resource_scrape_error"].samples[0].value == 0

    cadvisor = {f.name: f for f in text_string_to_metric_families(bodies["/metrics/cadvisor"])}
    ids = {s.labels["id"]: s for s in cadvisor["container_cpu_usage_seconds"].samples}
    container_id_label = f"{burner.pod_cgroup}/{burner.container_id}"
    assert {"/", burner.pod_cgroup, container_id_label} <= set(ids)
    burn_row = ids[container_id_label]
    assert burn_row.labels["container"] == "burn" and burn_row.labels["cpu"] == "total"
    assert burn_row.labels["name"] == burner.container_id and "busybox" in burn_row.labels["image"]
    pause_rx = [
        s
        for s in cadvisor["container_network_receive_bytes"].samples
        if s.labels["id"] == f"{burner.pod_cgroup}/{burner.sandbox_id}"
    ]
    assert [s.labels["interface"] for s in pause_rx] == ["eth0"]
    assert cadvisor["container_scrape_error"].samples[0].value == 0
