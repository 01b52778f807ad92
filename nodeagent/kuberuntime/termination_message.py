"""Termination messages (upstream: kubelet_pods.go GenerateRunContainerOptions, kuberuntime_container.go makeMounts,
getTerminationMessage, readLastStringFromContainerLogs and convertToKubeContainerStatus; status_manager.go
normalizeStatus).

As upstream:

- Before each container instance is created, the agent makes an empty file
  `<rootDir>/pods/<uid>/containers/<name>/<8 random hex digits>` (directories 0750, the file 0666 whatever the
  umask, so a non-root container can write it) and bind-mounts it at the container's `terminationMessagePath`
  (default /dev/termination-log). A file that cannot be made is logged and the container runs without it.
- Once the container has exited, the message is read back through the CRI status's mounts (the mount whose
  container path is the annotated terminationMessagePath): the last 4096 bytes of the file.
- With `terminationMessagePolicy: FallbackToLogsOnError`, a container that failed (exit code not 0, and not
  `ContainerCannotRun`) and left the file empty or missing gets the end of its CRI log instead: the last 80 lines
  (`<time> <stream> <P|F> <content>`; a partial line's content is joined to the next without a newline), of which
  the last 2048 bytes are kept. Lines that do not parse are skipped.
- The message is appended to the runtime's own message for the container (after ": " when there is one).
- A pod's statuses share 12 KiB: every terminated state (and last state) keeps at most 12288 / (number of
  containers, init and ephemeral included) bytes of its message, cut at the end.

Reading is I/O, done once per exited container: `TerminationMessages` keeps what it read by container ID (per pod,
forgetting containers that are gone). Parsing the log, cutting and choosing are pure functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import random
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cri.v1 import api_pb2
from nodeagent.kuberuntime import actions as acts
from nodeagent.kuberuntime import labels as kubelabels
from pleg.status import PodStatus

log = logging.getLogger(__name__)

MAX_CONTAINER_MESSAGE_BYTES = 4 * 1024
MAX_POD_MESSAGE_BYTES = 12 * 1024
MAX_LOG_LINES = 80
MAX_LOG_BYTES = 2 * 1024
FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"
REASON_CONTAINER_CANNOT_RUN = "ContainerCannotRun"
POD_CONTAINER_DIR_MODE = 0o750
MESSAGE_FILE_MODE = 0o666
_LOG_BLOCK = 64 * 1024

# RFC 3339 with optional fractions, as containerd writes it (Go's time.RFC3339Nano).
_TIMESTAMP = re.compile(rb"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_STREAMS = frozenset({b"stdout", b"stderr"})


# --- where the files live --------------------------------------------------------------------------------------


def pod_dir(root_dir: str, uid: str) -> str:
    return posixpath.join(root_dir, "pods", uid)


def pod_containers_dir(root_dir: str, uid: str) -> str:
    return posixpath.join(pod_dir(root_dir, uid), "containers")


def pod_container_dir(root_dir: str, uid: str, container_name: str) -> str:
    """Upstream getPodContainerDir: one directory per container name; each instance adds its own file."""
    return posixpath.join(pod_containers_dir(root_dir, uid), container_name)


def absolute_path(path: str) -> str:
    """Upstream MakeAbsolutePath on Linux (filepath.Clean("/" + path)); "//x" becomes "/x", as in Go."""
    return posixpath.normpath("/" + path.lstrip("/"))


def message_path(container: Mapping[str, Any]) -> str:
    """The container's terminationMessagePath, with the API default for a pod that was not defaulted."""
    return str(container.get("terminationMessagePath") or kubelabels.DEFAULT_TERMINATION_MESSAGE_PATH)


def instance_id(bits: Callable[[int], int] = random.getrandbits) -> str:
    """Upstream makeUID: 8 hex digits, enough beside the pod UID and container name to tell instances apart."""
    return f"{bits(32):08x}"


