"""Kubeconfig files with embedded client certificates, as the upstream components and kubectl read them."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from nodeagent.testbed.pki import CertPair


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: CertPair, user: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "nodeagent", "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": "nodeagent", "context": {"cluster": "nodeagent", "user": user}}],
        "current-context": "nodeagent",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
