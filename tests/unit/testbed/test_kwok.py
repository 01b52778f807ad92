"""testbed/kwok.py: KWOK's build step, its command line, its stages and the Node it is given (made from a fleet
node's), everything that can be checked without KWOK itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent import cli
from nodeagent.testbed import install, kwok

READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
MEMORY = {
    "type": "MemoryPressure",
    "status": "False",
    "reason": "KubeletHasSufficientMemory",
    "message": "kubelet has sufficient memory available",
}


def fleet_node() -> dict[str, Any]:
    """A Node as a fleet node registers it (the fields that matter here), Ready, with the not-ready taint the
    node-lifecycle controller may still have left on it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "bench-ab12c-0",
            "uid": "6f0c",
            "resourceVersion": "77",
            "labels": {
                "kubernetes.io/hostname": "bench-ab12c-0",
                "kubernetes.io/os": "linux",
                "node.nodeagent.io/fleet": "bench-ab12c",
            },
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {
            "taints": [
                {"key": "node.nodeagent.io/fleet", "value": "bench-ab12c", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-11-29T23:00:00Z"},
            ]
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "30"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "30"},
            "conditions": [
                {**READY, "lastHeartbeatTime": "2026-11-29T23:00:00Z", "lastTransitionTime": "2026-11-29T23:00:00Z"},
                {**MEMORY, "lastHeartbeatTime": "2026-11-29T23:00:00Z", "lastTransitionTime": "2026-11-29T23:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": "198.19.128.1"}, {"type": "Hostname", "address": "x"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "aa",
                "systemUUID": "bb",
                "bootID": "cc",
                "kubeletVersion": "v1.34.4",
                "containerRuntimeVersion": "fakeRuntime://0.1.0",
            },
            "images": [{"names": ["registry.invalid/hollow:1"], "sizeBytes": 1}],
        },
    }


def test_install_builds_kwok_only_when_asked_last() -> None:
    assert "build_kwok" not in [step.__name__ for step in install.install_steps()]
    names = [step.__name__ for step in install.install_steps(with_kwok=True, with_certified=True)]
    assert names[-1] == "build_kwok" and names.count("build_kwok") == 1


async def test_with_kwok_reaches_the_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(install, "install", lambda **kwargs: calls.append(kwargs))
    args = cli.build_parser().parse_args(["testbed", "install", "--with-kwok"])
    assert await cli._testbed(args) == 0
    assert calls == [
        {"with_kubelet": False, "with_csi": False, "with_kubeadm": False, "with_certified": False, "with_kwok": True}
    ]


def test_kwok_is_go_installed_from_its_module_into_the_versioned_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", "/c")
    assert kwok.kwok_path() == Path(f"/c/kwok-{kwok.KWOK_VERSION}/kwok")
    assert kwok.kwok_build_argv("go") == [
        "go",
        "install",
        "-trimpath",
        "-ldflags",
        "-s -w",
        "sigs.k8s.io/kwok/cmd/kwok@v0.8.0",
    ]


def test_a_cached_kwok_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    binary = tmp_path / f"kwok-{kwok.KWOK_VERSION}" / "kwok"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF kwok")
    monkeypatch.setattr(kwok, "kwok_path", lambda: binary)

    def no_build(*args: object, **kwargs: object) -> str:
        raise AssertionError("go install ran with the binary cached")

    monkeypatch.setattr(install, "_run", no_build)
    lines: list[str] = []
    assert kwok.build_kwok(install.Progress(write=lines.append)) == binary
    assert lines == ["[nodeagent install] kwok v0.8.0: cached"]


def test_a_go_install_that_leaves_no_binary_fails_and_caches_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = tmp_path / "kwok-v0.8.0" / "kwok"
    ran: list[dict[str, Any]] = []

    def go_install(argv: list[str], **kwargs: object) -> str:
        ran.append({"argv": argv, **kwargs})
        return ""

    monkeypatch.setattr(install, "_run", go_install)
    with pytest.raises(install.InstallError, match="left no kwok"):
        install.go_install_into_cache(install.Progress(write=lambda _: None), label="kwok", argv=["go"], binary=binary)
    assert not binary.exists()
    assert ran[0]["env"]["GOBIN"] == str(tmp_path / "kwok-v0.8.0.build")
    assert ran[0]["env"]["GOFLAGS"] == "-buildvcs=false"


def test_a_go_install_moves_the_command_into_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    binary = tmp_path / "kwok-v0.8.0" / "kwok"

    def go_install(argv: list[str], *, env: dict[str, str], **kwargs: object) -> str:
        (Path(env["GOBIN"]) / "kwok").write_bytes(b"built")
        return ""

    monkeypatch.setattr(install, "_run", go_install)
    lines: list[str] = []
    assert install.go_install_into_cache(install.Progress(lines.append), label="kwok", argv=["go"], binary=binary)
    assert binary.read_bytes() == b"built"
    assert not (tmp_path / "kwok-v0.8.0.build").exists()
    assert lines[-1].startswith("[nodeagent install] kwok: built in ")


def test_argv_runs_the_controller_on_its_own_nodes_with_a_40s_lease() -> None:
    argv = kwok.kwok_argv(
        Path("/c/kwok"),
        kubeconfig=Path("/tb/admin.kubeconfig"),
        config=Path("/w/kwok.yaml"),
        label_selector="node.nodeagent.io/fleet=kwok-1",
        pod_cidr="198.18.128.0/17",
    )
    assert argv == [
        "/c/kwok",
        "-v=WARN",
        "--kubeconfig=/tb/admin.kubeconfig",
        "--config=/w/kwok.yaml",
        "--manage-nodes-with-label-selector=node.nodeagent.io/fleet=kwok-1",
        "--node-lease-duration-seconds=40",
        "--cidr=198.18.128.0/17",
    ]


