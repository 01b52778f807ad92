"""Kubeconfig files, read as kubectl reads them, into credentials and a TLS context.

Only what a node needs is supported: the current (or a named) context; the cluster's server, CA (file or data),
`insecure-skip-tls-verify` and `tls-server-name`; the user's client certificate and key (file or data) and bearer
token (inline or `tokenFile`). Relative file paths are relative to the kubeconfig's directory, as in client-go.
Exec plugins, auth providers and basic auth are refused with a clear message rather than sending anonymous
requests.

Certificate and key files are read when the kubeconfig is loaded, so a missing file fails at start with its name.
A token file is re-read while the agent runs, because projected and bound tokens rotate; as in client-go, the last
token read from it wins over an inline `token`, which stays the fallback while the file cannot be read.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodeagent.kube.errors import KubeconfigError

__all__ = ["ClusterCredentials", "KubeconfigError", "load_kubeconfig", "ssl_context"]


@dataclass(frozen=True)
class ClusterCredentials:
    """Where the apiserver is and how to prove who we are. PEM material is held as bytes."""

    server: str
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    context: str = ""
    user: str = ""


def _mapping(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeconfigError(f"{what} is not a mapping")
    return value


def _named(doc: dict[str, Any], section: str, key: str, name: str, source: Path) -> dict[str, Any]:
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"{source}: {section} is not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            return _mapping(entry.get(key), f"{source}: {section[:-1]} {name!r}")
    known = sorted(str(e.get("name")) for e in entries if isinstance(e, dict))
    raise KubeconfigError(f"{source}: no {section[:-1]} named {name!r} (known: {', '.join(known) or 'none'})")


def _string(entry: dict[str, Any], key: str, what: str) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{what}: {key} is not a string")
    return value


def _material(entry: dict[str, Any], key: str, what: str, base: Path) -> bytes | None:
    """`KEY-data` (base64) wins over `KEY` (a path), as in client-go."""
    data = _string(entry, f"{key}-data", what)
    if data is not None:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KubeconfigError(f"{what}: {key}-data is not valid base64") from exc
    path = _string(entry, key, what)
    if path is None:
        return None
    resolved = base / Path(path).expanduser()
    try:
        return resolved.read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"{what}: {key} {resolved} cannot be read: {exc.strerror or exc}") from exc


def load_kubeconfig(path: Path, *, context: str | None = None) -> ClusterCredentials:
    """The credentials of `context`, or of the kubeconfig's current-context."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path} cannot be read: {exc.strerror or exc}") from exc
    try:
        doc = _mapping(yaml.safe_load(text), f"kubeconfig {path}")
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
    name = context or doc.get("current-context")
    if not name or not isinstance(name, str):
        raise KubeconfigError(f"{path}: no context given and no current-context set")
    ctx = _named(doc, "contexts", "context", name, path)
    cluster_name = _string(ctx, "cluster", f"{path}: context {name!r}")
    if cluster_name is None:
        raise KubeconfigError(f"{path}: context {name!r} names no cluster")
    cluster = _named(doc, "clusters", "cluster", cluster_name, path)
    user_name = _string(ctx, "user", f"{path}: context {name!r}") or ""
    user = _named(doc, "users", "user", user_name, path) if user_name else {}
    base = path.parent

    where = f"{path}: cluster {cluster_name!r}"
    server = _string(cluster, "server", where)
    if server is None:
        raise KubeconfigError(f"{where} has no server")
    insecure = bool(cluster.get("insecure-skip-tls-verify", False))
    ca_pem = _material(cluster, "certificate-authority", where, base)
    if insecure and ca_pem is not None:
        # kubectl refuses this combination too.
        raise KubeconfigError(f"{where}: certificate-authority together with insecure-skip-tls-verify")

    who = f"{path}: user {user_name!r}"
    for unsupported in ("exec", "auth-provider", "username", "password"):
        if user.get(unsupported):
            raise KubeconfigError(f"{who} uses {unsupported}, which nodeagent does not support")
    cert_pem = _material(user, "client-certificate", who, base)
    key_pem = _material(user, "client-key", who, base)
    if (cert_pem is None) != (key_pem is None):
        raise KubeconfigError(f"{who} has a client certificate without a key, or a key without a certificate")
    token = _string(user, "token", who)
    token_path = _string(user, "tokenFile", who)
    token_file = base / Path(token_path).expanduser() if token_path else None
    if token_file is not None and token is None:
        try:
            read_token(token_file)  # fail at load, with the file's name, not at the first request
        except KubeconfigError as exc:
            raise KubeconfigError(f"{who}: {exc}") from exc
    return ClusterCredentials(
        server=server.rstrip("/"),
        ca_pem=ca_pem,
        insecure_skip_tls_verify=insecure,
        tls_server_name=_string(cluster, "tls-server-name", where),
        client_cert_pem=cert_pem,
        client_key_pem=key_pem,
        token=token,
        token_file=token_file,
        context=name,
        user=user_name,
    )


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise KubeconfigError(f"token file {path} cannot be read: {exc.strerror or exc}") from exc
    if not token:
        raise KubeconfigError(f"token file {path} is empty")
    return token


def ssl_context(credentials: ClusterCredentials) -> ssl.SSLContext:
    """A client TLS context: the cluster's CA (or the system's), and the client certificate if there is one.

    `load_cert_chain` only reads files, so the PEM material goes into a private (0700) temporary directory for the
    moment of loading and is removed right after.
    """
    where = f"context {credentials.context!r}" if credentials.context else "credentials"
    try:
        if credentials.insecure_skip_tls_verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif credentials.ca_pem is not None:
            context = ssl.create_default_context(cadata=credentials.ca_pem.decode("ascii", "replace"))
        else:
            context = ssl.create_default_context()
    except ssl.SSLError as exc:
        raise KubeconfigError(f"{where}: the certificate authority does not load: {exc}") from exc
    if credentials.client_cert_pem is not None and credentials.client_key_pem is not None:
        with tempfile.TemporaryDirectory(prefix="nodeagent-tls-") as tmp:
            cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
            for target, data in ((cert, credentials.client_cert_pem), (key, credentials.client_key_pem)):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            try:
                context.load_cert_chain(cert, key)
            except ssl.SSLError as exc:
                raise KubeconfigError(f"{where}: the client certificate and key do not load: {exc}") from exc
    return context
