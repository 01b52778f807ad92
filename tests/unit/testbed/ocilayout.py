"""Reads a single-layer OCI image layout straight from its files (index → manifest → config → layer) for the image
tests, checking each blob's size and digest and the layer's diff_id on the way.

It does not go through images.load_image, so the module under test is not its own oracle.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def blob(layout: Path, descriptor: dict[str, Any]) -> bytes:
    """The blob a descriptor names, after checking that it has the descriptor's size and digest."""
    data = (layout / "blobs" / "sha256" / str(descriptor["digest"]).removeprefix("sha256:")).read_bytes()
    assert len(data) == descriptor["size"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
    return data


def read_layout(layout: Path) -> tuple[dict[str, Any], dict[str, tarfile.TarInfo], Callable[[str], bytes]]:
    """The image config, the layer's members by name, and a reader of a member's bytes."""
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads(blob(layout, entry))
    config = json.loads(blob(layout, manifest["config"]))
    [layer] = manifest["layers"]
    tar = gzip.decompress(blob(layout, layer))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(tar).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = {m.name: m for m in archive.getmembers()}

    def read(name: str) -> bytes:
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            extracted = archive.extractfile(name)
            assert extracted is not None
            return extracted.read()

    return config, members, read
