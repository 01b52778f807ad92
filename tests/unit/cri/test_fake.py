"""The fake runtime alone: the contract scenario's outcomes (compared with containerd's in
tests/integration/test_fake_cri_contract.py) and the configurable behaviour (exits, OOM, latency, usage)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cri.errors import NotFoundError
from cri.fake import Behaviour, FakeCRI
from cri.fake import behaviour as behaviours
from cri.v1 import api_pb2
from tests.cricontract import container_config, run_events_scenario, run_scenario, sandbox_config

IMAGE = "registry.test/busybox:1.35"


@pytest.fixture
def logs(tmp_path: Path) -> str:
    """The pods' log directory (the request builders make it; the fake writes nothing there)."""
    return str(tmp_path / "logs")


async def test_contract_outcomes(logs: str) -> None:
    fake = FakeCRI("n1")
    transcript = dict(
        (entry[0], entry[1:])
        for entry in await run_scenario(fake.runtime, fake.image, IMAGE, logs, missing_image="registry.test/absent:1")
    )
    expected = {
        "pull_missing": ("NotFoundError",),
        "create_in_unknown_sandbox": ("NotFoundError",),
        "start_twice": ("UnknownCRIError",),
        "stop_again": ("ok",),
        "start_exited": ("UnknownCRIError",),
        "remove_exited": ("ok",),
        "remove_again": ("ok",),
        "status_removed": ("NotFoundError",),
        "stop_unknown": ("ok",),
        "remove_running": ("ok",),
        "remove_sandbox_unknown": ("ok",),
        "sandbox_status_unknown": ("NotFoundError",),
        "stop_sandbox_unknown": ("ok",),
        "sandbox_stopped": ("SANDBOX_NOTREADY",),
        "create_in_stopped_sandbox": ("NotFoundError",),
        "containers_after_sandbox_removed": (0,),
        "list_containers_exited": (["fail", "short"],),
        "list_sandbox_id_prefix": ([True],),
    }
    assert {key: transcript[key] for key in expected} == expected
    assert transcript["exited_1"][0]["reason"] == "Error"
    assert transcript["stopped_kill"][0]["exit_code"] == 137
    assert not fake.runtime.sandboxes and not fake.runtime.containers


async def test_version_names_the_runtime_as_kubemarks_fake_does() -> None:
    # The name types the emulated pods' containerIDs (`fakeRuntime://<id>`), never containerd's.
    version = await FakeCRI("n1").runtime.version("v1")
    assert (version.runtime_name, version.runtime_version, version.runtime_api_version) == (
        "fakeRuntime",
        "0.1.0",
        "v1",
    )


async def test_events_shapes(logs: str) -> None:
    fake = FakeCRI("n1")
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    shapes = await run_events_scenario(fake.runtime, IMAGE, logs)
    assert shapes == [
        ("CONTAINER_CREATED_EVENT", True, True, 0),
        ("CONTAINER_STARTED_EVENT", True, True, 0),
        ("CONTAINER_CREATED_EVENT", False, True, 1),
        ("CONTAINER_STARTED_EVENT", False, True, 1),
        ("CONTAINER_STOPPED_EVENT", False, True, 1),
        ("CONTAINER_DELETED_EVENT", False, True, 0),
        ("CONTAINER_STOPPED_EVENT", True, True, 0),
        ("CONTAINER_DELETED_EVENT", True, False, 0),
    ]


async def _started(fake: FakeCRI, logs: str, annotations: dict[str, str], command: list[str]) -> str:
    config = sandbox_config("p", logs)
    config.annotations.update(annotations)
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    sandbox = await fake.runtime.run_pod_sandbox(config)
    cid = await fake.runtime.create_container(sandbox, container_config("c", IMAGE, command), config)
    await fake.runtime.start_container(cid)
    return cid


