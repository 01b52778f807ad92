"""The installer's pieces for vanilla BusyBox and nnp: the `.config` edit, the manifest.go tag check and the
verified download (against a loopback HTTP server; the build itself runs in `nodeagent testbed install`)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.testbed import install, versions


@pytest.mark.parametrize(
    ("config", "values", "expected"),
    [
        pytest.param(
            "CONFIG_A=y\n# CONFIG_STATIC is not set\nCONFIG_B=y\n",
            {"CONFIG_STATIC": "y"},
            "CONFIG_A=y\nCONFIG_STATIC=y\nCONFIG_B=y\n",
            id="not-set-line",
        ),
        pytest.param("CONFIG_STATIC=n\n", {"CONFIG_STATIC": "y"}, "CONFIG_STATIC=y\n", id="set-line"),
        pytest.param("CONFIG_A=y\n", {"CONFIG_STATIC": "y"}, "CONFIG_A=y\nCONFIG_STATIC=y\n", id="appended"),
        pytest.param(
            "# CONFIG_STATIC_LIBGCC is not set\nCONFIG_STATICX=y\n",
            {"CONFIG_STATIC": "y"},
            "# CONFIG_STATIC_LIBGCC is not set\nCONFIG_STATICX=y\nCONFIG_STATIC=y\n",
            id="prefix-is-not-the-symbol",
        ),
        pytest.param(
            'CONFIG_X="a b"\n# comment\n', {"CONFIG_X": '"c"'}, 'CONFIG_X="c"\n# comment\n', id="string-kept-lines"
        ),
    ],
)
def test_set_kconfig(config: str, values: dict[str, str], expected: str) -> None:
    assert install.set_kconfig(config, values) == expected


@pytest.mark.parametrize(
    ("config", "missing"),
    [
        ("CONFIG_STATIC=y\n", []),
        ("# CONFIG_STATIC is not set\n", ["CONFIG_STATIC=y"]),
        ("CONFIG_STATIC=yes\n", ["CONFIG_STATIC=y"]),
    ],
)
def test_kconfig_has(config: str, missing: list[str]) -> None:
    assert install.kconfig_has(config, install.BUSYBOX_CONFIG) == missing


MANIFEST_GO = """
	configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-1"}
	configs[Nonewprivs] = Config{list.PromoterE2eRegistry, "nonewprivs", "1.3"}
"""


def test_check_manifest_tags_accepts_the_testbeds_tags() -> None:
    install.check_manifest_tags(
        MANIFEST_GO, {"nonewprivs": versions.NONEWPRIVS_VERSION, "busybox": versions.E2E_BUSYBOX_TAG}
    )


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ({"busybox": "1.36.1-1"}, r"busybox 1\.37\.0-1 \(the testbed pushes 1\.36\.1-1\): update versions\.py"),
        ({"nonewprivs": "1.4", "busybox": "1.37.0-1"}, r"tags nonewprivs 1\.3 \(the testbed pushes 1\.4\)"),
        ({"nginx": "1.14-4"}, r"nginx None"),
    ],
)
def test_check_manifest_tags_refuses_another_tag(expected: dict[str, str], message: str) -> None:
    with pytest.raises(install.InstallError, match=message):
        install.check_manifest_tags(MANIFEST_GO, expected)


class _Server:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                if self.path != "/busybox.tar.bz2":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server(b"the release tarball")
    thread = threading.Thread(target=running.httpd.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.httpd.shutdown()
        running.httpd.server_close()
        thread.join(timeout=5)


def test_fetch_verified_downloads_once_and_reuses_a_good_file(server: _Server, tmp_path: Path) -> None:
    digest = hashlib.sha256(server.body).hexdigest()
    dest = tmp_path / "downloads" / "busybox.tar.bz2"
    assert install.fetch_verified(f"{server.url}/busybox.tar.bz2", dest, digest) == dest
    assert dest.read_bytes() == server.body
    assert install.fetch_verified(f"{server.url}/busybox.tar.bz2", dest, digest) == dest
    assert server.requests == 1
    dest.write_bytes(b"truncated")  # a file of another digest is fetched again
    install.fetch_verified(f"{server.url}/busybox.tar.bz2", dest, digest)
    assert dest.read_bytes() == server.body
    assert server.requests == 2


def test_fetch_verified_refuses_another_digest_and_leaves_nothing(server: _Server, tmp_path: Path) -> None:
    dest = tmp_path / "busybox.tar.bz2"
    with pytest.raises(install.InstallError, match=f"sha256 {hashlib.sha256(server.body).hexdigest()}, expected 00"):
        install.fetch_verified(f"{server.url}/busybox.tar.bz2", dest, "00" * 32)
    assert list(tmp_path.iterdir()) == []


def test_fetch_verified_maps_http_errors(server: _Server, tmp_path: Path) -> None:
    with pytest.raises(install.InstallError, match=r"download of .*/missing failed: .*404"):
        install.fetch_verified(f"{server.url}/missing", tmp_path / "x", "00" * 32)
    assert list(tmp_path.iterdir()) == []


def test_the_pinned_source_is_debians_copy_of_the_release() -> None:
    assert versions.BUSYBOX_SOURCE_URL.endswith(f"/busybox_{versions.BUSYBOX_VERSION}.orig.tar.bz2")
    assert versions.busybox_path().parent.name == f"busybox-{versions.BUSYBOX_VERSION}"
