"""An in-process CRI ImageService: pulls take the behaviour's latency and store the reference; nothing is fetched.

As containerd: PullImage returns the image id (sha256:...); an absent image's ImageStatus has no image (no error);
a reference the behaviour calls unpullable fails with NotFound; ListImages ignores its filter; RemoveImage of an
absent image succeeds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc

from cri.errors import NotFoundError
from cri.fake.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from cri.fake.state import image_id, repo_digest
from cri.v1 import api_pb2

IMAGE_SIZE = 4 << 20
# Where the fake says images live: the eviction manager maps image filesystems to devices by this.
IMAGE_FS_MOUNTPOINT = "/"


def _normalise(reference: str) -> str:
    """`busybox` and `busybox:latest` are one image, as for containerd (docker.io defaults are not applied)."""
    if "@" in reference:
        return reference
    last = reference.rsplit("/", 1)[-1]
    return reference if ":" in last else f"{reference}:latest"


class FakeImageService:
    def __init__(self, *, behaviour: Behaviour = DEFAULT_BEHAVIOUR, now_ns: Callable[[], int] = time.time_ns) -> None:
        self.behaviour = behaviour
        self._now_ns = now_ns
        self.images: dict[str, api_pb2.Image] = {}
        self.pulls = 0

    def _find(self, reference: str) -> api_pb2.Image | None:
        image = self.images.get(_normalise(reference))
        if image is not None:
            return image
        for candidate in self.images.values():
            if reference in (candidate.id, candidate.id.removeprefix("sha256:")) or reference in candidate.repo_digests:
                return candidate
        return None

    async def resolve(self, reference: str) -> api_pb2.Image | None:
        return self._find(reference)

    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]:
        return list({image.id: image for image in self.images.values()}.values())

    async def image_status(
        self, image: api_pb2.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ImageStatusResponse:
        found = self._find(image.image)
        return api_pb2.ImageStatusResponse(image=found) if found is not None else api_pb2.ImageStatusResponse()

    async def pull_image(
        self,
        image: api_pb2.ImageSpec,
        auth: api_pb2.AuthConfig | None = None,
        sandbox_config: api_pb2.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        reference = _normalise(image.image)
        if self.behaviour.pull_latency:
            await asyncio.sleep(self.behaviour.pull_latency)
        if any(word in reference for word in self.behaviour.unpullable):
            raise NotFoundError(
                "/runtime.v1.ImageService/PullImage",
                grpc.StatusCode.NOT_FOUND,
                f'failed to pull and unpack image "{reference}": not found',
            )
        self.pulls += 1
        existing = self.images.get(reference)
        if existing is not None:
            return existing.id
        pulled = api_pb2.Image(
            id=image_id(reference),
            repo_tags=[reference] if "@" not in reference else [],
            repo_digests=[repo_digest(reference)],
            size=IMAGE_SIZE,
            spec=api_pb2.ImageSpec(image=reference),
        )
        self.images[reference] = pulled
        return pulled.id

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None:
        found = self._find(image.image)
        if found is None:
            return
        for reference in [r for r, i in self.images.items() if i.id == found.id]:
            del self.images[reference]

    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse:
        used = sum(image.size for image in {i.id: i for i in self.images.values()}.values())
        usage = api_pb2.FilesystemUsage(
            timestamp=self._now_ns(),
            fs_id=api_pb2.FilesystemIdentifier(mountpoint=IMAGE_FS_MOUNTPOINT),
            used_bytes=api_pb2.UInt64Value(value=used),
            inodes_used=api_pb2.UInt64Value(value=len(self.images)),
        )
        return api_pb2.ImageFsInfoResponse(image_filesystems=[usage], container_filesystems=[usage])
