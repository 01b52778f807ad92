"""The exec probe: a command run in the container through CRI ExecSync (upstream pkg/probe/exec and the kubelet's
RunInContainer).

Exit code 0 is success and any other exit a failure, with the command's output (stdout then stderr, at most
10 KiB) as the message. The probe's timeoutSeconds bounds the command: the runtime kills it when the time is up
and answers DEADLINE_EXCEEDED, which counts as a failure with the upstream kubelet's message
`command timed out: "..." timed out after 1s`, the command quoted as Go's %q quotes it (the ExecProbeTimeout
behaviour, GA upstream). Any other runtime error means the probe could not run (`ProbeError`).

`$(VAR)` in the command is expanded from the container's env entries that have a literal value only, as upstream
(ExpandContainerCommandOnlyStatic): the probe does not see the downward API or ConfigMap values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cri.errors import CRIError, DeadlineExceededError
from cri.v1 import api_pb2
from nodeagent.kuberuntime.expansion import expand
from nodeagent.prober.probe import (
    Outcome,
    ProbeError,
    ProbeOutcome,
    go_code_name,
    go_duration,
    go_quote,
    truncate,
)


class CommandRunner(Protocol):
    """The one CRI call the exec probe needs (cri.service.RuntimeService has it)."""

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse: ...


def rpc_error_text(exc: CRIError) -> str:
    return f"rpc error: code = {go_code_name(exc.code)} desc = {exc.message}"


def static_command(command: Sequence[str], container: Mapping[str, Any]) -> list[str]:
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env") or ()
        if e.get("name") and e.get("valueFrom") is None
    }
    return [expand(part, env) for part in command]


async def probe_exec(runner: CommandRunner, container_id: str, command: Sequence[str], timeout: int) -> ProbeOutcome:
    try:
        response = await runner.exec_sync(container_id, list(command), timeout)
    except DeadlineExceededError:
        # As the upstream kubelet words it (seen side by side in the differential corpus): the command joined with
        # spaces, quoted as Go's %q does, and the probe's timeout as a Go duration.
        quoted = go_quote(" ".join(command))
        return ProbeOutcome(Outcome.FAILURE, f"command timed out: {quoted} timed out after {go_duration(timeout)}")
    except CRIError as exc:
        raise ProbeError(rpc_error_text(exc)) from exc
    output = truncate(response.stdout + response.stderr)
    return ProbeOutcome(Outcome.SUCCESS if response.exit_code == 0 else Outcome.FAILURE, output)
