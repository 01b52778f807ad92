"""/logs/: the node's log directory as upstream serves it (Go's http.FileServer under /logs/), found hostile (issue 34).

- A path with an embedded NUL (`/logs/..%00/etc/shadow`) made the path resolution raise and the request end in a 500;
  upstream answers 404.
- The directory listing wrote file names into the HTML as they are; Go's file server URL-escapes the link and
  HTML-escapes the text. A pod with a hostPath on the log directory chooses file names, and an admin reads the page
  through `nodes/N/proxy/logs/`.

The expected listing below is what Go 1.26's http.FileServer wrote for the same directory (the Go the testbed builds
the upstream kubelet with), byte for byte.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
import pytest_asyncio

from nodeagent.server.http import HTTPServer
from nodeagent.server.logs import (
    NodeLogNotFound,
    directory_listing,
    go_html_escape,
    go_path_href,
    node_log_target,
)
from nodeagent.server.server import KubeletServer, ServerHost, StreamingRuntime

NAMES = [
    "a<b>.log",
    "q?x#y",
    "sp ace",
    "&amp",
    "it's\"q",
    "c:olon",
    "pct%41",
    "a-b",
    "tab\tx",
    "ü.log",
    "new\nline",
]

# Go 1.26 net/http.FileServer's listing of NAMES + b"\xff.log", the directories "a" and "sub", and "linkdir" (a
# symlink to "sub": a DirEntry that is not a directory, so no slash).
GO_LISTING = (
    b"<!doctype html>\n"
    b'<meta name="viewport" content="width=device-width">\n'
    b"<pre>\n"
    b'<a href="&amp">&amp;amp</a>\n'
    b'<a href="a/">a/</a>\n'
    b'<a href="a-b">a-b</a>\n'
    b'<a href="a%3Cb%3E.log">a&lt;b&gt;.log</a>\n'
    b'<a href="./c:olon">c:olon</a>\n'
    b'<a href="it%27s%22q">it&#39;s&#34;q</a>\n'
    b'<a href="linkdir">linkdir</a>\n'
    b'<a href="new%0Aline">new\nline</a>\n'
    b'<a href="pct%2541">pct%41</a>\n'
    b'<a href="q%3Fx%23y">q?x#y</a>\n'
    b'<a href="sp%20ace">sp ace</a>\n'
    b'<a href="sub/">sub/</a>\n'
    b'<a href="tab%09x">tab\tx</a>\n'
    b'<a href="%C3%BC.log">\xc3\xbc.log</a>\n'
    b'<a href="%FF.log">\xff.log</a>\n'
    b"</pre>\n"
)


def log_dir(root: Path) -> Path:
    for name in NAMES:
        (root / name).write_text("x\n")
    (root / os.fsdecode(b"\xff.log")).write_text("x\n")
    (root / "a").mkdir()
    (root / "sub").mkdir()
    (root / "linkdir").symlink_to("sub")
    return root


def test_the_listing_is_gos_byte_for_byte(tmp_path: Path) -> None:
    target, listing = node_log_target(str(log_dir(tmp_path)), "/")
    assert target == tmp_path.resolve()
    assert listing == GO_LISTING


@pytest.mark.parametrize(
    ("name", "href", "text"),
    [
        (b"plain.log", b"plain.log", b"plain.log"),
        (b"<script>alert(1)<", b"%3Cscript%3Ealert%281%29%3C", b"&lt;script&gt;alert(1)&lt;"),
        (b'x" onmouseover="y', b"x%22%20onmouseover=%22y", b"x&#34; onmouseover=&#34;y"),
        (b"'single'", b"%27single%27", b"&#39;single&#39;"),
        (b"a&b", b"a&b", b"a&amp;b"),
        (b"$+,;=@-._~", b"$+,;=@-._~", b"$+,;=@-._~"),
        (b"dir/", b"dir/", b"dir/"),
        (b"c:x", b"./c:x", b"c:x"),
        (b"100%", b"100%25", b"100%"),
        (b"\xe2\x80\xae.log", b"%E2%80%AE.log", b"\xe2\x80\xae.log"),
    ],
)
def test_names_are_escaped_as_go_does(name: bytes, href: bytes, text: bytes) -> None:
    assert go_path_href(name) == href
    assert go_html_escape(name) == text
    assert directory_listing([(name, False)]).splitlines()[3] == b'<a href="' + href + b'">' + text + b"</a>"


@pytest.mark.parametrize(
    "rest",
    [
        "/..\x00/etc/shadow",
        "/a\x00b",
        "/\x00",
        "/../../etc/shadow",
        "/..",
        "/nope",
        "/a-b/x",  # below a file
        "/escape",  # a symlink out of the directory
    ],
)
def test_paths_that_name_nothing_under_the_directory(tmp_path: Path, rest: str) -> None:
    log_dir(tmp_path)
    (tmp_path / "escape").symlink_to("/etc")
    with pytest.raises(NodeLogNotFound):
        node_log_target(str(tmp_path), rest)


def test_a_file_and_a_subdirectory(tmp_path: Path) -> None:
    log_dir(tmp_path)
    assert node_log_target(str(tmp_path), "/a-b") == (tmp_path.resolve() / "a-b", None)
    (tmp_path / "sub" / "<b>").write_text("x\n")
    assert node_log_target(str(tmp_path), "/sub/")[1] == directory_listing([(b"<b>", False)])


# --- over HTTP ----------------------------------------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def port(tmp_path: Path) -> AsyncIterator[int]:
    log_dir(tmp_path)
    # /logs/ uses neither the host nor the runtime.
    kubelet = KubeletServer(
        cast(ServerHost, object()), cast(StreamingRuntime, object()), node_name="n1", node_log_dir=str(tmp_path)
    )
    server = HTTPServer(kubelet.handle)
    bound = await server.listen("127.0.0.1", 0)
    try:
        yield bound
    finally:
        await server.close()


async def get(port: int, path: str) -> tuple[int, bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head.lower(), body


@pytest.mark.parametrize("path", ["/logs/..%00/etc/shadow", "/logs/%00", "/logs/a%00b", "/logs/sub/..%00"])
async def test_a_nul_in_the_path_is_a_404(port: int, path: str) -> None:
    status, _, body = await get(port, path)
    assert (status, body) == (404, b"404 page not found\n")


async def test_the_listing_over_http(port: int) -> None:
    status, head, body = await get(port, "/logs/")
    assert status == 200
    assert b"content-type: text/html; charset=utf-8" in head
    assert body == GO_LISTING


async def test_a_file_over_http(port: int) -> None:
    status, _, body = await get(port, "/logs/a-b")
    assert status == 200 and body.endswith(b"x\n\r\n0\r\n\r\n")  # chunked
    assert (await get(port, "/logs/../../etc/passwd"))[0] == 404


async def test_a_name_too_long_is_gos_500(port: int) -> None:
    # Go's file server: an error that is neither "not exist" nor "permission" (ENAMETOOLONG) is a 500.
    status, _, body = await get(port, "/logs/" + "x" * 300)
    assert (status, body) == (500, b"500 Internal Server Error\n")
