"""Which plugin endpoints the upstream kubelet's gRPC (grpc-go) refuses before dialing, and with what words.

grpc-go parses every dial target with Go's net/url. A target without a scheme it knows is parsed again behind its
default scheme ("passthrough:///" + target for grpc.DialContext, as the device manager dials; "dns:///" + target for
grpc.NewClient, as the DRA manager's "unix:" + endpoint). A target that net/url cannot parse is refused at once with
net/url's error, e.g. `parse "passthrough:////var/lib/kubelet/device-plugins/x\\x00": net/url: invalid control
character in URL` (seen on the upstream kubelet v1.34.4). grpc's C core, under Python's grpc, reads the same
targets otherwise: it stops at a NUL and keeps a bad %-escape as it is, so it would dial where upstream refuses.
Both read the rest alike (checked: %41 is "A", "?" and "#" end the path), so only the refusals are written here.

Not covered: net/url's checks of an authority ("unix://host/..."), which no endpoint of a plugin directory has.
"""

from __future__ import annotations

from nodeagent.prober.probe import go_quote

_HEX = frozenset(b"0123456789abcdefABCDEF")


def _quote_bytes(data: bytes) -> str:
    """Go's %q of a string that may hold invalid UTF-8 (a cut %-escape): invalid bytes as \\xhh."""
    parts: list[str] = []
    i = 0
    while i < len(data):
        for size in (1, 2, 3, 4):
            try:
                parts.append(go_quote(data[i : i + size].decode())[1:-1])
            except UnicodeDecodeError:
                continue
            i += size
            break
        else:
            parts.append(f"\\x{data[i]:02x}")
            i += 1
    return '"' + "".join(parts) + '"'


def _escape_error(text: str) -> str | None:
    """net/url's unescape: the first bad %-escape as its EscapeError says it, or None."""
    data = text.encode()
    i = 0
    while i < len(data):
        if data[i] == ord("%"):
            if i + 2 >= len(data) or data[i + 1] not in _HEX or data[i + 2] not in _HEX:
                return "invalid URL escape " + _quote_bytes(data[i : i + 3])
            i += 3
        else:
            i += 1
    return None


def _parse_error(url: str) -> str | None:
    """net/url's parse() of a URL with a scheme (no fragment), without authority checks."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in url):
        return "net/url: invalid control character in URL"
    rest = url.partition(":")[2]
    rest = rest[:-1] if rest.endswith("?") and rest.count("?") == 1 else rest.partition("?")[0]
    if not rest.startswith("/"):
        return None  # opaque ("unix:relative/path"): taken as it is
    if rest.startswith("//"):
        slash = rest.find("/", 2)
        rest = rest[slash:] if slash >= 0 else ""
    return _escape_error(rest)


def url_parse_error(url: str) -> str | None:
    """Go's url.Parse(url) error as its Error() prints it (`parse "URL": why`), or None when it parses."""
    head, hashed, fragment = url.partition("#")
    problem = _parse_error(head)
    if problem is not None:
        return f"parse {go_quote(head)}: {problem}"
    if hashed and fragment:
        problem = _escape_error(fragment)
        if problem is not None:
            return f"parse {go_quote(url)}: {problem}"
    return None


def dial_context_error(target: str) -> str | None:
    """Why grpc.DialContext (default scheme passthrough) refuses `target`, a socket path; None: it dials."""
    return url_parse_error("passthrough:///" + target)


def new_client_error(target: str) -> str | None:
    """Why grpc.NewClient (default scheme dns) refuses `target`, e.g. "unix:" + an endpoint; None: it is made."""
    if url_parse_error(target) is None:
        return None
    return url_parse_error("dns:///" + target)
