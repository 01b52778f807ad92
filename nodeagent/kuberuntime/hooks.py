"""Lifecycle hooks (exec, httpGet, sleep) as upstream's handler runner runs them (lifecycle/handlers.go), the
postStart hook after StartContainer (kuberuntime_container.go startContainer, step 4), the preStop hook before
StopContainer (executePreStopHook), and the grace StopContainer then gets (killContainer).

Handlers, as upstream:

- exec runs the command through CRI ExecSync; a non-zero exit fails with "command '<cmd>' exited with <code>:
  <stderr>" and the combined output. postStart's command has no timeout; preStop's is bounded by the grace.
- httpGet sends a GET to the handler's host, else the pod's first IP (a pod without one, as a hostNetwork pod,
  fails: "failed to find networking container"), on a numbered or named port, with the handler's headers plus
  `User-Agent: kube-lifecycle/<major>.<minor>` and `Accept: */*` unless set. TLS is not verified and no proxy is
  used. Only a request that fails fails the hook: the status code is not looked at (upstream discards the
  response). Not covered: upstream's retry over plain HTTP when an https hook meets an HTTP server, and following
  a redirect to the same host.
- sleep waits its seconds.

The failure message is upstream's ("Exec lifecycle hook ([cmd]) for Container "c" in Pod "name_ns(uid)" failed -
error: ..., message: ..."), which becomes a postStart failure's waiting message. Events never carry it, since a
hook's output may hold secrets: "PostStartHook failed" and "PreStopHook failed", as upstream.

preStop: the hook runs within the container's own grace (the deletion's, else the failed probe's or the pod's) and
only if that grace is above 0; a hook still running when the grace is over is given up, logged, without an event.
Without an override StopContainer gets what the hook left of that grace, never less than 2 s (upstream's
minimumGracePeriodInSeconds), hook or not. A kill with an override (the pod workers' grace for a terminating pod,
housekeeping's kill of an unknown pod) gives StopContainer exactly the override, whatever the hook took.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from cri.errors import CRIError
from cri.service import RuntimeService
from nodeagent import __version__
from nodeagent.podconfig.storage import format_pod

log = logging.getLogger(__name__)

MINIMUM_GRACE_SECONDS = 2
# upstream ErrPostStartHook: the waiting reason of a container whose postStart hook failed
POST_START_HOOK_ERROR = "PostStartHookError"
# upstream reasonFailedPostStartHook: the event's reason, and the message of the Killing event that follows
FAILED_POST_START_HOOK = "FailedPostStartHook"
POST_START_HOOK_FAILED = "PostStartHook failed"
FAILED_PRE_STOP_HOOK = "FailedPreStopHook"
PRE_STOP_HOOK_FAILED = "PreStopHook failed"


def _user_agent() -> str:
    major, minor = [*__version__.split("."), "0", "0"][:2]
    return f"kube-lifecycle/{major}.{minor}"


USER_AGENT = _user_agent()


class HookError(Exception):
    """The hook ran and failed, or could not run; `message` is upstream's handler message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _quote(text: str) -> str:
    # Close to Go's %q for what these messages carry (names, command output).
    return json.dumps(text, ensure_ascii=False)


def go_list(items: Sequence[str]) -> str:
    """A string slice as Go's %v prints it: [a b c]."""
    return "[" + " ".join(items) + "]"


def resolve_port(value: Any, container: Mapping[str, Any]) -> int:
    """Upstream ResolveContainerPort: a number, a named port of the container, or a number written as a string."""
    if isinstance(value, int):
        port = value
    else:
        text = str(value)
        named = next((p for p in container.get("ports") or () if p.get("name") == text), None)
        if named is not None:
            port = int(named.get("containerPort") or 0)
        else:
            try:
                port = int(text, 10)
            except ValueError:
                raise HookError(f'strconv.Atoi: parsing "{text}": invalid syntax') from None
    if 0 < port < 65536:
        return port
    raise HookError(f"invalid port number: {port}")


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def http_request(
    action: Mapping[str, Any], container: Mapping[str, Any], pod_ips: Sequence[str]
) -> tuple[str, list[tuple[str, str]]]:
    """The hook's URL and headers (upstream runHTTPHandler and NewRequestForHTTPGetAction); raises HookError."""
    host = str(action.get("host") or "")
    if not host:
        if not pod_ips:
            raise HookError("failed to find networking container: the pod has no IP")
        host = pod_ips[0]
    scheme = str(action.get("scheme") or "HTTP").lower()
    parsed = urllib.parse.urlsplit(str(action.get("path") or ""))
    path = parsed.path if not parsed.path or parsed.path.startswith("/") else "/" + parsed.path
    netloc = _join_host_port(host, resolve_port(action.get("port"), container))
    url = urllib.parse.urlunsplit((scheme, netloc, path, parsed.query, parsed.fragment))
    headers = [(str(h.get("name", "")), str(h.get("value", ""))) for h in action.get("httpHeaders") or ()]
    names = {name.lower() for name, _ in headers}
    if "user-agent" not in names:
        headers.append(("User-Agent", USER_AGENT))
    if "accept" not in names:
        headers.append(("Accept", "*/*"))
    elif next(value for name, value in headers if name.lower() == "accept") == "":
        headers = [(name, value) for name, value in headers if name.lower() != "accept"]
    return url, headers


