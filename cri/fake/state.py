"""The fake runtime's records: sandboxes and containers as containerd keeps them, and their CRI views."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import secrets
from dataclasses import dataclass, field

from cri.v1 import api_pb2


@dataclass
class Sandbox:
    id: str
    config: api_pb2.PodSandboxConfig
    created_at: int
    ip: str
    runtime_handler: str = ""
    state: int = api_pb2.SANDBOX_READY
    # The list view last built (see `sandbox_view`).
    view: api_pb2.PodSandbox | None = field(default=None, repr=False, compare=False)


@dataclass
class Container:
    id: str
    sandbox_id: str
    config: api_pb2.ContainerConfig
    image_ref: str
    created_at: int
    log_path: str
    state: int = api_pb2.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    # Usage, from the pod's behaviour at start.
    cpu_millicores: int = 0
    memory_bytes: int = 0
    exit_timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    # The list view last built (see `container_view`).
    view: api_pb2.Container | None = field(default=None, repr=False, compare=False)


class Ids:
    """64-hex ids as containerd's: seeded by the fake's name and a random nonce, so that two fakes never share one,
    and neither do two lives of one (a fleet process started again after a crash makes new containers for the same
    pods, and the API must not see the old containers' ids come back, as it would not from containerd)."""

    def __init__(self, seed: str) -> None:
        self._seed = f"{seed}/{secrets.token_hex(8)}"
        self._count = itertools.count(1)

    def next(self) -> str:
        return hashlib.sha256(f"{self._seed}/{next(self._count)}".encode()).hexdigest()


def image_id(reference: str) -> str:
    """A stable image id for a reference's repository (tags of one repository share it: enough for a fake)."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


def repo_digest(reference: str) -> str:
    """`<repository>@sha256:...`: what containerd reports as a container's image_ref."""
    repository = reference.rsplit("@", 1)[0]
    last = repository.rsplit("/", 1)
    if ":" in last[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@{image_id(reference)}"


def sandbox_view(s: Sandbox) -> api_pb2.PodSandbox:
    """A fresh message, as from a real runtime, copied from the one kept while the state is the same: copying is
    a fifth of the cost of building it, and an emulated node lists every pod every second (PLEG) and every two
    (housekeeping). Only the state of a record's list view ever changes."""
    if s.view is None or s.view.state != s.state:
        s.view = api_pb2.PodSandbox(
            id=s.id,
            metadata=s.config.metadata,
            state=s.state,  # type: ignore[arg-type]
            created_at=s.created_at,
            labels=s.config.labels,
            annotations=s.config.annotations,
            runtime_handler=s.runtime_handler,
        )
    out = api_pb2.PodSandbox()
    out.CopyFrom(s.view)
    return out


def sandbox_status(s: Sandbox) -> api_pb2.PodSandboxStatus:
    status = api_pb2.PodSandboxStatus(
        id=s.id,
        metadata=s.config.metadata,
        state=s.state,  # type: ignore[arg-type]
        created_at=s.created_at,
        labels=s.config.labels,
        annotations=s.config.annotations,
        runtime_handler=s.runtime_handler,
    )
    if s.ip:
        status.network.ip = s.ip
    linux = s.config.linux.security_context.namespace_options
    status.linux.namespaces.options.CopyFrom(linux)
    return status


def container_view(c: Container) -> api_pb2.Container:
    """A fresh message copied from the one kept while the state is the same (as `sandbox_view`)."""
    if c.view is None or c.view.state != c.state:
        c.view = api_pb2.Container(
            id=c.id,
            pod_sandbox_id=c.sandbox_id,
            metadata=c.config.metadata,
            image=c.config.image,
            image_ref=c.image_ref,
            state=c.state,  # type: ignore[arg-type]
            created_at=c.created_at,
            labels=c.config.labels,
            annotations=c.config.annotations,
        )
    out = api_pb2.Container()
    out.CopyFrom(c.view)
    return out


def container_status(c: Container) -> api_pb2.ContainerStatus:
    return api_pb2.ContainerStatus(
        id=c.id,
        metadata=c.config.metadata,
        state=c.state,  # type: ignore[arg-type]
        created_at=c.created_at,
        started_at=c.started_at,
        finished_at=c.finished_at,
        exit_code=c.exit_code,
        image=c.config.image,
        image_ref=c.image_ref,
        reason=c.reason,
        message=c.message,
        labels=c.config.labels,
        annotations=c.config.annotations,
        mounts=c.config.mounts,
        log_path=c.log_path,
        resources=api_pb2.ContainerResources(linux=c.config.linux.resources),
    )