def test_template_conditions_are_the_nodes_own_without_times() -> None:
    assert kwok.template_conditions(fleet_node()) == [READY, MEMORY]


def test_a_node_that_is_not_ready_is_no_template() -> None:
    node = fleet_node()
    node["status"]["conditions"][0]["status"] = "Unknown"
    with pytest.raises(ValueError, match="not Ready"):
        kwok.template_conditions(node)


def by_name(config: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all(config))
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and d["kind"] == "Stage" for d in docs)
    return {d["metadata"]["name"]: d["spec"] for d in docs}


def test_config_holds_the_four_stages() -> None:
    stages = by_name(kwok.kwok_config([READY, MEMORY]))
    assert list(stages) == ["node-ready", "node-heartbeat", "pod-running", "pod-delete"]
    assert {name: spec["resourceRef"]["kind"] for name, spec in stages.items()} == {
        "node-ready": "Node",
        "node-heartbeat": "Node",
        "pod-running": "Pod",
        "pod-delete": "Pod",
    }
    assert stages["pod-delete"]["next"] == {"delete": True}
    assert stages["pod-delete"]["selector"]["matchExpressions"] == [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
    ]
    # Running only once scheduled (KWOK sees only pods on its nodes) and not being deleted.
    assert stages["pod-running"]["selector"]["matchExpressions"] == [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
    ]
    assert "delay" not in stages["pod-running"] and "delay" not in stages["node-ready"]


def test_node_ready_writes_the_template_conditions_with_fresh_times() -> None:
    spec = by_name(kwok.kwok_config([READY, MEMORY]))["node-ready"]
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    assert spec["selector"]["matchExpressions"] == [{"key": ready, "operator": "NotIn", "values": ["True"]}]
    template = spec["next"]["statusTemplate"]
    assert template.startswith("{{ $now := Now }}\n")
    # With the actions replaced by a time, the template is the conditions' YAML.
    rendered = yaml.safe_load(template.removeprefix("{{ $now := Now }}\n").replace("{{ $now | Quote }}", '"T"'))
    assert rendered == {
        "conditions": [{**c, "lastTransitionTime": "T", "lastHeartbeatTime": "T"} for c in (READY, MEMORY)]
    }


def test_node_heartbeat_refreshes_only_the_heartbeat_every_five_minutes() -> None:
    spec = by_name(kwok.kwok_config([READY, MEMORY]))["node-heartbeat"]
    assert spec["selector"]["matchExpressions"][0]["operator"] == "In"
    assert spec["delay"] == {"durationMilliseconds": 300_000, "jitterDurationMilliseconds": 310_000}
    body = spec["next"]["statusTemplate"].removeprefix("{{ $now := Now }}\n").replace("{{ $now | Quote }}", '"T"')
    assert yaml.safe_load(body) == {
        "conditions": [
            {"type": "Ready", "lastHeartbeatTime": "T"},
            {"type": "MemoryPressure", "lastHeartbeatTime": "T"},
        ]
    }


def test_condition_text_that_would_be_a_template_action_is_refused() -> None:
    with pytest.raises(ValueError, match="status template"):
        kwok.kwok_config([{**READY, "message": "ready {{ now }}"}])


def test_pod_running_reports_what_a_fleet_node_reports() -> None:
    template = by_name(kwok.kwok_config([READY]))["pod-running"]["next"]["statusTemplate"]
    conditions = '"PodReadyToStartContainers" "Initialized" "Ready" "ContainersReady"'
    fields = ("phase: Running", "startTime:", "containerStatuses:", "containerID:", "started: true", "hostIP:")
    for field in (*fields, "podIP:", "podIPs:", conditions):
        assert field in template, field
    # Every {{ has its }}: a stray one would make KWOK refuse the stage.
    assert template.count("{{") == template.count("}}")


def test_kwok_node_is_the_fleet_nodes_but_for_name_label_and_addresses() -> None:
    node = kwok.kwok_node(
        fleet_node(),
        name="kwok-9f-3",
        label="node.nodeagent.io/fleet",
        value="kwok-9f",
        internal_ip="198.19.128.4",
        machine_id="0123456789abcdef0123456789abcdef",
    )
    assert node["metadata"] == {
        "name": "kwok-9f-3",
        "labels": {
            "kubernetes.io/hostname": "kwok-9f-3",
            "kubernetes.io/os": "linux",
            "node.nodeagent.io/fleet": "kwok-9f",
        },
        "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
    }
    # The fleet's own taint for KWOK's prefix; the control plane's state taint is not the template's to copy.
    assert node["spec"] == {"taints": [{"key": "node.nodeagent.io/fleet", "value": "kwok-9f", "effect": "NoSchedule"}]}
    status = node["status"]
    assert "conditions" not in status
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "198.19.128.4"},
        {"type": "Hostname", "address": "kwok-9f-3"},
    ]
    template = fleet_node()["status"]
    for key in ("capacity", "allocatable", "daemonEndpoints", "images"):
        assert status[key] == template[key], key
    assert status["nodeInfo"] == {
        **template["nodeInfo"],
        "machineID": "0123456789abcdef0123456789abcdef",
        "systemUUID": "01234567-89ab-cdef-0123-456789abcdef",
        "bootID": status["nodeInfo"]["bootID"],
    }
    assert status["nodeInfo"]["bootID"] != template["nodeInfo"]["bootID"]