@pytest.mark.parametrize(
    ("annotations", "command", "exit_code", "reason"),
    [
        ({behaviours.EXIT_AFTER: "0.01", behaviours.EXIT_CODE: "3"}, ["server"], 3, "Error"),
        ({behaviours.EXIT_AFTER: "0.01"}, ["server"], 0, "Completed"),
        ({behaviours.OOM_AFTER: "0.01"}, ["server"], 137, "OOMKilled"),
        ({}, ["sh", "-c", "exit 7"], 7, "Error"),
        ({}, ["sleep", "0.01"], 0, "Completed"),
    ],
)
async def test_container_fates(
    annotations: dict[str, str], command: list[str], exit_code: int, reason: str, logs: str
) -> None:
    fake = FakeCRI("n1")
    cid = await _started(fake, logs, annotations, command)
    assert (await fake.runtime.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING
    await asyncio.sleep(0.05)
    status = (await fake.runtime.container_status(cid)).status
    assert (api_pb2.ContainerState.Name(status.state), status.exit_code, status.reason) == (
        "CONTAINER_EXITED",
        exit_code,
        reason,
    )


async def test_server_runs_until_stopped_and_timers_cancel_on_close(logs: str) -> None:
    fake = FakeCRI("n1", behaviour=Behaviour(exit_after=0.01))
    cid = await _started(fake, logs, {}, ["server"])
    await fake.close()
    await asyncio.sleep(0.03)
    assert (await fake.runtime.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING


async def test_latencies(logs: str) -> None:
    fake = FakeCRI("n1", behaviour=Behaviour(pull_latency=0.05, start_latency=0.05))
    loop = asyncio.get_running_loop()
    began = loop.time()
    await _started(fake, logs, {}, ["server"])
    assert loop.time() - began >= 0.1


async def test_usage_figures(logs: str) -> None:
    clock = [1_000_000_000]
    fake = FakeCRI("n1", now_ns=lambda: clock[0])
    cid = await _started(fake, logs, {behaviours.CPU_MILLICORES: "250", behaviours.MEMORY_BYTES: "1048576"}, ["server"])
    clock[0] += 2_000_000_000
    stats = await fake.runtime.container_stats(cid)
    assert stats.cpu.usage_nano_cores.value == 250_000_000
    assert stats.cpu.usage_core_nano_seconds.value == 500_000_000  # 2 s at a quarter core
    assert stats.memory.working_set_bytes.value == 1 << 20
    (pod,) = await fake.runtime.list_pod_sandbox_stats()
    assert pod.linux.memory.working_set_bytes.value == 1 << 20
    assert [c.attributes.id for c in pod.linux.containers] == [cid]


async def test_addresses_are_unique_and_reused_and_host_network_has_none(logs: str) -> None:
    fake = FakeCRI("n1", pod_network="198.18.0.0/30")
    first = await fake.runtime.run_pod_sandbox(sandbox_config("a", logs))
    second = await fake.runtime.run_pod_sandbox(sandbox_config("b", logs))
    ips = [(await fake.runtime.pod_sandbox_status(s)).status.network.ip for s in (first, second)]
    assert ips == ["198.18.0.1", "198.18.0.2"]
    with pytest.raises(Exception, match="no address left"):
        await fake.runtime.run_pod_sandbox(sandbox_config("c", logs))
    await fake.runtime.stop_pod_sandbox(first)
    third = await fake.runtime.run_pod_sandbox(sandbox_config("d", logs))
    assert (await fake.runtime.pod_sandbox_status(third)).status.network.ip == "198.18.0.1"
    host = sandbox_config("h", logs)
    host.linux.security_context.namespace_options.network = api_pb2.NODE
    hosted = await fake.runtime.run_pod_sandbox(host)
    assert (await fake.runtime.pod_sandbox_status(hosted)).status.network.ip == ""


async def test_ids_differ_between_fakes_and_create_needs_the_image(logs: str) -> None:
    one, two = FakeCRI("n1"), FakeCRI("n2")
    config = sandbox_config("a", logs)
    assert await one.runtime.run_pod_sandbox(config) != await two.runtime.run_pod_sandbox(config)
    # Nor between two lives of one node's fake (a fleet started again after a crash): the API would see the old
    # containers' ids come back.
    again = FakeCRI("n1")
    assert await again.runtime.run_pod_sandbox(config) != (await one.runtime.list_pod_sandbox())[0].id
    sandbox = await one.runtime.run_pod_sandbox(config)
    with pytest.raises(NotFoundError):
        await one.runtime.create_container(sandbox, container_config("c", IMAGE, ["x"]), config)


async def test_list_views_are_fresh_messages_that_follow_the_state(logs: str) -> None:
    # The fake keeps each record's list view and hands out copies: a caller editing its answer changes nothing
    # kept, and a state change shows in the next list.
    fake = FakeCRI("n1")
    cid = await _started(fake, logs, {}, ["server"])
    (listed,) = await fake.runtime.list_containers()
    (sandbox,) = await fake.runtime.list_pod_sandbox()
    assert listed.state == api_pb2.CONTAINER_RUNNING
    listed.labels["edited"] = "yes"
    listed.state = api_pb2.CONTAINER_UNKNOWN
    sandbox.labels["edited"] = "yes"
    (again,) = await fake.runtime.list_containers()
    (sandbox_again,) = await fake.runtime.list_pod_sandbox()
    assert again.state == api_pb2.CONTAINER_RUNNING and "edited" not in again.labels
    assert "edited" not in sandbox_again.labels and sandbox_again.state == api_pb2.SANDBOX_READY
    await fake.runtime.stop_container(cid, 0)
    (stopped,) = await fake.runtime.list_containers()
    assert stopped.state == api_pb2.CONTAINER_EXITED
    await fake.runtime.stop_pod_sandbox(sandbox.id)
    (sandbox_stopped,) = await fake.runtime.list_pod_sandbox()
    assert sandbox_stopped.state == api_pb2.SANDBOX_NOTREADY
