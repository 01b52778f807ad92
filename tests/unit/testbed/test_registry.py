"""Pushing the testbed's images into a real docker-registry (distribution 2.8), and reading them back.

The registry is the real binary from Debian, on a free loopback port with storage in a tmp dir; no skip: without
`/usr/bin/docker-registry` these tests fail and say how to install it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from nodeagent.testbed import images, registry

DOCKER_REGISTRY = Path("/usr/bin/docker-registry")
START_TIMEOUT = 20.0
OCI_ACCEPT = "application/vnd.oci.image.manifest.v1+json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


@pytest.fixture(scope="module")
def registry_addr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not DOCKER_REGISTRY.is_file():
        pytest.fail(
            f"{DOCKER_REGISTRY} is missing: run `nodeagent testbed install` (Debian trixie package docker-registry)",
            pytrace=False,
        )
    root = tmp_path_factory.mktemp("registry")
    addr = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(registry.registry_config(root / "storage", addr))
    log_path = root / "registry.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(DOCKER_REGISTRY), "serve", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"docker-registry exited with {proc.returncode} during start-up\n{_tail(log_path)}", pytrace=False
                )
            try:
                asyncio.run(registry.wait_ready(addr, timeout=0.5))
                break
            except registry.RegistryNotReady as exc:
                if time.monotonic() > deadline:
                    pytest.fail(f"docker-registry did not come up on {addr}: {exc}\n{_tail(log_path)}", pytrace=False)
        yield addr
    finally:
        # Exactly the process this fixture started.
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, images.OCIImage]:
    root = tmp_path_factory.mktemp("images")
    return {
        "pause": images.build_pause_image(root / "pause"),
        "busybox": images.build_busybox_image(root / "busybox"),
    }


class RecordingTransport(httpx.AsyncBaseTransport):
    """The real transport, with the method and path of every request written down."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("name", ["pause", "busybox"])
async def test_pushed_image_reads_back_with_the_same_digests(
    registry_addr: str, built: dict[str, images.OCIImage], name: str
) -> None:
    image = built[name]
    digest = await registry.push_image(registry_addr, f"testbed/{name}", "v1", image)
    assert digest == image.manifest_digest

    async with httpx.AsyncClient(base_url=f"http://{registry_addr}", trust_env=False) as client:
        response = await client.get(f"/v2/testbed/{name}/manifests/v1", headers={"Accept": OCI_ACCEPT})
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == OCI_ACCEPT
        assert response.headers["Docker-Content-Digest"] == image.manifest_digest
        assert "sha256:" + hashlib.sha256(response.content).hexdigest() == image.manifest_digest
        assert response.content == image.manifest
        for blob in image.blobs():
            fetched = await client.get(f"/v2/testbed/{name}/blobs/{blob.digest}")
            assert fetched.status_code == 200
            assert "sha256:" + hashlib.sha256(fetched.content).hexdigest() == blob.digest
            assert len(fetched.content) == blob.size


async def test_a_second_push_uploads_no_blob(registry_addr: str, built: dict[str, images.OCIImage]) -> None:
    image = built["busybox"]
    await registry.push_image(registry_addr, "testbed/again", "one", image)
    recorder = RecordingTransport()
    digest = await registry.push_image(registry_addr, "testbed/again", "two", image, transport=recorder)
    assert digest == image.manifest_digest
    assert recorder.requests == [
        *(("HEAD", f"/v2/testbed/again/blobs/{blob.digest}") for blob in image.blobs()),
        ("PUT", "/v2/testbed/again/manifests/two"),
    ]


async def test_a_corrupted_blob_fails_the_push_with_the_registrys_answer(
    registry_addr: str, built: dict[str, images.OCIImage], tmp_path: Path
) -> None:
    good = built["pause"]
    copy = tmp_path / "pause"
    shutil.copytree(good.layout, copy)
    layer = good.layers[0].digest
    images.blob_path(copy, layer).write_bytes(images.gzip_bytes(b"not the pause layer"))
    corrupted = dataclasses.replace(good, layout=copy)

    with pytest.raises(registry.PushError) as caught:
        await registry.push_image(registry_addr, "testbed/corrupted", "v1", corrupted)
    assert caught.value.status == 400
    assert "DIGEST_INVALID" in caught.value.body
    assert layer in str(caught.value)

    async with httpx.AsyncClient(base_url=f"http://{registry_addr}", trust_env=False) as client:
        response = await client.get("/v2/testbed/corrupted/manifests/v1", headers={"Accept": OCI_ACCEPT})
    assert response.status_code == 404


async def test_wait_ready_gives_up_on_a_port_nobody_serves() -> None:
    addr = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(registry.RegistryNotReady, match=addr):
        await registry.wait_ready(addr, timeout=0.3)
    assert time.monotonic() - started < 5


def test_registry_config_serves_loopback_from_the_given_root(tmp_path: Path) -> None:
    doc = yaml.safe_load(registry.registry_config(tmp_path / "storage", "127.0.0.1:5123"))
    assert doc["version"] == 0.1
    assert doc["http"]["addr"] == "127.0.0.1:5123"
    assert "tls" not in doc["http"]
    assert "auth" not in doc
    assert doc["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "storage")
    assert doc["storage"]["delete"]["enabled"] is True
    assert doc["log"]["level"] == "info"


@pytest.mark.parametrize(
    ("addr", "accepted"),
    [
        ("127.0.0.1:5000", True),
        ("127.0.0.2:5000", True),
        ("[::1]:5000", True),
        ("localhost:5000", True),
        ("0.0.0.0:5000", False),
        # A `cluster up`'s fabric gateway (a host-only bridge; its nodes' loopbacks are their own).
        ("198.18.0.1:5000", True),
        ("198.19.255.1:5000", True),
        ("198.20.0.1:5000", False),
        ("192.0.2.2:5000", False),
        ("10.0.0.1:5000", False),
        ("registry.example:5000", False),
        ("127.0.0.1", False),
        ("127.0.0.1:0", False),
    ],
)
def test_registry_config_accepts_only_loopback_or_the_testing_range(tmp_path: Path, addr: str, accepted: bool) -> None:
    if accepted:
        registry.registry_config(tmp_path, addr)
    else:
        with pytest.raises(ValueError, match="registry address"):
            registry.registry_config(tmp_path, addr)
