"""The resident helper: serves the shim's calls over a unix socket with pyroute2 already imported.

Importing pyroute2 takes ~170 ms here, so a process that outlives the calls does the netlink work; the shim that
containerd execs only forwards. Each call gets its own named thread (network namespaces are per thread, see
`cni.netlink`), and every reply comes from `cni.plugin.execute`, exactly as the in-process fallback would print it.

The socket is created 0600: whoever can talk to it can change the host's network. SIGTERM stops accepting, lets the
calls in flight finish (up to SHUTDOWN_GRACE), removes the socket and exits; a call that arrives meanwhile finds no
helper and the shim does it in process.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path
from types import FrameType

from cni.netlink import Netlink  # imported here, once: this is what the helper exists for
from cni.plugin import NetworkFactory, execute
from cni.shim import decode_request, encode_reply

log = logging.getLogger("cni.helper")

SHUTDOWN_GRACE = 30.0
REQUEST_READ_TIMEOUT = 30.0
MAX_REQUEST = 4 * 1024 * 1024
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL


class HelperError(RuntimeError):
    """The helper cannot start (socket path in use by a live helper, too long, not creatable)."""


def _live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind(path: Path) -> socket.socket:
    """A listening socket at `path` (0600), replacing a stale one; HelperError if a live helper holds it."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise HelperError(f"helper socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    if path.exists() or path.is_symlink():
        if _live(path):
            raise HelperError(f"another helper already listens on {path}")
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise HelperError(f"{path} exists and is not a socket")
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(str(path))
    except OSError as exc:
        listener.close()
        raise HelperError(f"cannot listen on {path}: {exc.strerror}") from exc
    finally:
        os.umask(old_umask)
    listener.listen(256)
    return listener


class Helper:
    def __init__(self, path: Path, *, network_factory: NetworkFactory = Netlink) -> None:
        self.path = path
        self._network_factory = network_factory
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.served = 0

    def start(self) -> None:
        self._listener = bind(self.path)
        self._listener.settimeout(0.2)  # the accept loop looks at the stop flag this often
        log.info("cni helper listening socket=%s pid=%d", self.path, os.getpid())

    def stop(self) -> None:
        self._stop.set()

    def serve_forever(self) -> None:
        listener = self._listener
        if listener is None:
            raise HelperError("start() first")
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError as exc:
                    if self._stop.is_set():
                        break
                    log.warning("cni helper accept failed error=%r", exc)
                    time.sleep(0.05)
                    continue
                thread = threading.Thread(
                    target=self._handle, args=(conn,), name=f"cni-request-{next(self._ids)}", daemon=True
                )
                with self._lock:
                    self._threads.add(thread)
                thread.start()
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._drain()

    def _drain(self) -> None:
        deadline = time.monotonic() + SHUTDOWN_GRACE
        with self._lock:
            pending = list(self._threads)
        for thread in pending:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in pending if t.is_alive()]
        if left:
            log.warning("cni helper stopped with calls in flight threads=%s", ",".join(left))
        log.info("cni helper stopped served=%d", self.served)

    def _handle(self, conn: socket.socket) -> None:
        started = time.monotonic()
        env: dict[str, str] = {}
        status = -1
        try:
            conn.settimeout(REQUEST_READ_TIMEOUT)
            chunks, size = [], 0
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_REQUEST:
                    raise ValueError(f"request larger than {MAX_REQUEST} bytes")
                chunks.append(chunk)
            if not chunks:  # a readiness probe: connected and closed
                return
            env, stdin = decode_request(b"".join(chunks))
            reply = execute(env, stdin, self._network_factory)
            status = reply.status
            conn.settimeout(None)
            conn.sendall(encode_reply(reply.status, reply.stdout))
        except Exception as exc:  # one bad call must not take the helper down; the shim then runs it itself
            log.warning("cni helper request failed error=%r", exc)
        finally:
            conn.close()
            with self._lock:
                self._threads.discard(threading.current_thread())
            if env or status != -1:
                self._finished(env, status, started)

    def _finished(self, env: dict[str, str], status: int, started: float) -> None:
        with self._lock:
            self.served += 1
        log.info(
            "cni request command=%s container=%s ifname=%s status=%d duration_ms=%.1f",
            env.get("CNI_COMMAND", "-"),
            env.get("CNI_CONTAINERID", "-")[:12],
            env.get("CNI_IFNAME", "-"),
            status,
            (time.monotonic() - started) * 1000,
        )


def run(path: Path) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s level=%(levelname)s logger=%(name)s thread=%(threadName)s %(message)s"
    )
    helper = Helper(path)
    try:
        helper.start()
    except HelperError as exc:
        log.error("cni helper cannot start error=%s", exc)
        return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("cni helper stopping signal=%s", signal.Signals(signum).name)
        helper.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    helper.serve_forever()
    return 0