def create_message_file(root_dir: str, uid: str, container: Mapping[str, Any]) -> api_pb2.Mount | None:
    """Make the instance's empty message file and the mount that puts it at the container's path; None (logged)
    when it cannot be made, as upstream, which then runs the container without it."""
    directory = pod_container_dir(root_dir, uid, str(container.get("name", "")))
    host_path = posixpath.join(directory, instance_id())
    try:
        os.makedirs(directory, mode=POD_CONTAINER_DIR_MODE, exist_ok=True)
        with open(host_path, "x"):
            pass
        # open() applies the umask; the container may run as any user, so the mode is set afterwards, as upstream.
        os.chmod(host_path, MESSAGE_FILE_MODE)
    except OSError as exc:
        log.error("termination message file not created path=%s error=%s", host_path, exc)
        return None
    return api_pb2.Mount(host_path=host_path, container_path=absolute_path(message_path(container)))


def remove_pod_dirs(root_dir: str, uid: str) -> None:
    """Remove the pod's message files, and the pod directory once nothing else (volumes, later) is left in it."""
    shutil.rmtree(pod_containers_dir(root_dir, uid), ignore_errors=True)
    with contextlib.suppress(OSError):  # missing, or not empty: whatever else lives there is not ours to remove
        os.rmdir(pod_dir(root_dir, uid))


# --- pure parts ------------------------------------------------------------------------------------------------


def should_fall_back_to_logs(policy: str, exit_code: int, reason: str) -> bool:
    """FallbackToLogsOnError applies to a failed container that ran: one that could not even start has no logs."""
    return policy == FALLBACK_TO_LOGS_ON_ERROR and exit_code != 0 and reason != REASON_CONTAINER_CANNOT_RUN


def mount_host_path(mounts: Iterable[api_pb2.Mount], container_path: str) -> str | None:
    """The host path mounted at `container_path`, if any (upstream compares absolute paths)."""
    wanted = absolute_path(container_path)
    return next((m.host_path for m in mounts if m.container_path == wanted), None)


@dataclass(frozen=True)
class LogLine:
    stream: str
    partial: bool
    content: bytes  # a full line keeps its newline, a partial one has none


def parse_cri_log_line(line: bytes) -> LogLine | None:
    """One line of a CRI log file, `<RFC3339Nano time> <stdout|stderr> <tag[:more tags]> <content>` (upstream
    parseCRILog); None when it does not parse."""
    parts = line.split(b" ", 3)
    if len(parts) < 4 or not _TIMESTAMP.match(parts[0]) or parts[1] not in _STREAMS:
        return None
    partial = parts[2].split(b":", 1)[0] == b"P"
    content = parts[3]
    if partial and content.endswith(b"\n"):
        content = content[:-1]
    return LogLine(parts[1].decode(), partial, content)


def tail_lines(data: bytes, count: int) -> list[bytes]:
    """The last `count` lines of `data`, each with its newline, as upstream's tail reads them: an unterminated last
    piece is not counted as a line, and is read after the lines only while fewer than `count` were read."""
    # Only "\n" ends a line: a carriage return is content (bytes.splitlines would split on it too).
    *complete, trailing = data.split(b"\n")
    lines = [line + b"\n" for line in complete[-count:]] if count > 0 else []
    if trailing and len(lines) < count:
        lines.append(trailing)
    return lines


def log_tail_message(lines: Iterable[bytes], *, max_bytes: int = MAX_LOG_BYTES) -> str:
    """Both streams' contents in order, joined (a partial line runs on into the next), of which the last
    `max_bytes` bytes are kept (upstream writes them into a circular buffer of that size)."""
    joined = b"".join(parsed.content for line in lines if (parsed := parse_cri_log_line(line)) is not None)
    return joined[-max_bytes:].decode(errors="replace")


