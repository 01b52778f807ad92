"""Table-driven tests of the corpus's pure parts: scenario checks, normalisation, waits and the comparison."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.compare import COALESCED, LOST, Recording, compare, distinct, render
from tests.differential.devices import device_names
from tests.differential.normalise import Context, event_line, pod_state, scrub
from tests.differential.scenario import KnownDifference, ScenarioError, load_all, parse
from tests.differential.waits import satisfied

UID = "0d4c5c1e-1111-2222-3333-444455556666"
CTX = Context(namespace="d-na-x-abcde", uids={"p": UID}, node="node1")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("pod p_d-na-x-abcde(" + UID + ")", "pod p_<ns>(<uid:p>)"),
        ("containerd://" + "a" * 64, "<cid>"),
        ("pulled in 1.234s (1.3s including waiting)", "pulled in <dur> (<dur> including waiting)"),
        ("back-off 10s restarting", "back-off 10s restarting"),
        ("Get http://198.18.0.5:80/nope: 404", "Get http://<ip>:80/nope: 404"),
        ("on node1", "on <node>"),
        ('volume "kube-api-access-x7k2q" mounted', 'volume "kube-api-access-<rand>" mounted'),
    ],
)
def test_scrub(text: str, want: str) -> None:
    assert scrub(text, CTX) == want


def test_pod_state_flattens_by_name_and_hides_what_differs() -> None:
    pod: dict[str, Any] = {
        "metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"},
        "status": {
            "phase": "Running",
            "podIP": "198.18.0.4",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "containerID": "containerd://" + "b" * 64,
                    "restartCount": 1,
                    "state": {},
                    "volumeMounts": [{"name": "kube-api-access-cn4k7", "mountPath": "/var/run/secrets"}],
                },
            ],
        },
    }
    assert pod_state(pod, CTX) == {
        "phase": '"Running"',
        "podIP": "<ip>",
        "conditions[Ready].type": '"Ready"',
        "conditions[Ready].status": '"True"',
        "conditions[Ready].lastTransitionTime": "<time>",
        "containerStatuses[main].name": '"main"',
        "containerStatuses[main].containerID": "<cid>",
        "containerStatuses[main].restartCount": "1",
        "containerStatuses[main].state": "{}",
        # the ServiceAccount admission's random suffix, in the key and in the value
        "containerStatuses[main].volumeMounts[kube-api-access-<rand>].name": '"kube-api-access-<rand>"',
        "containerStatuses[main].volumeMounts[kube-api-access-<rand>].mountPath": '"/var/run/secrets"',
        "metadata.deletionTimestamp": "<time>",
    }


def test_event_line() -> None:
    event = {
        "type": "Warning",
        "reason": "BackOff",
        "involvedObject": {"fieldPath": "spec.containers{main}"},
        "source": {"component": "kubelet"},
        "message": f"Back-off restarting failed container main in pod p_d-na-x-abcde({UID})",
    }
    assert event_line(event, CTX) == (
        "Warning BackOff spec.containers{main} (kubelet): Back-off restarting failed container main in pod "
        "p_<ns>(<uid:p>)"
    )


RUNNING = {"status": {"phase": "Running", "containerStatuses": [
    {"name": "main", "restartCount": 2, "ready": True, "started": True, "state": {"running": {}}}]}}  # fmt: skip
WAITING = {"status": {"phase": "Running", "initContainerStatuses": [
    {"name": "init", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "pod", "want"),
    [
        ({"phase": "Running"}, RUNNING, True),
        ({"phase": "Failed"}, RUNNING, False),
        ({"container": "main", "restartCount": 1, "state": "running"}, RUNNING, True),
        ({"container": "main", "restartCount": 3}, RUNNING, False),
        ({"container": "main", "ready": False}, RUNNING, False),
        ({"container": "init", "reason": "CrashLoopBackOff"}, WAITING, True),
        ({"container": "init", "state": "running"}, WAITING, False),
        ({"container": "nope", "state": "running"}, RUNNING, False),
        ({"gone": True}, None, True),
        ({"gone": True}, RUNNING, False),
        ({"phase": "Running"}, None, False),
        ({"condition": "Ready"}, RUNNING, False),
        (
            {"condition": "Ready", "status": "True"},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            True,
        ),
        ({"deleting": True}, RUNNING, False),
    ],
)
def test_satisfied(args: dict[str, Any], pod: dict[str, Any] | None, want: bool) -> None:
    assert satisfied(args, pod) is want


def test_distinct_drops_known_paths_then_repeats() -> None:
    known = (KnownDifference(reason="r", path="containerStatuses[*].user*"),)
    states = [{"phase": "P"}, {"phase": "P", "containerStatuses[main].user.linux.uid": "0"}, {"phase": "R"}]
    assert distinct(states, known) == [{"phase": "P"}, {"phase": "R"}]
    assert distinct(states) == states


def test_render_shows_changes() -> None:
    assert render([{"a": "1", "b": "2"}, {"a": "1", "c": "3"}]) == [
        "state 1:", "    a = 1", "    b = 2", "state 2:", "  - b", "  + c = 3",
    ]  # fmt: skip


def _rec(agent: str, states: list[dict[str, str]], events: list[str]) -> Recording:
    return Recording(agent=agent, states={"p": states}, events=events, outcomes=["1 create: ok"])


@pytest.mark.parametrize(
    ("left", "right", "known", "same"),
    [
        (_rec("a", [{"x": "1"}], ["E"]), _rec("b", [{"x": "1"}, {"x": "1"}], ["E", "E"]), (), True),
        (_rec("a", [{"x": "1"}], []), _rec("b", [{"x": "2"}], []), (), False),
        (_rec("a", [{"x": "1"}], ["E"]), _rec("b", [{"x": "1"}], ["F"]), (), False),
        (
            _rec("a", [{"x": "1"}], ["E"]),
            _rec("b", [{"x": "1"}], ["F"]),
            (KnownDifference(reason="r", event="E"), KnownDifference(reason="r", event="F")),
            True,
        ),
        (
            _rec("a", [{"x": "1", "u": "0"}], []),
            _rec("b", [{"x": "1"}], []),
            (KnownDifference(reason="r", path="u"),),
            True,
        ),
    ],
)
def test_compare(left: Recording, right: Recording, known: tuple[KnownDifference, ...], same: bool) -> None:
    result = compare("s", left, right, known)
    assert result.same is same, result.diff


def test_compare_reports_the_kept_reasons() -> None:
    known = (KnownDifference(reason="why", path="u"), KnownDifference(reason="unused", path="zzz"))
    result = compare("s", _rec("a", [{"u": "0"}], []), _rec("b", [{}], []), known)
    assert result.kept == ("why",)


S_PENDING: dict[str, str] = {"phase": '"Pending"'}
S_CREATING: dict[str, str] = {
    "phase": '"Pending"',
    "containerStatuses[main].state.waiting.reason": '"ContainerCreating"',
}
S_RUNNING: dict[str, str] = {"phase": '"Running"', "containerStatuses[main].state.running.startedAt": "<time>"}
S_PULL_FAILED: dict[str, str] = {"phase": '"Pending"', "containerStatuses[main].state.waiting.reason": '"ErrImagePull"'}


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        # One side's status write coalesced the ContainerCreating state with the running one: timing.
        ([S_PENDING, S_CREATING, S_RUNNING], [S_PENDING, S_RUNNING], True),
        ([S_PENDING, S_RUNNING], [S_PENDING, S_CREATING, S_RUNNING], True),
        # Any other skipped state is a difference, and so is a ContainerCreating state in place of another.
        ([S_PENDING, S_PULL_FAILED, S_RUNNING], [S_PENDING, S_RUNNING], False),
        ([S_PENDING, S_CREATING, S_RUNNING], [S_PENDING, S_PULL_FAILED, S_RUNNING], False),
        ([S_PENDING, S_CREATING, S_RUNNING], [S_PENDING, S_CREATING], False),
    ],
)
def test_a_skipped_container_creating_state_is_timing(
    left: list[dict[str, str]], right: list[dict[str, str]], same: bool
) -> None:
    result = compare("s", _rec("a", left, []), _rec("b", right, []), ())
    assert result.same is same, result.diff
    assert (COALESCED in result.kept) is (same and left != right)


S_SUCCEEDED: dict[str, str] = {
    "phase": '"Succeeded"',
    "containerStatuses[main].state.terminated.exitCode": "0",
}
S_LOST: dict[str, str] = {
    "phase": '"Failed"',
    "reason": '"Evicted"',
    "containerStatuses[main].state.waiting.reason": '"ContainerCreating"',
    "containerStatuses[main].lastState.terminated.reason": '"ContainerStatusUnknown"',
    "containerStatuses[main].restartCount": "1",
}
EVICTED = ["Warning Evicted  (kubelet): Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "]


@pytest.mark.parametrize(
    ("left", "right", "events", "same"),
    [
        # The kubelet removed the evicted pod's container before its terminal status: the race, either side.
        ([S_PENDING, S_RUNNING, S_SUCCEEDED], [S_PENDING, S_RUNNING, S_LOST], EVICTED, True),
        ([S_PENDING, S_RUNNING, S_LOST], [S_PENDING, S_RUNNING, S_SUCCEEDED], EVICTED, True),
        # Not an eviction, a difference before the end, or an end that is not terminal: a difference.
        ([S_PENDING, S_RUNNING, S_SUCCEEDED], [S_PENDING, S_RUNNING, S_LOST], [], False),
        (
            [S_PENDING, S_CREATING, S_RUNNING, S_SUCCEEDED],
            [S_PENDING, S_PULL_FAILED, S_RUNNING, S_LOST],
            EVICTED,
            False,
        ),
        ([S_PENDING, S_RUNNING], [S_PENDING, S_LOST], EVICTED, False),
        ([S_PENDING, S_RUNNING, S_SUCCEEDED], [S_PENDING, S_RUNNING, S_SUCCEEDED, S_LOST], EVICTED, False),
    ],
)
def test_an_evicted_container_lost_before_the_terminal_status_is_timing(
    left: list[dict[str, str]], right: list[dict[str, str]], events: list[str], same: bool
) -> None:
    result = compare("s", _rec("a", left, events), _rec("b", right, events), ())
    assert result.same is same, result.diff
    assert (LOST in result.kept) is same


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"pods": []}, "no pods"),
        ({"pods": [{"metadata": {"name": "p"}, "spec": {}}]}, "no actions"),
        ({"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"create": "q"}]}, "unknown pod"),
        ({"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"jump": "p"}]}, "unknown action"),
        ({"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"wait": {"pod": "p"}}]}, "wait for"),
        (
            {"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"wait": {"pod": "p", "phsae": "x"}}]},
            "unknown wait keys",
        ),
        ({"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"kill": {"pod": "p"}}]}, "container"),
        (
            {
                "pods": [{"metadata": {"name": "p"}, "spec": {}}],
                "actions": [{"create": "p"}],
                "known_differences": [{"path": "x"}],
            },
            "reason",
        ),
        (
            {"pods": [{"metadata": {"name": "p"}, "spec": {}}], "actions": [{"create": "p"}], "devices": ["gpu"]},
            "devices may be device-plugin, dra-driver",
        ),
        (
            {
                "pods": [{"metadata": {"name": "p"}, "spec": {}}],
                "actions": [{"create": "p"}],
                "objects": [{"kind": "ResourceClaim", "metadata": {"name": "c"}}],
            },
            "objects may be",
        ),
    ],
)
def test_parse_refuses(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse(raw, "s")


def test_scrub_names_a_generated_claim_by_what_it_stands_for() -> None:
    ctx = Context(namespace="d-na-x-abcde", uids={}, names={"p-accel-x7k2q": "claim:p/accel"})
    assert (
        scrub("fetch ResourceClaim p-accel-x7k2q: forbidden", ctx) == "fetch ResourceClaim <claim:p/accel>: forbidden"
    )


def test_either_sample_plugin_device_reads_the_same_and_only_with_the_plugin() -> None:
    names = device_names(("device-plugin",))
    ctx = Context(namespace="d-na-x-abcde", uids={}, names=names)
    one, two = (scrub(f"mounts./tmp/Dev-{n}.host_path = /tmp/Dev-{n}", ctx) for n in (1, 2))
    assert one == two == "mounts.<device-plugin device>.host_path = <device-plugin device>"
    assert device_names(("dra-driver",)) == {}


def test_the_device_scenarios_name_what_they_run() -> None:
    plugin, dra = load_all(only=("spec-device-plugin", "spec-dra-claim"))
    assert plugin.devices == ("device-plugin",)
    assert dra.devices == ("dra-driver",)
    assert [o["kind"] for o in dra.objects] == ["DeviceClass", "ResourceClaimTemplate"]


def test_the_corpus_loads_and_is_large_enough() -> None:
    scenarios = load_all()
    assert len(scenarios) >= 40
    assert all(s.description for s in scenarios)