async def _run_exec(
    runtime: RuntimeService, command: list[str], container_id: str, timeout: float
) -> tuple[str, str] | None:
    """(error, output) of a failed command, None when it succeeded."""
    try:
        result = await runtime.exec_sync(container_id, command, timeout)
    except CRIError as exc:
        return exc.message, ""
    if result.exit_code == 0:
        return None
    stderr = result.stderr.decode(errors="replace")
    output = result.stdout.decode(errors="replace") + stderr
    return f"command '{' '.join(command)}' exited with {result.exit_code}: {stderr}", output


async def _run_http_get(url: str, headers: list[tuple[str, str]], timeout: float | None) -> str | None:
    """The error of a request that failed, None when any response came back."""
    try:
        async with (
            httpx.AsyncClient(verify=False, trust_env=False, timeout=timeout, follow_redirects=False) as http,
            http.stream("GET", url, headers=headers),
        ):
            return None
    except httpx.HTTPError as exc:
        return f'Get "{url}": {str(exc) or type(exc).__name__}'


async def run_handler(
    runtime: RuntimeService,
    handler: Mapping[str, Any],
    *,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    container_id: str,
    pod_ips: Sequence[str],
    timeout: float = 0,
) -> None:
    """Run one lifecycle handler (upstream handlerRunner.Run); raises HookError with upstream's message.

    `timeout` bounds an exec command and an HTTP request in seconds (0: unbounded, as postStart's).
    """
    name, ref = _quote(str(container.get("name", ""))), _quote(format_pod(pod))
    if handler.get("exec") is not None:
        command = [str(c) for c in (handler["exec"] or {}).get("command") or ()]
        failure = await _run_exec(runtime, command, container_id, timeout)
        if failure is not None:
            error, output = failure
            raise HookError(
                f"Exec lifecycle hook ({go_list(command)}) for Container {name} in Pod {ref} failed - "
                f"error: {error}, message: {_quote(output)}"
            )
    elif handler.get("httpGet") is not None:
        action: Mapping[str, Any] = handler["httpGet"] or {}
        try:
            url, headers = http_request(action, container, pod_ips)
            http_error = await _run_http_get(url, headers, timeout or None)
        except HookError as exc:
            http_error = exc.message
        if http_error is not None:
            raise HookError(
                f"HTTP lifecycle hook ({action.get('path') or ''}) for Container {name} in Pod {ref} failed - "
                f"error: {http_error}"
            )
    elif handler.get("sleep") is not None:
        await asyncio.sleep(float((handler["sleep"] or {}).get("seconds") or 0))
    else:
        raise HookError(f"Cannot run handler: invalid handler: {dict(handler)}")


async def run_post_start(
    runtime: RuntimeService,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    container_id: str,
    pod_ips: Sequence[str],
) -> None:
    """The container's postStart hook, if it has one, without a time limit (as upstream); raises HookError."""
    hook = (container.get("lifecycle") or {}).get("postStart")
    if hook:
        await run_handler(runtime, hook, pod=pod, container=container, container_id=container_id, pod_ips=pod_ips)


def stop_grace(grace: int, *, hook_seconds: int = 0, override: int | None = None) -> int:
    """The grace for StopContainer: an override as it is; else what the preStop hook left of the container's grace,
    at least MINIMUM_GRACE_SECONDS, so a container always gets a short window to stop on SIGTERM."""
    if override is not None:
        return override
    return max(grace - hook_seconds, MINIMUM_GRACE_SECONDS)


async def run_pre_stop_within_grace(
    runtime: RuntimeService,
    container: Mapping[str, Any] | None,
    container_id: str,
    pod_ips: Sequence[str],
    grace: int,
    *,
    pod: Mapping[str, Any] | None = None,
) -> tuple[int, str | None]:
    """Run the container's preStop hook, if it has one and the grace is above 0, for at most the grace: the whole
    seconds it took, and its failure message (None when it succeeded or was given up at the end of the grace)."""
    lifecycle: Mapping[str, Any] = (container or {}).get("lifecycle") or {}
    if container is None or not lifecycle.get("preStop") or grace <= 0:
        return 0, None
    started = time.monotonic()
    error = None
    try:
        await asyncio.wait_for(
            run_handler(
                runtime,
                lifecycle["preStop"],
                pod=pod or {},
                container=container,
                container_id=container_id,
                pod_ips=pod_ips,
                timeout=max(grace, 1),
            ),
            timeout=grace,
        )
    except HookError as exc:
        error = exc.message
    except TimeoutError:
        log.info("preStop hook not completed in grace period container=%s grace=%d", container.get("name"), grace)
    return int(time.monotonic() - started), error
