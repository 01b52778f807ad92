"""An in-memory runtime with the CRI calls the garbage collectors make (their `ImageLister`, `ContainerLister` and
`ContainerRuntime` protocols): images, containers and sandboxes as the tests set them, removals recorded, and
failures injected per object id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc

from cri.errors import NotFoundError, UnknownCRIError
from cri.v1 import api_pb2

UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"
S = 1_000_000_000  # ns


def image(id_: str, size: int, *, tags: tuple[str, ...] = (), pinned: bool = False) -> api_pb2.Image:
    return api_pb2.Image(id=id_, size=size, repo_tags=list(tags), pinned=pinned)


def container(
    id_: str, uid: str, name: str, *, created: int, state: int = api_pb2.CONTAINER_EXITED, sandbox: str = "s1",
    image_ref: str = "sha256:busybox", attempt: int = 0,
) -> api_pb2.Container:  # fmt: skip
    return api_pb2.Container(
        id=id_,
        pod_sandbox_id=sandbox,
        metadata=api_pb2.ContainerMetadata(name=name, attempt=attempt),
        image_ref=image_ref,
        state=state,  # type: ignore[arg-type]
        created_at=created * S,
        labels={UID: uid, CONTAINER_NAME: name},
    )


def sandbox(id_: str, uid: str, *, created: int, ready: bool = False) -> api_pb2.PodSandbox:
    return api_pb2.PodSandbox(
        id=id_,
        metadata=api_pb2.PodSandboxMetadata(uid=uid),
        state=api_pb2.SANDBOX_READY if ready else api_pb2.SANDBOX_NOTREADY,
        created_at=created * S,
        labels={UID: uid},
    )


@dataclass
class FakeRuntime:
    images: dict[str, api_pb2.Image] = field(default_factory=dict)
    containers: dict[str, api_pb2.Container] = field(default_factory=dict)
    sandboxes: dict[str, api_pb2.PodSandbox] = field(default_factory=dict)
    log_paths: dict[str, str] = field(default_factory=dict)
    sandbox_image: str = ""
    removed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    fail_remove: set[str] = field(default_factory=set)
    fail_list: bool = False

    def add(self, *objects: api_pb2.Image | api_pb2.Container | api_pb2.PodSandbox) -> FakeRuntime:
        for o in objects:
            if isinstance(o, api_pb2.Image):
                self.images[o.id] = o
            elif isinstance(o, api_pb2.Container):
                self.containers[o.id] = o
            else:
                self.sandboxes[o.id] = o
        return self

    def _listing(self) -> None:
        if self.fail_list:
            raise UnknownCRIError("List", grpc.StatusCode.UNKNOWN, "runtime is down")

    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]:
        self._listing()
        return list(self.images.values())

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None:
        self._remove(image.image, self.images)

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]:
        self._listing()
        return list(self.containers.values())

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        self._listing()
        return list(self.sandboxes.values())

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse:
        info = {"config": json.dumps({"sandboxImage": self.sandbox_image})} if verbose and self.sandbox_image else {}
        return api_pb2.StatusResponse(info=info)

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        if container_id not in self.containers:
            raise NotFoundError("ContainerStatus", grpc.StatusCode.NOT_FOUND, f"container {container_id} not found")
        status = api_pb2.ContainerStatus(id=container_id, log_path=self.log_paths.get(container_id, ""))
        return api_pb2.ContainerStatusResponse(status=status)

    async def stop_container(self, container_id: str, timeout: int) -> None:
        self.stopped.append(container_id)

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None:
        self._remove(container_id, self.containers)

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        self.stopped.append(pod_sandbox_id)

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        self._remove(pod_sandbox_id, self.sandboxes)

    def _remove(self, id_: str, where: dict[str, Any]) -> None:
        if id_ in self.fail_remove:
            raise UnknownCRIError("Remove", grpc.StatusCode.UNKNOWN, f"{id_} is busy")
        if where.pop(id_, None) is not None:
            self.removed.append(id_)
