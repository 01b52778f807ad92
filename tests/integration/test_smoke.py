"""Smoke tests against the real parts: apiserver, containerd over the project's CRI client, the local registry."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest

from cri.client import CRIClient
from cri.errors import CRIError, NotFoundError
from cri.v1 import api_pb2
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.crifixtures import container_config, sandbox_config


def _admin_context(testbed: Testbed) -> ssl.SSLContext:
    pki = testbed.layout.pki
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


async def test_apiserver_readyz_answers(testbed: Testbed, settings: Settings) -> None:
    async with httpx.AsyncClient(verify=_admin_context(testbed)) as http:
        resp = await http.get(f"{settings.apiserver_url}/readyz")
    assert resp.status_code == 200
    assert resp.text == "ok"


async def test_node_credential_is_a_node_under_node_authorizer(testbed: Testbed, settings: Settings) -> None:
    pki = testbed.layout.pki
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "node.crt"), str(pki / "node.key"))
    async with httpx.AsyncClient(verify=context) as http:
        # A node may read its own Node object (404 while unregistered) but may not list secrets.
        own = await http.get(f"{settings.apiserver_url}/api/v1/nodes/{settings.node_name}")
        secrets = await http.get(f"{settings.apiserver_url}/api/v1/secrets")
    assert own.status_code == 404
    assert secrets.status_code == 403


async def test_cri_version_reports_containerd_1_7(cri_client: CRIClient) -> None:
    version = await cri_client.runtime.version("v1")
    assert version.runtime_name == "containerd"
    assert version.runtime_version.startswith("1.7."), version.runtime_version
    assert version.runtime_api_version == "v1"


async def test_pull_image_from_local_registry(cri_client: CRIClient, settings: Settings) -> None:
    image = configs.busybox_image(settings)
    ref = await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    assert ref.startswith("sha256:")
    status = await cri_client.image.image_status(api_pb2.ImageSpec(image=image))
    assert image in status.image.repo_tags


async def test_pull_of_unknown_image_fails_with_mapped_error(cri_client: CRIClient, settings: Settings) -> None:
    missing = f"{settings.registry}/does-not-exist:never"
    with pytest.raises(CRIError) as caught:
        await cri_client.image.pull_image(api_pb2.ImageSpec(image=missing))
    assert isinstance(caught.value, NotFoundError), repr(caught.value)
    assert "does-not-exist" in str(caught.value)
    assert caught.value.method.endswith("PullImage")


async def test_sandbox_with_one_container_runs_and_is_removed(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    runtime, images = cri_client.runtime, cri_client.image
    image = configs.busybox_image(settings)
    await images.pull_image(api_pb2.ImageSpec(image=image))
    config = sandbox_config("smoke", tmp_path / "logs")
    sandbox_id = await runtime.run_pod_sandbox(config)
    try:
        sandbox = await runtime.pod_sandbox_status(sandbox_id)
        assert sandbox.status.state == api_pb2.SANDBOX_READY
        pod_ip = sandbox.status.network.ip
        assert pod_ip.startswith(settings.pod_cidr.rsplit(".", 2)[0]), (pod_ip, settings.pod_cidr)
        container_id = await runtime.create_container(
            sandbox_id, container_config("main", image, ["sh", "-c", "echo hello-from-busybox; sleep 3600"]), config
        )
        await runtime.start_container(container_id)
        status = await runtime.container_status(container_id)
        assert status.status.state == api_pb2.CONTAINER_RUNNING
        result = await runtime.exec_sync(container_id, ["hostname"], timeout=10)
        assert result.exit_code == 0
        assert result.stdout.decode().strip() == "smoke"
        log = tmp_path / "logs" / "main" / "0.log"
        for _ in range(50):
            if log.exists() and "hello-from-busybox" in log.read_text():
                break
            await asyncio.sleep(0.1)
        assert "hello-from-busybox" in log.read_text()
        await runtime.stop_container(container_id, 0)
        stopped = await runtime.container_status(container_id)
        assert stopped.status.state == api_pb2.CONTAINER_EXITED
        await runtime.remove_container(container_id)
        with pytest.raises(NotFoundError):
            await runtime.container_status(container_id)
    finally:
        await runtime.stop_pod_sandbox(sandbox_id)
        await runtime.remove_pod_sandbox(sandbox_id)
    assert await runtime.list_pod_sandbox() == []
    assert await runtime.list_containers() == []
