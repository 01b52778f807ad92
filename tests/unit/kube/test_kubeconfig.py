"""Kubeconfig files, in the data and the file forms, into credentials and a TLS context that really handshakes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from nodeagent import __version__
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiUnavailable, KubeconfigError
from nodeagent.kube.kubeconfig import ClusterCredentials, load_kubeconfig, ssl_context
from nodeagent.testbed.kubeconfig import write_kubeconfig
from nodeagent.testbed.pki import CertificateAuthority, CertPair

NODE = "system:node:worker-1"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: CertificateAuthority
    client: CertPair
    server: CertPair


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    ca = CertificateAuthority.create(directory, "test-ca")
    client = ca.issue(directory, "node", common_name=NODE, organizations=("system:nodes",), client=True)
    server = ca.issue(directory, "apiserver", common_name="kube-apiserver", server=True, ip_addresses=("127.0.0.1",))
    return Pki(directory, ca, client, server)


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _doc(cluster: dict[str, Any], user: dict[str, Any], **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    doc.update(top)
    return doc


def test_data_form_as_the_testbed_writes_it(tmp_path: Path, pki: Pki) -> None:
    path = tmp_path / "node.kubeconfig"
    write_kubeconfig(path, server="https://127.0.0.1:6443/", ca=pki.ca.pair.cert, client=pki.client, user=NODE)
    creds = load_kubeconfig(path)
    assert creds.server == "https://127.0.0.1:6443"
    assert creds.ca_pem == pki.ca.pair.cert.read_bytes()
    assert creds.client_cert_pem == pki.client.cert.read_bytes()
    assert creds.client_key_pem == pki.client.key.read_bytes()
    assert (creds.token, creds.token_file, creds.insecure_skip_tls_verify) == (None, None, False)
    assert (creds.context, creds.user) == ("nodeagent", NODE)
    assert "PRIVATE KEY" not in repr(creds)


def test_file_form_resolves_paths_relative_to_the_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    path = _write(
        tmp_path / "kubeconfig",
        _doc(
            {"server": "https://k:6443", "certificate-authority": "pki/ca.crt"},
            {"client-certificate": "pki/node.crt", "client-key": str(pki.client.key)},
        ),
    )
    creds = load_kubeconfig(path)
    assert creds.ca_pem == pki.ca.pair.cert.read_bytes()
    assert creds.client_cert_pem == pki.client.cert.read_bytes()
    assert creds.client_key_pem == pki.client.key.read_bytes()


def test_data_wins_over_file(tmp_path: Path, pki: Pki) -> None:
    ca_data = base64.b64encode(pki.ca.pair.cert.read_bytes()).decode()
    path = _write(
        tmp_path / "kubeconfig",
        _doc({"server": "https://k", "certificate-authority-data": ca_data, "certificate-authority": "missing"}, {}),
    )
    assert load_kubeconfig(path).ca_pem == pki.ca.pair.cert.read_bytes()


@pytest.mark.parametrize(
    ("user", "token", "token_file"),
    [
        ({"token": "abc"}, "abc", None),
        ({"tokenFile": "token"}, None, "token"),
        ({"token": "abc", "tokenFile": "token"}, "abc", "token"),
        ({}, None, None),
    ],
)
def test_tokens(tmp_path: Path, user: dict[str, str], token: str | None, token_file: str | None) -> None:
    (tmp_path / "token").write_text("from-file\n")
    creds = load_kubeconfig(_write(tmp_path / "kubeconfig", _doc({"server": "https://k"}, user)))
    assert creds.token == token
    assert creds.token_file == (tmp_path / token_file if token_file else None)


def test_named_context_and_anonymous_user(tmp_path: Path) -> None:
    doc = _doc({"server": "https://k"}, {"token": "t"})
    doc["clusters"].append({"name": "other", "cluster": {"server": "https://other", "insecure-skip-tls-verify": True}})
    doc["contexts"].append({"name": "anon", "context": {"cluster": "other"}})
    creds = load_kubeconfig(_write(tmp_path / "kubeconfig", doc), context="anon")
    assert (creds.server, creds.insecure_skip_tls_verify, creds.token, creds.user) == ("https://other", True, None, "")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_doc({"server": "https://k"}, {}, **{"current-context": ""}), "no context given and no current-context set"),
        (_doc({"server": "https://k"}, {}, **{"current-context": "nope"}), "no context named 'nope' (known: ctx)"),
        (
            _doc({"server": "https://k"}, {}, contexts=[{"name": "ctx", "context": {"cluster": "x", "user": "u"}}]),
            "no cluster named 'x' (known: c)",
        ),
        (
            _doc({"server": "https://k"}, {}, contexts=[{"name": "ctx", "context": {"cluster": "c", "user": "y"}}]),
            "no user named 'y' (known: u)",
        ),
        (
            _doc({"server": "https://k"}, {}, contexts=[{"name": "ctx", "context": {}}]),
            "context 'ctx' names no cluster",
        ),
        (_doc({}, {}), "cluster 'c' has no server"),
        (_doc({"server": "https://k", "certificate-authority": "nope.crt"}, {}), "certificate-authority"),
        (
            _doc({"server": "https://k", "certificate-authority-data": "%%%"}, {}),
            "certificate-authority-data is not valid",
        ),
        (
            _doc({"server": "https://k"}, {"client-certificate": "nope.crt", "client-key": "k"}),
            "nope.crt cannot be read",
        ),
        (_doc({"server": "https://k"}, {"client-certificate-data": "QQ=="}), "without a key"),
        (
            _doc({"server": "https://k", "insecure-skip-tls-verify": True, "certificate-authority-data": "QQ=="}, {}),
            "together with insecure-skip-tls-verify",
        ),
        (_doc({"server": "https://k"}, {"exec": {"command": "aws"}}), "uses exec, which nodeagent does not support"),
        (_doc({"server": "https://k"}, {"tokenFile": "nope"}), "token file"),
        (
            {"clusters": "x", "current-context": "ctx", "contexts": [{"name": "ctx", "context": {"cluster": "c"}}]},
            "clusters is not a list",
        ),
    ],
)
def test_unusable_kubeconfigs_say_why(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    path = _write(tmp_path / "kubeconfig", doc)
    with pytest.raises(KubeconfigError) as caught:
        load_kubeconfig(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot be read"), ("a: [b", "not valid YAML"), ("- a\n- b\n", "is not a mapping")],
)
def test_unreadable_files(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KubeconfigError, match=message):
        load_kubeconfig(path)


def test_empty_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(KubeconfigError, match="is empty"):
        load_kubeconfig(_write(tmp_path / "kubeconfig", _doc({"server": "https://k"}, {"tokenFile": "token"})))


def test_ssl_context_loads_client_pair_from_private_files_removed_after(
    tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[tuple[int, int]] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: Any, keyfile: Any = None, password: Any = None) -> None:
        seen.append((os.stat(certfile).st_mode & 0o777, os.stat(keyfile).st_mode & 0o777))
        real(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    creds = ClusterCredentials(
        server="https://k",
        ca_pem=pki.ca.pair.cert.read_bytes(),
        client_cert_pem=pki.client.cert.read_bytes(),
        client_key_pem=pki.client.key.read_bytes(),
    )
    context = ssl_context(creds)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert seen == [(0o600, 0o600)]
    assert list(scratch.iterdir()) == []


def test_insecure_ssl_context_does_not_verify() -> None:
    context = ssl_context(ClusterCredentials(server="https://k", insecure_skip_tls_verify=True))
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname


@pytest.mark.parametrize(
    ("field", "message"),
    [("ca_pem", "certificate authority does not load"), ("client_key_pem", "client certificate and key do not load")],
)
def test_bad_pem_material(pki: Pki, field: str, message: str) -> None:
    values = {
        "ca_pem": pki.ca.pair.cert.read_bytes(),
        "client_cert_pem": pki.client.cert.read_bytes(),
        "client_key_pem": pki.client.key.read_bytes(),
    }
    values[field] = b"-----BEGIN CERTIFICATE-----\nnot pem\n-----END CERTIFICATE-----\n"
    with pytest.raises(KubeconfigError, match=message):
        ssl_context(ClusterCredentials(server="https://k", context="ctx", **values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class TlsServer:
    url: str


@pytest_asyncio.fixture
async def tls_server(pki: Pki) -> AsyncIterator[TlsServer]:
    """A tiny HTTPS server that demands a client certificate and answers with who the client is."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca.pair.cert))
    context.load_cert_chain(str(pki.server.cert), str(pki.server.key))
    context.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        subject = dict(x[0] for x in writer.get_extra_info("peercert")["subject"])
        headers = dict(h.split(": ", 1) for h in head.decode().split("\r\n")[1:] if h)
        body = json.dumps({"cn": subject["commonName"], "ua": headers.get("User-Agent")}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield TlsServer(f"https://127.0.0.1:{port}")


async def test_client_handshakes_with_kubeconfig_credentials(tmp_path: Path, pki: Pki, tls_server: TlsServer) -> None:
    path = tmp_path / "node.kubeconfig"
    write_kubeconfig(path, server=tls_server.url, ca=pki.ca.pair.cert, client=pki.client, user=NODE)
    async with KubeClient.from_kubeconfig(path) as client:
        answer = await client.get("/whoami")
    assert answer == {"cn": NODE, "ua": f"nodeagent/{__version__}"}


async def test_client_refuses_a_server_of_another_ca(tmp_path: Path, pki: Pki, tls_server: TlsServer) -> None:
    other = CertificateAuthority.create(tmp_path / "other", "other-ca")
    path = tmp_path / "node.kubeconfig"
    write_kubeconfig(path, server=tls_server.url, ca=other.pair.cert, client=pki.client, user=NODE)
    async with KubeClient.from_kubeconfig(path) as client:
        with pytest.raises(ApiUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get("/whoami")
