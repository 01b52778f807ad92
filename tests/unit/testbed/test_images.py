"""The testbed's images are valid OCI layouts, rebuild to the same digests, and hold what the tests run.

The layout is checked here by reading the files directly (index → manifest → config → layer), not through
images.load_image, so the module is not its own oracle. The pause binary is run for real, as a process.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.testbed import images

BUILDERS = {"pause": images.build_pause_image, "busybox": images.build_busybox_image}


@dataclass(frozen=True)
class Verified:
    manifest: dict[str, Any]
    config: dict[str, Any]
    layer_tar: bytes


def _blob(layout: Path, descriptor: dict[str, Any]) -> bytes:
    algorithm, encoded = str(descriptor["digest"]).split(":")
    assert algorithm == "sha256"
    data = (layout / "blobs" / "sha256" / encoded).read_bytes()
    assert len(data) == descriptor["size"], descriptor
    assert hashlib.sha256(data).hexdigest() == encoded, descriptor
    return data


def verify_layout(layout: Path) -> Verified:
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    [entry] = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    manifest = json.loads(_blob(layout, entry))
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = json.loads(_blob(layout, manifest["config"]))
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    tar = gzip.decompress(_blob(layout, layer))
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]}
    assert config["os"] == "linux"
    assert config["architecture"] == images.host_architecture()
    return Verified(manifest, config, tar)


def _members(tar: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        return {m.name: m for m in archive.getmembers()}


def _file(tar: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        extracted = archive.extractfile(name)
        assert extracted is not None
        return extracted.read()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, images.OCIImage]:
    root = tmp_path_factory.mktemp("images")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def pause_binary(built: dict[str, images.OCIImage], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pause-bin") / "pause"
    path.write_bytes(_file(verify_layout(built["pause"].layout).layer_tar, "pause"))
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("name", "expected_config"),
    [
        ("pause", {"Entrypoint": ["/pause"], "User": "65535:65535"}),
        ("busybox", {"Cmd": ["sh"]}),
    ],
)
def test_layout_verifies_from_index_to_layer(
    built: dict[str, images.OCIImage], name: str, expected_config: dict[str, Any]
) -> None:
    image = built[name]
    verified = verify_layout(image.layout)
    for key, value in expected_config.items():
        assert verified.config["config"][key] == value
    assert any(env.startswith("PATH=") for env in verified.config["config"]["Env"])
    # What the dataclass says agrees with the files.
    assert image.manifest == _blob(image.layout, {"digest": image.manifest_digest, "size": len(image.manifest)})
    assert image.config_digest == verified.manifest["config"]["digest"]
    assert [(b.digest, b.size) for b in image.layers] == [(d["digest"], d["size"]) for d in verified.manifest["layers"]]
    assert images.load_image(image.layout) == image


def test_busybox_layer_holds_busybox_and_applet_links(built: dict[str, images.OCIImage]) -> None:
    tar = verify_layout(built["busybox"].layout).layer_tar
    members = _members(tar)
    assert members["bin/busybox"].isfile()
    assert members["bin/busybox"].mode == 0o755
    assert _file(tar, "bin/busybox") == Path("/bin/busybox").read_bytes()
    for applet in images.BUSYBOX_REQUIRED_APPLETS:
        link = members[f"bin/{applet}"]
        assert link.issym(), applet
        assert link.linkname == "busybox", applet
    assert members["tmp"].isdir()
    assert members["tmp"].mode == 0o1777
    assert members["var/www"].isdir()
    passwd = _file(tar, "etc/passwd").decode()
    assert [line.split(":")[0] for line in passwd.splitlines()] == ["root", "nobody"]
    assert [line.split(":")[0] for line in _file(tar, "etc/group").decode().splitlines()] == ["root", "nobody"]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_layer_entries_are_sorted_root_owned_and_timeless(built: dict[str, images.OCIImage], name: str) -> None:
    members = list(_members(verify_layout(built[name].layout).layer_tar).values())
    assert [m.name.split("/") for m in members] == sorted(m.name.split("/") for m in members)
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, members[0].mtime)}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_rebuilding_gives_the_same_digests(built: dict[str, images.OCIImage], name: str, tmp_path: Path) -> None:
    again = BUILDERS[name](tmp_path / name)
    first = built[name]
    assert again.manifest_digest == first.manifest_digest
    assert again.manifest == first.manifest
    assert again.blobs() == first.blobs()
    for blob in first.blobs():
        assert again.blob_path(blob.digest).read_bytes() == first.blob_path(blob.digest).read_bytes()


def test_a_cached_layout_is_reused_and_a_corrupted_one_rebuilt(tmp_path: Path) -> None:
    dest = tmp_path / "busybox"
    first = images.build_busybox_image(dest)
    layer = first.blob_path(first.layers[0].digest)
    written = layer.stat().st_mtime_ns

    assert images.build_busybox_image(dest) == first
    assert layer.stat().st_mtime_ns == written

    layer.write_bytes(b"not the layer")
    rebuilt = images.build_busybox_image(dest)
    assert rebuilt == first
    verify_layout(dest)
    assert [p.name for p in tmp_path.iterdir()] == ["busybox"]  # no staging directory left behind


def test_load_image_rejects_a_blob_that_does_not_match_its_digest(
    built: dict[str, images.OCIImage], tmp_path: Path
) -> None:
    copy = tmp_path / "pause"
    shutil.copytree(built["pause"].layout, copy)
    config = built["pause"].config_digest
    path = images.blob_path(copy, config)
    path.write_bytes(path.read_bytes().replace(b"65535", b"65534"))
    with pytest.raises(images.InvalidLayout, match=config):
        images.load_image(copy)


def test_oci_archive_names_the_image(built: dict[str, images.OCIImage], tmp_path: Path) -> None:
    image = built["busybox"]
    archive = images.write_oci_archive(image, tmp_path / "busybox.tar", name="registry.test/busybox:1.35")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "out", filter="data")
    verify_layout(tmp_path / "out")
    [entry] = json.loads((tmp_path / "out" / "index.json").read_text())["manifests"]
    assert entry["digest"] == image.manifest_digest
    assert entry["annotations"] == {
        "io.containerd.image.name": "registry.test/busybox:1.35",
        "org.opencontainers.image.ref.name": "1.35",
    }
    again = images.write_oci_archive(image, tmp_path / "again.tar", name="registry.test/busybox:1.35")
    assert again.read_bytes() == archive.read_bytes()


# --- the pause binary, run for real --------------------------------------------------------------------------------

PT_INTERP = 3
PT_DYNAMIC = 2


def _program_header_types(binary: bytes) -> list[int]:
    assert binary[:4] == b"\x7fELF"
    assert binary[4] == 2, "ELFCLASS64 expected"
    assert binary[5] == 1, "little-endian expected"
    (phoff,) = struct.unpack_from("<Q", binary, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", binary, 0x36)
    return [struct.unpack_from("<I", binary, phoff + i * phentsize)[0] for i in range(phnum)]


def test_pause_binary_is_static(pause_binary: Path) -> None:
    binary = pause_binary.read_bytes()
    (e_type,) = struct.unpack_from("<H", binary, 0x10)
    assert e_type == 2, "ET_EXEC: a non-PIE static executable"
    types = _program_header_types(binary)
    assert PT_INTERP not in types, "a static binary has no program interpreter"
    assert PT_DYNAMIC not in types, "a static binary has no dynamic section"


@pytest.fixture
def running_pause(pause_binary: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([str(pause_binary)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_pause_stays_up_until_signalled_then_exits_zero(
    running_pause: subprocess.Popen[bytes], signo: signal.Signals
) -> None:
    # The one sleep of this module: "stays up" is a claim about time.
    time.sleep(1.0)
    assert running_pause.poll() is None, "pause exited on its own"
    running_pause.send_signal(signo)
    assert running_pause.wait(timeout=5) == 0


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(c) for c in text.split()]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _poll(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_pause_reaps_orphans_as_pid_1(pause_binary: Path) -> None:
    # pause as PID 1 of a new PID namespace, as in a pod that shares its PID namespace; a process started in that
    # namespace leaves an orphan behind, which the kernel re-parents to pause. Without the SIGCHLD handler the orphan
    # would stay a zombie child of pause once it exits.
    unshare = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", str(pause_binary)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert _poll(lambda: bool(_children(unshare.pid))), "unshare did not start pause"
        [pause_pid] = _children(unshare.pid)
        assert _poll(lambda: os.readlink(f"/proc/{pause_pid}/exe") == str(pause_binary))
        subprocess.run(
            ["nsenter", f"--target={pause_pid}", "--pid", "--", "sh", "-c", "sleep 1 & exit 0"],
            check=True,
            timeout=10,
        )
        orphans = _children(pause_pid)
        assert len(orphans) == 1, "the orphaned sleep was not re-parented to pause"
        assert _poll(lambda: not _children(pause_pid)), f"pause left {_children(pause_pid)} unreaped"
        assert _state(pause_pid) in ("S", "R")
        os.kill(pause_pid, signal.SIGTERM)
        assert unshare.wait(timeout=5) == 0
    finally:
        if unshare.poll() is None:
            unshare.kill()
        unshare.wait(timeout=5)
        assert unshare.stderr is not None
        unshare.stderr.close()


def test_grpc_health_image_packs_the_binary_as_its_entrypoint(tmp_path: Path) -> None:
    binary = tmp_path / "grpc-health"
    binary.write_bytes(b"\x7fELF not really, but the image only carries it")
    image = images.build_grpc_health_image(tmp_path / "layout", binary)
    verified = verify_layout(image.layout)
    assert verified.config["config"]["Entrypoint"] == ["/grpc-health"]
    assert verified.config["config"]["User"] == "65535:65535"
    members = _members(verified.layer_tar)
    assert list(members) == ["grpc-health"]
    assert members["grpc-health"].mode == 0o755
    assert _file(verified.layer_tar, "grpc-health") == binary.read_bytes()
    assert images.build_grpc_health_image(tmp_path / "again", binary).manifest_digest == image.manifest_digest
    binary.write_bytes(b"a new build")
    assert images.build_grpc_health_image(tmp_path / "layout", binary).manifest_digest != image.manifest_digest


def test_grpc_health_image_without_the_binary_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(images.ImageBuildError, match="nodeagent testbed install"):
        images.build_grpc_health_image(tmp_path / "layout", tmp_path / "missing")
