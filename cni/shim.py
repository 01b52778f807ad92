"""The executable's first step on every exec: forward the call to the resident helper, or run it here.

containerd execs the plugin for every sandbox, so this module is what starts and runs each time. It runs under
`python -IS` (no site, no environment: ~8 ms to start here, against ~38 ms with site and its .pth files) and imports
only built-in modules (`sys`, `posix`, `_socket`): `socket`, `os` and `json` alone would add several milliseconds.

The request to the helper is the CNI_* variables and stdin, the reply the exit status and stdout:

    request: b"CNI1" + len(env block) as 4 bytes big-endian + env block (KEY=VALUE joined by NUL) + stdin, then EOF
    reply:   b"CNI1" + exit status as 1 byte + stdout, then EOF

When no helper takes the call (no socket, nobody listening, a helper that stopped accepting so that its queue is
full, or one that died before replying) the shim runs the plugin in this process, with the code and pyroute2 found
through the paths written into the executable at install time. A call no helper took is safe to do here. One a
helper died in the middle of is redone here: DEL and CHECK are idempotent; an ADD that had already made the
interface fails with "already exists" (the spec forbids taking it over), and the runtime then DELs the attachment
and retries the sandbox.

The socket's timeout is set before connect: a blocking connect to a listener whose queue is full waits until the
helper accepts, i.e. forever if it never does; with a timeout the kernel refuses at once (EAGAIN) and the call is
done here. A connection the kernel queued but that has no reply within REPLY_TIMEOUT gets error 11 (try again
later) rather than a second, concurrent attempt: the helper may still serve it.
"""

import _socket
import posix
import sys

MAGIC = b"CNI1"
REPLY_TIMEOUT = 240.0


def encode_request(env: dict[bytes, bytes], stdin: bytes) -> bytes:
    block = b"\0".join(key + b"=" + value for key, value in env.items())
    return MAGIC + len(block).to_bytes(4, "big") + block + stdin


def decode_request(data: bytes) -> tuple[dict[str, str], bytes]:
    if data[:4] != MAGIC or len(data) < 8:
        raise ValueError("not a nodeagent-bridge request")
    size = int.from_bytes(data[4:8], "big")
    block, stdin = data[8 : 8 + size], data[8 + size :]
    env = {}
    for item in block.split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            env[key.decode()] = value.decode()
    return env, stdin


def encode_reply(status: int, stdout: bytes) -> bytes:
    return MAGIC + bytes([status & 0xFF]) + stdout


def decode_reply(data: bytes) -> tuple[int, bytes] | None:
    """(status, stdout), or None for an empty or cut reply (the helper died)."""
    if len(data) < 5 or data[:4] != MAGIC:
        return None
    return data[4], data[5:]


def forward(path: str, request: bytes, timeout: float | None = None) -> tuple[int, bytes] | None:
    """The helper's reply; None when no helper took the call. Raises TimeoutError when one took it and went silent.

    `timeout` (REPLY_TIMEOUT when None) bounds every step, connect included.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(REPLY_TIMEOUT if timeout is None else timeout)
        try:
            sock.connect(path)
        except OSError:  # no socket, refused, or a full queue (EAGAIN; TimeoutError too): nobody took the call
            return None
        try:
            sock.sendall(request)
            sock.shutdown(_socket.SHUT_WR)
        except TimeoutError:
            raise
        except OSError:
            return None
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise
            except OSError:
                return None
            if not chunk:
                break
            chunks.append(chunk)
        return decode_reply(b"".join(chunks))
    finally:
        sock.close()


def _use_code(code_path: list[str]) -> None:
    for entry in reversed(code_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _timeout_error(stdin: bytes, path: str) -> bytes:
    import json  # the rare path may pay for json

    from cni.config import requested_version
    from cni.errors import CNIError, Code
    from cni.spec import LATEST_VERSION

    error = CNIError(
        Code.TRY_AGAIN_LATER,
        f"the nodeagent-bridge helper at {path} took the call but did not answer within {REPLY_TIMEOUT:g}s; "
        "it may still be serving it, so it was not redone here",
        details=f"operation: waiting for the helper's reply; timeout: {REPLY_TIMEOUT:g}s; socket: {path}",
    )
    return json.dumps(error.to_json(requested_version(stdin) or LATEST_VERSION)).encode() + b"\n"


def main(helper_socket: str | None, code_path: list[str]) -> None:
    """Entry point of the installed executable (see `cni.install`)."""
    if len(sys.argv) > 1:  # an operator's command, e.g. `nodeagent-bridge helper --socket PATH`
        _use_code(code_path)
        from cni.__main__ import command_line

        sys.exit(command_line(sys.argv[1:], default_socket=helper_socket))
    stdin = sys.stdin.buffer.read()
    env = {key: value for key, value in posix.environ.items() if key.startswith(b"CNI_")}
    if helper_socket:
        try:
            reply = forward(helper_socket, encode_request(env, stdin), REPLY_TIMEOUT)
        except TimeoutError:
            _use_code(code_path)
            _write(_timeout_error(stdin, helper_socket))
            sys.exit(1)
        if reply is not None:
            _write(reply[1])
            sys.exit(reply[0])
    _use_code(code_path)
    from cni.plugin import run_in_process

    sys.exit(run_in_process({k.decode(): v.decode() for k, v in env.items()}, stdin))
