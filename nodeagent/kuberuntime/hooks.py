"""preStop hooks (exec, httpGet, sleep), run before StopContainer, as upstream's lifecycle handler runner does, and
the grace StopContainer then gets (upstream killContainer).

The hook runs within the container's own grace (the deletion's, else the failed probe's or the pod's) and only if
that grace is above 0. Without an override StopContainer gets what the hook left of that grace, never less than 2 s
(upstream's minimumGracePeriodInSeconds), hook or not. A kill with an override (the pod workers' grace for a
terminating pod, housekeeping's kill of an unknown pod) gives StopContainer exactly the override, whatever the hook
took, as upstream does. A failed hook is reported as a FailedPreStopHook event and the container is stopped all the
same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from cri.errors import CRIError
from cri.service import RuntimeService

MINIMUM_GRACE_SECONDS = 2


class HookError(Exception):
    """The hook ran and failed, or could not run; the message is what the event says."""


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.isdigit():
        return int(text)
    for port in container.get("ports") or []:
        if port.get("name") == text:
            return int(port["containerPort"])
    raise HookError(f"couldn't find port {text!r} in container {container.get('name')!r}")


async def run_pre_stop(
    runtime: RuntimeService,
    container: Mapping[str, Any],
    container_id: str,
    pod_ips: Sequence[str],
    grace: int,
) -> None:
    hook = (container.get("lifecycle") or {}).get("preStop") or {}
    if "exec" in hook:
        command = list((hook["exec"] or {}).get("command") or [])
        try:
            result = await runtime.exec_sync(container_id, command, max(grace, 1))
        except CRIError as exc:
            raise HookError(
                f"Exec lifecycle hook ({command}) for Container {container.get('name')!r} failed - error: {exc.message}"
            ) from exc
        if result.exit_code != 0:
            raise HookError(
                f"Exec lifecycle hook ({command}) for Container {container.get('name')!r} failed - error: command "
                f"'{' '.join(command)}' exited with {result.exit_code}: {result.stderr.decode(errors='replace')}"
            )
    elif "httpGet" in hook:
        spec = hook["httpGet"] or {}
        host = spec.get("host") or (pod_ips[0] if pod_ips else "")
        scheme = str(spec.get("scheme") or "HTTP").lower()
        url = f"{scheme}://{host}:{_port(spec.get('port'), container)}{spec.get('path') or '/'}"
        headers = {h["name"]: h["value"] for h in spec.get("httpHeaders") or []}
        try:
            async with httpx.AsyncClient(verify=False, timeout=max(grace, 1), trust_env=False) as http:
                resp = await http.get(url, headers=headers)
        except httpx.HTTPError as exc:
            raise HookError(
                f"HTTP lifecycle hook ({spec.get('path') or '/'}) for Container "
                f"{container.get('name')!r} failed - error: {exc}"
            ) from exc
        if not 200 <= resp.status_code < 400:
            raise HookError(
                f"HTTP lifecycle hook ({spec.get('path') or '/'}) for Container {container.get('name')!r} "
                f"failed - error: HTTP status code {resp.status_code}"
            )
    elif "sleep" in hook:
        await asyncio.sleep(min(float((hook["sleep"] or {}).get("seconds", 0)), float(grace)))


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
) -> tuple[int, str | None]:
    """Run the container's preStop hook, if it has one and the grace is above 0, for at most the grace: the whole
    seconds it took, and its error."""
    if container is None or not (container.get("lifecycle") or {}).get("preStop") or grace <= 0:
        return 0, None
    started = time.monotonic()
    error = None
    try:
        await asyncio.wait_for(run_pre_stop(runtime, container, container_id, pod_ips, grace), timeout=grace)
    except HookError as exc:
        error = str(exc)
    except TimeoutError:
        error = f"PreStopHook for Container {container.get('name')!r} did not complete in {grace}s"
    return int(time.monotonic() - started), error
