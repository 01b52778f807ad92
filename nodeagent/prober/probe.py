"""What every probe handler shares (upstream pkg/probe): the outcome type, port resolution and message helpers.

A handler answers with a `ProbeOutcome`: SUCCESS, WARNING (success, but worth an event: a redirect to another host),
FAILURE (the container answered wrongly, or not in time) or UNKNOWN, plus the output that goes into the event. A
handler that could not probe at all (a named port the container does not declare, a runtime error) raises
`ProbeError`; the prober then retries and, failing that, throws the result away, as upstream does.

Messages keep upstream's wording (Go's error texts included), so events read as they do on any other node.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from nodeagent.version import DEFAULT_KUBERNETES_VERSION, probe_user_agent

# Upstream reads at most 10 KiB of a command's output or a response body.
MAX_OUTPUT_BYTES = 10 * 1024


# As upstream's "kube-probe/<major>.<minor>", of the Kubernetes release the node emulates (by default; the agent
# passes the configured one to the Prober).
USER_AGENT = probe_user_agent(DEFAULT_KUBERNETES_VERSION)


class Outcome(enum.Enum):
    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ProbeOutcome:
    result: Outcome
    output: str = ""


class ProbeError(Exception):
    """The probe could not run; the message is what the "probe errored" event says."""


def resolve_container_port(port: int | str, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports (upstream ResolveContainerPort)."""
    if isinstance(port, int):
        number = port
    else:
        found = next((p for p in container.get("ports") or () if p.get("name") == port), None)
        if found is not None:
            number = int(found.get("containerPort") or 0)
        else:
            # As upstream's last resort, an int stored as a string; its error text is Go's strconv.Atoi's.
            try:
                number = int(port, 10)
            except ValueError:
                raise ProbeError(f'strconv.Atoi: parsing "{port}": invalid syntax') from None
    if 0 < number < 65536:
        return number
    raise ProbeError(f"invalid port number: {number}")


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: an IPv6 address goes in brackets."""
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


def go_duration(seconds: float) -> str:
    """A duration as Go prints it in messages ("1s", "1m30s", "1.5s")."""
    if seconds < 60:
        return f"{seconds:g}s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{rest}s" if hours else f"{minutes}m{rest}s"


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """`text` as Go's %q (strconv.Quote) writes it: in double quotes, `"` and backslash escaped, printable characters
    as they are, the others as \\n-style escapes, \\xhh (ASCII controls), \\uhhhh or \\Uhhhhhhhh.

    json.dumps comes close but escapes non-ASCII letters and writes controls as \\u00hh. Python's printable set
    (no categories C and Z, except the space) is Go's unicode.IsPrint.
    """
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def truncate(data: bytes) -> str:
    return data[:MAX_OUTPUT_BYTES].decode(errors="replace")


def go_code_name(code: grpc.StatusCode | None) -> str:
    """A gRPC code as Go's codes.Code prints it ("DeadlineExceeded"), for messages in upstream's words."""
    if code is None:
        return "Unknown"
    return "".join(part.capitalize() for part in code.name.split("_"))


_ERRNO_TEXT = {
    errno.ECONNREFUSED: "connect: connection refused",
    errno.EHOSTUNREACH: "connect: no route to host",
    errno.ENETUNREACH: "connect: network is unreachable",
    errno.ECONNRESET: "connect: connection reset by peer",
    errno.ETIMEDOUT: "i/o timeout",
}


def dial_error_text(exc: BaseException) -> str:
    """Why a connection failed, in Go's words ("connect: connection refused"), from the first OSError with an errno
    in the exception's chain (libraries wrap it); the exception's own text otherwise."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return _ERRNO_TEXT.get(seen.errno, seen.strerror or str(seen))
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__