def pod_message_budget(pod: Mapping[str, Any]) -> int:
    """The bytes each terminated state of the pod may keep of its message (upstream normalizeStatus)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    count = sum(len(spec.get(key) or ()) for key in ("containers", "initContainers", "ephemeralContainers"))
    return MAX_POD_MESSAGE_BYTES // count if count > 0 else MAX_POD_MESSAGE_BYTES


def cap_message(message: str, limit: int) -> str:
    """The first `limit` bytes of the message (upstream cuts the byte string; a cut character becomes U+FFFD)."""
    data = message.encode()
    if len(data) <= limit:
        return message
    return data[:limit].decode(errors="replace")


def join_messages(runtime_message: str, termination_message: str) -> str:
    """The runtime's message, then the container's after ": " (upstream convertToKubeContainerStatus)."""
    if not termination_message:
        return runtime_message
    if not runtime_message:
        return termination_message
    return f"{runtime_message}: {termination_message}"


# --- reading ---------------------------------------------------------------------------------------------------


def _error_text(exc: OSError) -> str:
    # Go's syscall errors are lower case ("no such file or directory").
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def read_file_tail(path: str, max_bytes: int = MAX_CONTAINER_MESSAGE_BYTES) -> bytes:
    """At most the last `max_bytes` bytes of the file (upstream tail.ReadAtMost); raises OSError."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - max_bytes))
        return f.read(max_bytes)


def read_log_tail(path: str, lines: int = MAX_LOG_LINES) -> list[bytes]:
    """The last `lines` lines of a log file, read backwards in blocks so a long log is not read whole."""
    with open(path, "rb") as f:
        position = f.seek(0, os.SEEK_END)
        data = b""
        while position > 0 and data.count(b"\n") <= lines:
            step = min(_LOG_BLOCK, position)
            position -= step
            f.seek(position)
            data = f.read(step) + data
    return tail_lines(data, lines)


def read_log_message(path: str) -> str:
    """The end of a container's CRI log as its message (upstream readLastStringFromContainerLogs)."""
    try:
        return log_tail_message(read_log_tail(path))
    except OSError as exc:
        return f'Error on reading termination message from logs: failed to open log file "{path}": {_error_text(exc)}'


def read_termination_message(status: api_pb2.ContainerStatus) -> str:
    """The message of an exited container: the runtime's, then its file's or (FallbackToLogsOnError) its log's."""
    annotations = status.annotations
    path = annotations.get(kubelabels.TERMINATION_MESSAGE_PATH_ANNOTATION, "")
    fallback = should_fall_back_to_logs(
        annotations.get(kubelabels.TERMINATION_MESSAGE_POLICY_ANNOTATION, ""), status.exit_code, status.reason
    )
    message, check_logs = "", fallback
    host_path = mount_host_path(status.mounts, path) if path else None
    if host_path is not None:
        try:
            data = read_file_tail(host_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            message, check_logs = f"Error on reading termination log {host_path}: {_error_text(exc)}", False
        else:
            message, check_logs = data.decode(errors="replace"), fallback and not data
    if check_logs:
        message = read_log_message(status.log_path)
    return join_messages(status.message, message)


class TerminationMessages:
    """What exited containers left as their message, read once per container and kept while the container exists."""

    def __init__(self, read: Callable[[api_pb2.ContainerStatus], str] = read_termination_message) -> None:
        self._read = read
        self._by_pod: dict[str, dict[str, str]] = {}

    def messages(self, status: PodStatus) -> dict[str, str]:
        """Container ID → message, for the pod's exited containers."""
        known = self._by_pod.get(status.uid, {})
        current: dict[str, str] = {}
        for record in status.containers:
            cri = record.status
            if cri.state != api_pb2.CONTAINER_EXITED:
                continue
            message = known.get(cri.id)
            if message is None:
                message = self._read(cri)
            current[cri.id] = message
        if current:
            self._by_pod[status.uid] = current
        else:
            self._by_pod.pop(status.uid, None)
        return current

    def forget(self, uid: str) -> None:
        self._by_pod.pop(uid, None)

    def apply(self, status: PodStatus, runtime_status: acts.RuntimePodStatus) -> acts.RuntimePodStatus:
        """`runtime_status` (converted from `status`) with each exited container's message."""
        messages = self.messages(status)
        if not messages:
            return runtime_status
        return with_messages(runtime_status, messages)


def with_messages(runtime_status: acts.RuntimePodStatus, messages: Mapping[str, str]) -> acts.RuntimePodStatus:
    containers: Sequence[acts.ContainerStatus] = [
        dataclasses.replace(c, message=messages[c.id]) if c.id in messages else c for c in runtime_status.containers
    ]
    return dataclasses.replace(runtime_status, containers=tuple(containers))
