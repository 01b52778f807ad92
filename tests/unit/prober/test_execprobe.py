"""The exec probe through the project's CRI client, against a scripted runtime on a real socket."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.prober.execprobe import probe_exec, static_command
from nodeagent.prober.probe import Outcome, ProbeError, ProbeOutcome
from tests.unit.cri.scripted import Fail, ScriptedRuntime


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (api_pb2.ExecSyncResponse(exit_code=0, stdout=b"ok\n"), ProbeOutcome(Outcome.SUCCESS, "ok\n")),
        (
            api_pb2.ExecSyncResponse(exit_code=1, stderr=b"cat: can't open '/tmp/ready': No such file or directory\n"),
            ProbeOutcome(Outcome.FAILURE, "cat: can't open '/tmp/ready': No such file or directory\n"),
        ),
        # stdout then stderr, as upstream's RunInContainer joins them.
        (
            api_pb2.ExecSyncResponse(exit_code=2, stdout=b"out ", stderr=b"err"),
            ProbeOutcome(Outcome.FAILURE, "out err"),
        ),
        (api_pb2.ExecSyncResponse(exit_code=0, stdout=b"y" * 20_000), ProbeOutcome(Outcome.SUCCESS, "y" * 10240)),
        # containerd answers DEADLINE_EXCEEDED when it killed the command at its timeout: a failure, not an error.
        (
            Fail(grpc.StatusCode.DEADLINE_EXCEEDED, "timeout 1s exceeded: context deadline exceeded"),
            ProbeOutcome(Outcome.FAILURE, 'command timed out: "cat /tmp/ready" timed out after 3s'),
        ),
    ],
    ids=["exit-0", "exit-1", "stdout-then-stderr", "output-truncated", "timeout"],
)
async def test_exec_outcomes(runtime: ScriptedRuntime, client: CRIClient, answer: Any, expected: ProbeOutcome) -> None:
    runtime.script["ExecSync"] = answer
    outcome = await probe_exec(client.runtime, "c1", ["cat", "/tmp/ready"], 3)
    assert outcome == expected
    [call] = runtime.calls_of("ExecSync")
    assert isinstance(call.request, api_pb2.ExecSyncRequest)
    assert (call.request.container_id, list(call.request.cmd), call.request.timeout) == ("c1", ["cat", "/tmp/ready"], 3)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        # Go's %q: inner quotes and backslashes escaped (a plain f'"{cmd}"' would leave them bare).
        (
            ["sh", "-c", 'echo "hi" && sleep 9'],
            'command timed out: "sh -c echo \\"hi\\" && sleep 9" timed out after 1s',
        ),
        (["sh", "-c", "printf 'a\\tb'"], "command timed out: \"sh -c printf 'a\\\\tb'\" timed out after 1s"),
        # Control characters take Go's escapes, where json.dumps would write \u0009; printable non-ASCII stays.
        (["sh", "-c", "sleep\t9\n"], 'command timed out: "sh -c sleep\\t9\\n" timed out after 1s'),
        (["echo", "h\u00e9\u00a0\x1b"], 'command timed out: "echo h\u00e9\\u00a0\\x1b" timed out after 1s'),
    ],
    ids=["double-quotes", "backslash", "control-characters", "non-ascii"],
)
async def test_timeout_message_quotes_the_command_as_go(
    runtime: ScriptedRuntime, client: CRIClient, command: list[str], message: str
) -> None:
    runtime.script["ExecSync"] = Fail(
        grpc.StatusCode.DEADLINE_EXCEEDED, "timeout 1s exceeded: context deadline exceeded"
    )
    assert await probe_exec(client.runtime, "c1", command, 1) == ProbeOutcome(Outcome.FAILURE, message)


async def test_runtime_error_is_a_probe_error(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ExecSync"] = Fail(grpc.StatusCode.UNKNOWN, "cannot register an exec PID: container is stopping")
    with pytest.raises(ProbeError) as caught:
        await probe_exec(client.runtime, "c1", ["true"], 1)
    assert str(caught.value) == ("rpc error: code = Unknown desc = cannot register an exec PID: container is stopping")


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        (["sh", "-c", "test -f $(FILE)"], [{"name": "FILE", "value": "/tmp/x"}], ["sh", "-c", "test -f /tmp/x"]),
        # Only literal values: a valueFrom variable stays as written, as upstream's ExpandContainerCommandOnlyStatic.
        (["echo", "$(SECRET)"], [{"name": "SECRET", "valueFrom": {"secretKeyRef": {}}}], ["echo", "$(SECRET)"]),
        (["echo", "$$(X)"], [{"name": "X", "value": "1"}], ["echo", "$(X)"]),
    ],
)
def test_static_command(command: list[str], env: list[dict[str, Any]], expected: list[str]) -> None:
    assert static_command(command, {"env": env}) == expected
