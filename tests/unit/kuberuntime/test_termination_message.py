"""Termination messages: the pure parts by table (CRI log lines, tails, the fallback rule, the per-pod budget), and
the reading over real files in a temporary directory (the message file, the CRI log, errors, the once-per-container
cache)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kl
from nodeagent.kuberuntime.actions import ContainerState, ContainerStatus, RuntimePodStatus
from nodeagent.kuberuntime.termination_message import (
    MAX_CONTAINER_MESSAGE_BYTES,
    LogLine,
    TerminationMessages,
    absolute_path,
    cap_message,
    create_message_file,
    instance_id,
    join_messages,
    log_tail_message,
    mount_host_path,
    parse_cri_log_line,
    pod_message_budget,
    read_termination_message,
    remove_pod_dirs,
    should_fall_back_to_logs,
    tail_lines,
    with_messages,
)
from pleg.status import ContainerRecord, PodStatus

T = b"2026-01-02T03:04:05.123456789Z"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (T + b" stdout F hello\n", LogLine("stdout", False, b"hello\n")),
        (T + b" stderr P part\n", LogLine("stderr", True, b"part")),  # a partial line loses its newline
        (T + b" stdout F \n", LogLine("stdout", False, b"\n")),  # an empty line
        (T + b" stdout F a b  c\n", LogLine("stdout", False, b"a b  c\n")),  # spaces in the content stay
        (T + b" stdout P:x more\n", LogLine("stdout", True, b"more")),  # tags after ':' are ignored
        (T + b" stdout F no newline", LogLine("stdout", False, b"no newline")),
        (b"2026-01-02T03:04:05+02:00 stdout F tz\n", LogLine("stdout", False, b"tz\n")),
        (b"2026-01-02T03:04:05Z stdout F whole\n", LogLine("stdout", False, b"whole\n")),
        (T + b" stdin F x\n", None),  # not a stream
        (b"yesterday stdout F x\n", None),  # not a time
        (T + b" stdout\n", None),  # no tag
        (b"", None),
        (b'{"log":"docker json\\n","stream":"stdout"}\n', None),
    ],
    ids=[
        "full",
        "partial",
        "empty-line",
        "spaces",
        "tag-with-more",
        "unterminated",
        "offset",
        "no-fraction",
        "bad-stream",
        "bad-time",
        "no-tag",
        "nothing",
        "docker-json",
    ],
)
def test_parse_cri_log_line(line: bytes, expected: LogLine | None) -> None:
    assert parse_cri_log_line(line) == expected


@pytest.mark.parametrize(
    ("data", "count", "expected"),
    [
        (b"a\nb\nc\n", 2, [b"b\n", b"c\n"]),
        (b"a\nb\nc\n", 5, [b"a\n", b"b\n", b"c\n"]),
        (b"a\nb\nc", 2, [b"a\n", b"b\n"]),  # an unterminated piece is not a line, and 2 lines were read
        (b"a\nb\nc", 3, [b"a\n", b"b\n", b"c"]),  # fewer lines than asked: it is read after them
        (b"a\r\nb\rc\n", 1, [b"b\rc\n"]),  # only \n ends a line
        (b"", 3, []),
        (b"a\n", 0, []),
    ],
    ids=["last-two", "fewer", "unterminated-dropped", "unterminated-read", "carriage-return", "empty", "zero"],
)
def test_tail_lines(data: bytes, count: int, expected: list[bytes]) -> None:
    assert tail_lines(data, count) == expected


def log(*entries: tuple[str, str, str]) -> list[bytes]:
    return [T + f" {stream} {tag} {content}\n".encode() for stream, tag, content in entries]


@pytest.mark.parametrize(
    ("lines", "max_bytes", "expected"),
    [
        (log(("stdout", "F", "one"), ("stderr", "F", "two")), 2048, "one\ntwo\n"),  # both streams, in order
        (log(("stdout", "P", "DO"), ("stdout", "P", "NE")), 2048, "DONE"),  # `echo -n DONE` as containerd writes it
        (log(("stdout", "P", "long "), ("stdout", "F", "line")), 2048, "long line\n"),
        (log(("stdout", "F", "0123456789")), 4, "789\n"),  # the last bytes are kept
        ([b"garbage\n", *log(("stdout", "F", "kept"))], 2048, "kept\n"),  # a line that does not parse is skipped
        ([], 2048, ""),
    ],
    ids=["streams", "partials", "partial-then-full", "cut-to-last-bytes", "skip-unparsable", "empty"],
)
def test_log_tail_message(lines: list[bytes], max_bytes: int, expected: str) -> None:
    assert log_tail_message(lines, max_bytes=max_bytes) == expected


def test_log_tail_message_cuts_a_character_as_upstream() -> None:
    # 2048 bytes from the end start inside "é" (2 bytes): its second byte alone becomes U+FFFD.
    lines = log(("stdout", "F", "é" + "x" * 2046))
    assert log_tail_message(lines) == "\ufffd" + "x" * 2046 + "\n"


@pytest.mark.parametrize(
    ("policy", "exit_code", "reason", "expected"),
    [
        ("FallbackToLogsOnError", 1, "Error", True),
        ("FallbackToLogsOnError", 137, "OOMKilled", True),
        ("FallbackToLogsOnError", 0, "Completed", False),  # only a failure falls back
        ("FallbackToLogsOnError", 128, "ContainerCannotRun", False),  # never ran: no logs
        ("File", 1, "Error", False),
        ("", 1, "Error", False),
    ],
)
def test_should_fall_back_to_logs(policy: str, exit_code: int, reason: str, expected: bool) -> None:
    assert should_fall_back_to_logs(policy, exit_code, reason) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/dev/termination-log", "/dev/termination-log"),
        ("tmp/x", "/tmp/x"),
        ("//tmp//x/", "/tmp/x"),  # Go's filepath.Clean, where Python would keep a leading "//"
        ("/tmp/../x", "/x"),
    ],
)
def test_absolute_path(path: str, expected: str) -> None:
    assert absolute_path(path) == expected


def test_mount_host_path() -> None:
    mounts = [
        api_pb2.Mount(host_path="/h/vol", container_path="/data"),
        api_pb2.Mount(host_path="/h/msg", container_path="/tmp/custom-log"),
    ]
    assert mount_host_path(mounts, "/tmp/custom-log") == "/h/msg"
    assert mount_host_path(mounts, "tmp//custom-log") == "/h/msg"
    assert mount_host_path(mounts, "/dev/termination-log") is None


def _pod(containers: int, init: int = 0, ephemeral: int = 0) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [{"name": f"c{i}"} for i in range(containers)],
            "initContainers": [{"name": f"i{i}"} for i in range(init)],
            "ephemeralContainers": [{"name": f"e{i}"} for i in range(ephemeral)],
        }
    }


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (_pod(1), 12288),
        (_pod(2), 6144),
        (_pod(2, init=1), 4096),
        (_pod(3, init=2, ephemeral=2), 12288 // 7),
        ({"spec": {}}, 12288),
    ],
    ids=["one", "two", "with-init", "with-ephemeral", "none"],
)
def test_pod_message_budget(pod: dict[str, Any], expected: int) -> None:
    assert pod_message_budget(pod) == expected


@pytest.mark.parametrize(
    ("message", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("0123456789", 4, "0123"),  # the start is kept
        ("aé", 2, "a\ufffd"),  # a character cut in two
        ("", 0, ""),
    ],
)
def test_cap_message(message: str, limit: int, expected: str) -> None:
    assert cap_message(message, limit) == expected


@pytest.mark.parametrize(
    ("runtime", "container", "expected"),
    [("", "", ""), ("", "bye", "bye"), ("OOM", "", "OOM"), ("OOM", "bye", "OOM: bye")],
)
def test_join_messages(runtime: str, container: str, expected: str) -> None:
    assert join_messages(runtime, container) == expected


def test_instance_id_is_eight_hex_digits() -> None:
    assert instance_id(lambda bits: 0xAB) == "000000ab"
    assert instance_id(lambda bits: 2**bits - 1) == "ffffffff"


# --- files -------------------------------------------------------------------------------------------------------


def test_create_message_file_and_remove_pod_dirs(tmp_path: Path) -> None:
    old_umask = os.umask(0o077)  # the file's mode must not depend on the agent's umask
    try:
        mount = create_message_file(str(tmp_path), "u-1", {"name": "app", "terminationMessagePath": "/tmp/custom-log"})
    finally:
        os.umask(old_umask)
    assert mount is not None
    host = Path(mount.host_path)
    assert host.parent == tmp_path / "pods" / "u-1" / "containers" / "app"
    assert len(host.name) == 8 and int(host.name, 16) >= 0
    assert mount.container_path == "/tmp/custom-log"
    assert stat.S_IMODE(host.stat().st_mode) == 0o666
    assert host.read_bytes() == b""
    second = create_message_file(str(tmp_path), "u-1", {"name": "app"})  # a new instance gets its own file
    assert second is not None and second.host_path != mount.host_path
    assert second.container_path == "/dev/termination-log"  # the API default

    (tmp_path / "pods" / "u-1" / "volumes").mkdir()  # something that is not ours stays, and so does the pod dir
    remove_pod_dirs(str(tmp_path), "u-1")
    assert not (tmp_path / "pods" / "u-1" / "containers").exists()
    assert (tmp_path / "pods" / "u-1" / "volumes").exists()
    (tmp_path / "pods" / "u-1" / "volumes").rmdir()
    remove_pod_dirs(str(tmp_path), "u-1")
    assert not (tmp_path / "pods" / "u-1").exists()
    remove_pod_dirs(str(tmp_path), "u-1")  # idempotent


def test_create_message_file_failure_is_none(tmp_path: Path) -> None:
    (tmp_path / "pods").write_text("a file where a directory should be")
    assert create_message_file(str(tmp_path), "u-1", {"name": "app"}) is None


def _status(
    tmp_path: Path,
    *,
    message: bytes | None = b"",
    log_lines: list[bytes] | None = None,
    policy: str = "File",
    exit_code: int = 1,
    reason: str = "Error",
    runtime_message: str = "",
    cid: str = "c1",
) -> api_pb2.ContainerStatus:
    host = tmp_path / f"msg-{cid}"
    if message is not None:
        host.write_bytes(message)
    log_path = tmp_path / f"{cid}.log"
    if log_lines is not None:
        log_path.write_bytes(b"".join(log_lines))
    return api_pb2.ContainerStatus(
        id=cid,
        state=api_pb2.CONTAINER_EXITED,
        exit_code=exit_code,
        reason=reason,
        message=runtime_message,
        log_path=str(log_path),
        mounts=[api_pb2.Mount(host_path=str(host), container_path="/dev/termination-log")],
        annotations={
            kl.TERMINATION_MESSAGE_PATH_ANNOTATION: "/dev/termination-log",
            kl.TERMINATION_MESSAGE_POLICY_ANNOTATION: policy,
        },
    )


LOG = log(("stdout", "F", "starting"), ("stderr", "P", "fa"), ("stderr", "P", "iled"))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"message": b"bye"}, "bye"),
        ({"message": b"bye", "runtime_message": "OOM"}, "OOM: bye"),
        ({"message": b"x" * 5000 + b"END"}, ("x" * 5000 + "END")[-MAX_CONTAINER_MESSAGE_BYTES:]),  # the last 4 KiB
        ({"message": b"", "log_lines": LOG}, ""),  # File policy: no fallback
        ({"message": b"", "log_lines": LOG, "policy": "FallbackToLogsOnError"}, "starting\nfailed"),
        ({"message": None, "log_lines": LOG, "policy": "FallbackToLogsOnError"}, "starting\nfailed"),  # no file
        ({"message": b"mine", "log_lines": LOG, "policy": "FallbackToLogsOnError"}, "mine"),  # the file wins
        (
            {"message": b"", "log_lines": LOG, "policy": "FallbackToLogsOnError", "exit_code": 0, "reason": ""},
            "",
        ),  # success: no fallback
        (
            {"message": b"", "log_lines": log(*[("stdout", "F", str(i)) for i in range(100)])},
            "",
        ),
        (
            {
                "message": b"",
                "log_lines": log(*[("stdout", "F", str(i)) for i in range(100)]),
                "policy": "FallbackToLogsOnError",
            },
            "".join(f"{i}\n" for i in range(20, 100)),  # the last 80 lines
        ),
        (
            {"message": b"", "log_lines": log(("stdout", "F", "y" * 3000)), "policy": "FallbackToLogsOnError"},
            "y" * 2047 + "\n",  # the last 2048 bytes
        ),
    ],
    ids=[
        "file",
        "after-runtime-message",
        "last-4KiB",
        "file-policy-empty",
        "fallback",
        "fallback-no-file",
        "file-wins",
        "success-no-fallback",
        "file-policy-long-log",
        "fallback-80-lines",
        "fallback-2KiB",
    ],
)
def test_read_termination_message(tmp_path: Path, kwargs: dict[str, Any], expected: str) -> None:
    assert read_termination_message(_status(tmp_path, **kwargs)) == expected


def test_read_termination_message_errors(tmp_path: Path) -> None:
    status = _status(tmp_path, message=None, policy="FallbackToLogsOnError")  # neither file nor log
    assert read_termination_message(status).startswith(
        f'Error on reading termination message from logs: failed to open log file "{status.log_path}": no such file'
    )
    unreadable = _status(tmp_path, message=None, cid="c2")
    Path(unreadable.mounts[0].host_path).mkdir()  # a directory cannot be read as the message
    assert read_termination_message(unreadable) == (
        f"Error on reading termination log {unreadable.mounts[0].host_path}: is a directory"
    )
    without_mount = api_pb2.ContainerStatus(id="c3", state=api_pb2.CONTAINER_EXITED, exit_code=1)
    assert read_termination_message(without_mount) == ""


def _pod_status(*records: tuple[str, api_pb2.ContainerState.ValueType]) -> PodStatus:
    return PodStatus(
        uid="u-1",
        containers=tuple(
            ContainerRecord("s1", api_pb2.ContainerStatus(id=cid, state=state, created_at=i))
            for i, (cid, state) in enumerate(records)
        ),
    )


def test_messages_are_read_once_per_exited_container() -> None:
    reads: list[str] = []

    def read(status: api_pb2.ContainerStatus) -> str:
        reads.append(status.id)
        return f"msg-{status.id}"

    cache = TerminationMessages(read)
    status = _pod_status(("a", api_pb2.CONTAINER_EXITED), ("b", api_pb2.CONTAINER_RUNNING))
    assert cache.messages(status) == {"a": "msg-a"}
    assert cache.messages(status) == {"a": "msg-a"}
    assert reads == ["a"]  # a running container is not read, an exited one once
    later = _pod_status(("a", api_pb2.CONTAINER_EXITED), ("b", api_pb2.CONTAINER_EXITED))
    assert cache.messages(later) == {"a": "msg-a", "b": "msg-b"}
    assert reads == ["a", "b"]
    cache.messages(_pod_status(("b", api_pb2.CONTAINER_EXITED)))  # "a" was removed: forgotten
    cache.messages(later)
    assert reads == ["a", "b", "a"]
    cache.forget("u-1")
    cache.messages(later)
    assert reads == ["a", "b", "a", "a", "b"]


def test_with_messages_replaces_only_known_containers() -> None:
    runtime = RuntimePodStatus(
        uid="u-1",
        containers=(
            ContainerStatus(id="a", name="app", state=ContainerState.EXITED, message="old"),
            ContainerStatus(id="b", name="app", state=ContainerState.RUNNING),
        ),
    )
    out = with_messages(runtime, {"a": "new"})
    assert [c.message for c in out.containers] == ["new", ""]
    assert out.containers[1] is runtime.containers[1]
