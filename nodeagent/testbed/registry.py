"""The testbed's local OCI registry: its config, a readiness wait, and a push of the images built by images.py.

The registry is Debian's docker-registry (distribution 2.8) on loopback over plain HTTP, with no auth: containerd
pulls from it through a hosts.toml, which makes PullImage in tests real without reaching any outside registry.

The push speaks the Registry HTTP API v2 (the OCI distribution spec) directly: HEAD a blob to skip what the
repository already has, POST an upload session and PUT the bytes with `?digest=`, then PUT the manifest under its
media type. The registry checks every digest, so a corrupted layout fails the push with the registry's own answer.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from pathlib import Path

import httpx
import yaml

from nodeagent.testbed.images import OCIImage

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 60.0


class RegistryError(RuntimeError):
    """A registry call failed. `status` and `body` are the registry's answer (`status` is None when none came)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        self.status = status
        self.body = body
        detail = f" (HTTP {status}): {body.strip()[:2000]}" if status is not None else ""
        super().__init__(message + detail)


class PushError(RegistryError):
    """A push was refused or broke off: a blob upload or the manifest PUT."""


class RegistryNotReady(RegistryError):
    """`GET /v2/` did not answer 200 within the timeout."""


def registry_config(root: Path, addr: str) -> str:
    """docker-registry (distribution 2.8) config: filesystem storage under `root`, plain HTTP on `addr` (loopback,
    or a host-only bridge in 198.18.0.0/15)."""
    _check_loopback(addr)
    config = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "fields": {"service": "registry"}},
        "storage": {
            "filesystem": {"rootdirectory": str(root)},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
            # Upload purging is a background walk of the storage; a testbed lives minutes, not days.
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": addr, "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }
    return yaml.safe_dump(config, sort_keys=False)


TESTING_RANGE = ipaddress.ip_network("198.18.0.0/15")


def _check_loopback(addr: str) -> None:
    # The testbed serves nothing beyond the machine (TESTBED.md, Addresses).
    host, sep, port = addr.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"registry address {addr!r} is not host:port")
    if host == "localhost":
        return
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    # Loopback, or a host-only bridge of the network-testing range (a `cluster up`'s fabric, whose nodes each have
    # a network namespace and so a loopback of their own: cluster/nodenet.py).
    if ip is None or not (ip.is_loopback or ip in TESTING_RANGE):
        raise ValueError(f"registry address {addr!r} is neither on loopback nor in {TESTING_RANGE}")


def _client(registry: str, transport: httpx.AsyncBaseTransport | None, timeout: float) -> httpx.AsyncClient:
    # trust_env=False: a proxy set in the environment (these machines reach package registries through one) must not
    # carry loopback traffic.
    return httpx.AsyncClient(
        base_url=f"http://{registry}", timeout=timeout, trust_env=False, transport=transport, follow_redirects=False
    )


# A plain `timeout` argument rather than asyncio.timeout around the call: the last answer goes into the error.
async def wait_ready(
    registry: str,
    timeout: float,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> None:
    """Poll `GET /v2/` until it answers 200; RegistryNotReady with the last answer or error after `timeout`."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    status: int | None = None
    body = ""
    async with _client(registry, transport, timeout=max(0.1, min(timeout, 2.0))) as client:
        while True:
            try:
                response = await client.get("/v2/")
            except httpx.HTTPError as exc:
                last, status, body = repr(exc), None, ""
            else:
                if response.status_code == 200:
                    return
                last, status, body = f"HTTP {response.status_code}", response.status_code, response.text
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RegistryNotReady(
                    f"registry {registry} not ready after {timeout:.1f}s: {last}", status=status, body=body
                )
            await asyncio.sleep(min(0.1, remaining))


async def push_image(
    registry: str,
    repository: str,
    tag: str,
    image: OCIImage,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str:
    """Push `image` as `registry/repository:tag`; the manifest digest the registry reports (checked against ours)."""
    async with _client(registry, transport, timeout=REQUEST_TIMEOUT) as client:
        for blob in image.blobs():
            await _push_blob(client, repository, blob.digest, blob.size, image)
        response = await _send(
            client,
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            step=f"PUT manifest {image.manifest_digest} as {repository}:{tag}",
            headers={"Content-Type": _manifest_media_type(image)},
            content=image.manifest,
        )
        _expect(response, 201, f"PUT manifest {image.manifest_digest} as {repository}:{tag}")
        digest = str(response.headers.get("Docker-Content-Digest", image.manifest_digest))
        if digest != image.manifest_digest:
            raise PushError(
                f"registry {registry} stored manifest {repository}:{tag} as {digest}, not {image.manifest_digest}"
            )
        log.debug("pushed image=%s/%s:%s digest=%s", registry, repository, tag, digest)
        return digest


def _manifest_media_type(image: OCIImage) -> str:
    # The manifest names its own media type; the registry wants the same in Content-Type.
    media_type = json.loads(image.manifest).get("mediaType")
    if not isinstance(media_type, str):
        raise PushError(f"manifest {image.manifest_digest} in {image.layout} has no mediaType")
    return media_type


async def _push_blob(client: httpx.AsyncClient, repository: str, digest: str, size: int, image: OCIImage) -> None:
    head = await _send(client, "HEAD", f"/v2/{repository}/blobs/{digest}", step=f"HEAD blob {digest}")
    if head.status_code == 200:
        log.debug("blob already in registry repository=%s digest=%s", repository, digest)
        return
    if head.status_code != 404:
        _expect(head, 200, f"HEAD blob {digest} in {repository}")
    start = await _send(client, "POST", f"/v2/{repository}/blobs/uploads/", step=f"start upload of {digest}")
    _expect(start, 202, f"POST upload of blob {digest} to {repository}")
    location = start.headers.get("Location")
    if not location:
        raise PushError(f"registry answered POST upload of {digest} without a Location", status=202, body=start.text)
    # Location may be absolute or relative, and already carries the upload state as query parameters.
    url = start.url.join(location).copy_merge_params({"digest": digest})
    data = image.blob_path(digest).read_bytes()
    if len(data) != size:
        log.warning("blob size differs from its descriptor digest=%s size=%d descriptor=%d", digest, len(data), size)
    put = await _send(
        client,
        "PUT",
        url,
        step=f"PUT blob {digest}",
        headers={"Content-Type": "application/octet-stream"},
        content=data,
    )
    _expect(put, 201, f"PUT blob {digest} to {repository}")


async def _send(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL | str,
    *,
    step: str,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    try:
        return await client.request(method, url, headers=headers, content=content)
    except httpx.HTTPError as exc:
        raise PushError(f"{step}: no answer from registry {client.base_url}: {exc!r}") from exc


def _expect(response: httpx.Response, status: int, step: str) -> None:
    if response.status_code != status:
        raise PushError(f"{step} failed", status=response.status_code, body=response.text)
