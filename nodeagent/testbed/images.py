"""Build the testbed's container images (pause, busybox, grpc-health and the e2e suite's busybox, agnhost and
nonewprivs) as OCI image layouts, from local files.

These machines reach no registry but the package registries, so every image a test runs is built here: the pause
image from `pause.c` (compiled with `gcc -static`), the busybox image from Debian's busybox-static, the
grpc-health image from the static gRPC health server `nodeagent testbed install` builds from Go, and the e2e suite's
images on a rootfs of the vanilla BusyBox the installer builds (upstream's are busybox:1.37.0 and alpine): its
busybox, agnhost (the binary built from `k8s.io/kubernetes`) and nonewprivs (nnp, likewise). The result is an
OCI image layout (https://github.com/opencontainers/image-spec/blob/main/image-layout.md): `oci-layout`,
`index.json` and content-addressed `blobs/sha256/...`, one manifest, one config, one gzip layer.

Builds are deterministic (fixed mtimes and owners, sorted entries, gzip mtime 0, canonical JSON), so the same inputs
give the same manifest digest on every run. That is what makes the cache work: a layout records the digest of its
inputs, and a build whose inputs match reuses the layout after checking every blob against its digest.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MEDIA_TYPE_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_TYPE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_TYPE_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_TYPE_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
# containerd's `ctr images import` names an image after this annotation when it is present.
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"

PAUSE_SOURCE = Path(__file__).with_name("pause.c")
PAUSE_CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror")
BUSYBOX_BINARY = Path("/bin/busybox")
# The applets the tests rely on. The image links every applet the binary has; a binary that lacks one of these
# fails the build instead of failing some test later with "not found".
BUSYBOX_REQUIRED_APPLETS = (
    "[",
    "cat",
    "date",
    "echo",
    "env",
    "false",
    "grep",
    "hostname",
    "httpd",
    "id",
    "kill",
    "ls",
    "mkdir",
    "nc",
    "printf",
    "ps",
    "sh",
    "sleep",
    "test",
    "touch",
    "true",
    "wget",
)
# The agnhost image as upstream's Dockerfile (test/images/agnhost) makes it on alpine: `/agnhost` (and `/agnhost-2`,
# a link the entrypoint-tester specs run), `ENTRYPOINT ["/agnhost"]`, `CMD ["pause"]`, the ports it exposes, netexec's
# /uploads, porter's TLS files at /, and the user and group a supplementalGroups spec expects to find in the image.
AGNHOST_ENTRYPOINT = ("/agnhost",)
AGNHOST_CMD = ("pause",)
AGNHOST_EXPOSED_PORTS = (80, 8080, 8081, 9376, 5000)
AGNHOST_PORTER_FILES = ("localhost.crt", "localhost.key")
AGNHOST_PASSWD = b"".join(
    (
        b"root:x:0:0:root:/root:/bin/sh\n",
        b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        b"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
    )
)
AGNHOST_GROUP = b"".join(
    (
        b"root:x:0:\n",
        b"nobody:x:65534:\n",
        b"user-defined-in-image:x:1000:\n",
        b"group-defined-in-image:x:50000:user-defined-in-image\n",
    )
)
# Programs upstream's image installs (`apk add bind-tools curl netcat-openbsd iproute2 iperf bash`) that e2e specs
# run inside agnhost containers and busybox has no applet for, or one that behaves otherwise: `sh -c "curl
# http://..."` (the lifecycle hook and HostPort specs), `/bin/bash -c` (probe specs) and OpenBSD's nc, which the
# Services specs run as `echo hostName | nc -v -t -w 2 IP PORT` (and `-u`) and the HostPort spec as `nc -vuz -w 5`:
# vanilla BusyBox 1.37's nc has no -t (`invalid option -- 't'`, exit 1). Debian's, each with the shared libraries
# the host's dynamic loader finds for it, at the same paths; nc at /usr/bin/nc as on alpine, where the package
# replaces busybox's link (the busybox applet link bin/nc is left out of the image, so /bin/nc is no other nc). dig,
# nslookup and host (the DNS specs) are in the certified suite's agnhost only (certifiedimages.AGNHOST_DNS_PROGRAMS:
# 24 MB of libraries); ss and iperf no [Conformance] or [NodeConformance] spec runs in agnhost.
AGNHOST_HOST_PROGRAMS: dict[str, Path] = {
    "bin/bash": Path("/bin/bash"),
    "usr/bin/curl": Path("/usr/bin/curl"),
    "usr/bin/nc": Path("/bin/nc.openbsd"),
}
# BusyBox applet links the agnhost image leaves out because AGNHOST_HOST_PROGRAMS brings the program instead.
AGNHOST_REPLACED_APPLETS = ("bin/nc",)
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The e2e busybox rootfs as docker-library's busybox:1.37.0 lays it out (which upstream's
# e2e-test-images/busybox:1.37.0-1 is FROM): buildroot's skeleton passwd, group and shadow (root's password locked,
# CVE-2019-5021), the directories of buildroot's device table and every user's home.
E2E_BUSYBOX_PASSWD = b"".join(
    (
        b"root:x:0:0:root:/root:/bin/sh\n",
        b"daemon:x:1:1:daemon:/usr/sbin:/bin/false\n",
        b"bin:x:2:2:bin:/bin:/bin/false\n",
        b"sys:x:3:3:sys:/dev:/bin/false\n",
        b"sync:x:4:100:sync:/bin:/bin/sync\n",
        b"mail:x:8:8:mail:/var/spool/mail:/bin/false\n",
        b"www-data:x:33:33:www-data:/var/www:/bin/false\n",
        b"operator:x:37:37:Operator:/var:/bin/false\n",
        b"nobody:x:65534:65534:nobody:/home:/bin/false\n",
    )
)
E2E_BUSYBOX_GROUP = b"".join(
    f"{name}:x:{gid}:{members}\n".encode()
    for name, gid, members in (
        ("root", 0, ""),
        ("daemon", 1, ""),
        ("bin", 2, ""),
        ("sys", 3, ""),
        ("adm", 4, ""),
        ("tty", 5, ""),
        ("disk", 6, ""),
        ("lp", 7, ""),
        ("mail", 8, ""),
        ("kmem", 9, ""),
        ("wheel", 10, "root"),
        ("cdrom", 11, ""),
        ("dialout", 18, ""),
        ("floppy", 19, ""),
        ("video", 28, ""),
        ("audio", 29, ""),
        ("tape", 32, ""),
        ("www-data", 33, ""),
        ("operator", 37, ""),
        ("utmp", 43, ""),
        ("plugdev", 46, ""),
        ("staff", 50, ""),
        ("lock", 54, ""),
        ("netdev", 82, ""),
        ("users", 100, ""),
        ("nobody", 65534, ""),
    )
)
E2E_BUSYBOX_SHADOW = b"root:*::::::::\n" + b"".join(
    f"{user}:*:::::::\n".encode() for user in ("daemon", "bin", "sys", "sync", "mail", "www-data", "operator", "nobody")
)
E2E_BUSYBOX_DIRECTORIES = {
    "bin": 0o755,
    "dev": 0o755,
    "etc": 0o755,
    "home": 0o755,
    "root": 0o700,
    "tmp": 0o1777,
    "usr": 0o755,
    "usr/bin": 0o755,
    "usr/sbin": 0o755,
    "var": 0o755,
    "var/spool": 0o755,
    "var/spool/mail": 0o755,
    "var/www": 0o755,
}
# The nonewprivs image as upstream's Dockerfile (test/images/nonewprivs) makes it on alpine: nnp at
# /usr/local/bin, `chmod +s` (setuid root: it prints its effective uid, 0 unless no_new_privs kept it from rising),
# `CMD ["nnp"]`.
NONEWPRIVS_BINARY_PATH = "usr/local/bin/nnp"
NONEWPRIVS_MODE = 0o6755
NONEWPRIVS_CMD = ("nnp",)
# The upstream pause image runs as 65535:65535; it needs no privilege to sleep and reap.
PAUSE_USER = "65535:65535"

# Bump when the way layouts are built changes, so that cached layouts of the old format are rebuilt.
_FORMAT_VERSION = 1
_INPUTS_FILE = "nodeagent-inputs.json"
# 2000-01-01T00:00:00Z: any fixed time would do; 0 makes some tar readers print warnings.
_EPOCH = 946684800

_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


class ImageError(RuntimeError):
    """Base of this module's errors."""


class ImageBuildError(ImageError):
    """An image cannot be built: a tool or an input is missing, or the compiler failed (its output is attached)."""


class InvalidLayout(ImageError):
    """A directory is not a valid OCI image layout, or one of its blobs does not match its digest or size."""


@dataclass(frozen=True)
class Blob:
    """A content descriptor: what a manifest says about a blob, and what a registry is told when it is pushed."""

    media_type: str
    digest: str
    size: int

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class OCIImage:
    """One image in an OCI image layout on disk: one manifest, its config and its layers."""

    layout: Path
    manifest_digest: str
    manifest: bytes = field(repr=False)
    config: Blob
    layers: tuple[Blob, ...]

    @property
    def config_digest(self) -> str:
        return self.config.digest

    @property
    def manifest_size(self) -> int:
        return len(self.manifest)

    def blob_path(self, digest: str) -> Path:
        return blob_path(self.layout, digest)

    def blobs(self) -> tuple[Blob, ...]:
        """The blobs the manifest references, in the order a push uploads them (layers, then config)."""
        return (*self.layers, self.config)


def blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, encoded = digest.partition(":")
    if algorithm != "sha256" or len(encoded) != 64 or not all(c in "0123456789abcdef" for c in encoded):
        raise InvalidLayout(f"unsupported or malformed digest {digest!r}")
    return layout / "blobs" / "sha256" / encoded


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def host_architecture() -> str:
    """The OCI (GOARCH) name of this machine's architecture: the images hold this machine's binaries."""
    machine = platform.machine()
    try:
        return _GOARCH[machine]
    except KeyError:
        raise ImageBuildError(f"no OCI architecture name known for machine {machine!r}") from None


# --- Building -----------------------------------------------------------------------------------------------------


def build_pause_image(dest: Path) -> OCIImage:
    """The sandbox image: `/pause` compiled from `pause.c` with `gcc -static -Os`, as its entrypoint."""
    source = PAUSE_SOURCE.read_bytes()
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageBuildError("gcc is not installed: the pause image is compiled here (apt-get install gcc libc6-dev)")
    libc = _gcc_output(gcc, "-print-file-name=libc.a").strip()
    if not Path(libc).is_file():
        raise ImageBuildError(f"gcc finds no static libc ({libc!r}): apt-get install libc6-dev")
    inputs = {
        "image": "pause",
        "source": sha256_digest(source),
        "cflags": list(PAUSE_CFLAGS),
        "gcc": _gcc_output(gcc, "--version").splitlines()[0],
        "target": _gcc_output(gcc, "-dumpmachine").strip(),
        "libc": sha256_digest(Path(libc).read_bytes()),
        "architecture": host_architecture(),
    }

    def files() -> list[TarEntry]:
        return [TarEntry.file("pause", _compile_pause(gcc, source), mode=0o755)]

    config = {"Entrypoint": ["/pause"], "Env": [DEFAULT_PATH], "User": PAUSE_USER, "WorkingDir": "/"}
    return _build(dest, inputs, files, config)


def build_busybox_image(dest: Path) -> OCIImage:
    """A small shell image: Debian's static busybox in `/bin` with a symlink per applet, `sh` as its command."""
    if not BUSYBOX_BINARY.is_file():
        raise ImageBuildError(f"{BUSYBOX_BINARY} is missing: apt-get install busybox-static")
    binary = BUSYBOX_BINARY.read_bytes()
    inputs = {"image": "busybox", "busybox": sha256_digest(binary), "architecture": host_architecture()}

    def files() -> list[TarEntry]:
        return busybox_rootfs(binary, _busybox_applets())

    config = {"Cmd": ["sh"], "Env": [DEFAULT_PATH], "WorkingDir": "/"}
    return _build(dest, inputs, files, config)


def build_grpc_health_image(dest: Path, binary: Path) -> OCIImage:
    """The grpc probe's target: the static gRPC health server as `/grpc-health`, its entrypoint (port 5000)."""
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` builds the gRPC health server")
    data = binary.read_bytes()
    inputs = {"image": "grpc-health", "binary": sha256_digest(data), "architecture": host_architecture()}

    def files() -> list[TarEntry]:
        return [TarEntry.file("grpc-health", data, mode=0o755)]

    config = {"Entrypoint": ["/grpc-health"], "Env": [DEFAULT_PATH], "User": PAUSE_USER, "WorkingDir": "/"}
    return _build(dest, inputs, files, config)


def build_e2e_busybox_image(dest: Path, busybox: Path) -> OCIImage:
    """The e2e suite's busybox image (upstream's e2e-test-images/busybox:1.37.0-1 is busybox:1.37.0 as it is):
    the vanilla rootfs (`e2e_busybox_rootfs`) and docker-library's config, `sh` as its command."""
    binary = _vanilla_busybox(busybox)
    inputs = {"image": "e2e-busybox", "busybox": sha256_digest(binary), "architecture": host_architecture()}

    def files() -> list[TarEntry]:
        return e2e_busybox_rootfs(binary, _busybox_applets(busybox), source=busybox)

    config = {"Cmd": ["sh"], "Env": [DEFAULT_PATH]}
    return _build(dest, inputs, files, config)


def build_nonroot_image(dest: Path, busybox: Path, *, user: str) -> OCIImage:
    """The e2e suite's nonroot image (upstream's Dockerfile: `USER 1234` on its base): the vanilla busybox rootfs,
    so `id -u` runs, with `user` as the image's user; the runAsNonRoot specs check the pod runs as it."""
    binary = _vanilla_busybox(busybox)
    inputs = {"image": "nonroot", "busybox": sha256_digest(binary), "user": user, "architecture": host_architecture()}

    def files() -> list[TarEntry]:
        return e2e_busybox_rootfs(binary, _busybox_applets(busybox), source=busybox)

    config = {"Cmd": ["sh"], "Env": [DEFAULT_PATH], "User": user}
    return _build(dest, inputs, files, config)


def build_nonewprivs_image(dest: Path, binary: Path, busybox: Path) -> OCIImage:
    """The e2e suite's nonewprivs image: nnp (`binary`, built by `nodeagent testbed install`) setuid root at
    /usr/local/bin on the vanilla busybox rootfs, as upstream's on alpine."""
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` builds nnp")
    nnp = binary.read_bytes()
    shell = _vanilla_busybox(busybox)
    inputs = {
        "image": "nonewprivs",
        "binary": sha256_digest(nnp),
        "busybox": sha256_digest(shell),
        "architecture": host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = e2e_busybox_rootfs(shell, _busybox_applets(busybox), source=busybox)
        entries.append(TarEntry.file(NONEWPRIVS_BINARY_PATH, nnp, mode=NONEWPRIVS_MODE))
        return with_parent_directories(entries)

    config = {"Cmd": list(NONEWPRIVS_CMD), "Env": [DEFAULT_PATH]}
    return _build(dest, inputs, files, config)


def build_agnhost_image(dest: Path, binary: Path, busybox: Path) -> OCIImage:
    """The e2e suite's agnhost image: upstream's layout (see AGNHOST_*) on the vanilla busybox rootfs (`busybox`,
    the installer's build; upstream's base is alpine, whose busybox ash behaves like it) plus bash, curl and OpenBSD nc.

    `binary` is the static agnhost `nodeagent testbed install` builds; porter's TLS files lie beside it.
    """
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` builds agnhost")
    porter = {name: binary.parent / name for name in AGNHOST_PORTER_FILES}
    missing = [str(path) for path in porter.values() if not path.is_file()]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} missing: `nodeagent testbed install` puts them beside agnhost")
    shell = _vanilla_busybox(busybox)
    host_files = host_program_files(AGNHOST_HOST_PROGRAMS)
    agnhost = binary.read_bytes()
    inputs = {
        "image": "agnhost",
        "binary": sha256_digest(agnhost),
        "busybox": sha256_digest(shell),
        "rootfs": "e2e-busybox",
        "porter": {name: sha256_digest(path.read_bytes()) for name, path in porter.items()},
        "host": {path: sha256_digest(source.read_bytes()) for path, source in sorted(host_files.items())},
        "passwd": sha256_digest(AGNHOST_PASSWD),
        "group": sha256_digest(AGNHOST_GROUP),
        "architecture": host_architecture(),
    }

    def files() -> list[TarEntry]:
        # The image's own users and groups replace the base's (shadow too, which would not list them).
        own = ("etc/passwd", "etc/group", "etc/shadow", *AGNHOST_REPLACED_APPLETS)
        entries = [e for e in e2e_busybox_rootfs(shell, _busybox_applets(busybox), source=busybox) if e.path not in own]
        entries += [
            TarEntry.file("etc/passwd", AGNHOST_PASSWD),
            TarEntry.file("etc/group", AGNHOST_GROUP),
            TarEntry.file("agnhost", agnhost, mode=0o755),
            TarEntry.symlink("agnhost-2", "agnhost"),
            TarEntry.directory("uploads"),
        ]
        entries += [TarEntry.file(name, path.read_bytes(), mode=0o644) for name, path in porter.items()]
        entries += [TarEntry.file(path, source.read_bytes(), mode=0o755) for path, source in host_files.items()]
        return with_parent_directories(entries)

    config = {
        "Entrypoint": list(AGNHOST_ENTRYPOINT),
        "Cmd": list(AGNHOST_CMD),
        "Env": [DEFAULT_PATH],
        "ExposedPorts": {f"{port}/tcp": {} for port in AGNHOST_EXPOSED_PORTS},
        "WorkingDir": "/",
    }
    return _build(dest, inputs, files, config)


def parse_ldd(output: str) -> list[str]:
    """The absolute paths of the shared objects `ldd` lists (the vDSO has none and is skipped), in its order.

    A library the loader cannot find ("libx.so => not found") is an error: the program would not start.
    """
    paths: list[str] = []
    for line in output.splitlines():
        text = line.strip()
        if not text or text.startswith("statically linked"):
            continue
        name, arrow, rest = text.partition("=>")
        target = rest.strip() if arrow else name.strip()
        if target.startswith("not found"):
            raise ImageBuildError(f"shared library {name.strip()} not found")
        path = target.split(" (", 1)[0].strip()
        if path.startswith("/"):
            paths.append(path)
    return paths


def host_program_files(programs: Mapping[str, Path]) -> dict[str, Path]:
    """Image path -> host file: each program at its image path, and every shared object `ldd` finds for it at the
    path it has on the host (the image gets no ld.so.cache: glibc's built-in search paths must find them)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ImageBuildError("ldd is not installed (libc-bin): it lists the libraries of the image's programs")
    files: dict[str, Path] = {}
    for image_path, source in programs.items():
        if not source.is_file():
            raise ImageBuildError(f"{source} is missing: apt-get install {source.name}")
        files[image_path] = source
        proc = subprocess.run([ldd, str(source)], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ImageBuildError(f"ldd {source} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        try:
            libraries = parse_ldd(proc.stdout)
        except ImageBuildError as exc:
            raise ImageBuildError(f"{source}: {exc}") from exc
        for library in libraries:
            files[library.lstrip("/")] = Path(library)
    return files


def with_parent_directories(entries: Sequence[TarEntry]) -> list[TarEntry]:
    """`entries` plus a directory entry for every parent none of them is, so the layer never relies on an
    unpacker making them (with whatever mode it picks)."""
    present = {e.path for e in entries}
    parents = {str(parent) for e in entries for parent in Path(e.path).parents if str(parent) != "."}
    return [*entries, *(TarEntry.directory(path) for path in sorted(parents - present))]


def busybox_rootfs(binary: bytes, applets: Iterable[str]) -> list[TarEntry]:
    """The busybox image's files: the binary, one relative symlink per applet, and the few files a shell expects."""
    names = _applet_names(applets, source=BUSYBOX_BINARY)
    entries = [
        TarEntry.directory("bin"),
        TarEntry.directory("etc"),
        TarEntry.directory("root", mode=0o700),
        TarEntry.directory("tmp", mode=0o1777),
        TarEntry.directory("var"),
        TarEntry.directory("var/www"),
        TarEntry.file("bin/busybox", binary, mode=0o755),
        TarEntry.file(
            "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
        ),
        TarEntry.file("etc/group", b"root:x:0:\nnobody:x:65534:\n"),
        # So that `httpd -h /var/www` answers 200 on "/" without a setup step (probes in tests).
        TarEntry.file("var/www/index.html", b"ok\n"),
    ]
    entries += [TarEntry.symlink(f"bin/{name}", "busybox") for name in names]
    return entries


def e2e_busybox_rootfs(binary: bytes, applets: Iterable[str], *, source: Path) -> list[TarEntry]:
    """The rootfs of docker-library's busybox:1.37.0 (its static variants): the binary and every applet in /bin
    (`busybox --install /bin` there, hard links; relative symlinks here, which busybox runs alike), /usr/bin/env,
    buildroot's users (E2E_BUSYBOX_*) and the directories they and its device table name. No /etc/localtime: with
    none, the C library's time zone is UTC, which that image's localtime says too."""
    names = _applet_names(applets, source=source)
    entries = [TarEntry.directory(path, mode=mode) for path, mode in E2E_BUSYBOX_DIRECTORIES.items()]
    entries += [
        TarEntry.file("bin/busybox", binary, mode=0o755),
        TarEntry.file("etc/passwd", E2E_BUSYBOX_PASSWD),
        TarEntry.file("etc/group", E2E_BUSYBOX_GROUP),
        TarEntry.file("etc/shadow", E2E_BUSYBOX_SHADOW, mode=0o600),
    ]
    entries += [TarEntry.symlink(f"bin/{name}", "busybox") for name in names]
    entries.append(TarEntry.symlink("usr/bin/env", "../../bin/env"))  # env is a required applet
    return entries


def _applet_names(applets: Iterable[str], *, source: Path) -> list[str]:
    names = sorted(set(applets) - {"busybox"})
    missing = sorted(set(BUSYBOX_REQUIRED_APPLETS) - set(names))
    if missing:
        raise ImageBuildError(f"{source} lacks applets the tests need: {', '.join(missing)}")
    return names


def _vanilla_busybox(busybox: Path) -> bytes:
    if not busybox.is_file():
        raise ImageBuildError(f"{busybox} is missing: `nodeagent testbed install` builds BusyBox")
    return busybox.read_bytes()


def _busybox_applets(binary: Path = BUSYBOX_BINARY) -> list[str]:
    proc = subprocess.run(
        [str(binary), "--list"], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise ImageBuildError(f"{binary} --list failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return [name for name in proc.stdout.split() if name and "/" not in name]


def _gcc_output(gcc: str, *args: str) -> str:
    proc = subprocess.run([gcc, *args], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ImageBuildError(f"gcc {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _compile_pause(gcc: str, source: bytes) -> bytes:
    # Compiled from a copy under a fixed name in a scratch directory, so nothing of the checkout's path reaches the
    # binary (it is stripped as well): the same source gives the same bytes wherever the repo lives.
    with tempfile.TemporaryDirectory(prefix="nodeagent-pause-") as scratch:
        work = Path(scratch)
        (work / "pause.c").write_bytes(source)
        proc = subprocess.run(
            [gcc, *PAUSE_CFLAGS, "-o", "pause", "pause.c"],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise ImageBuildError(
                f"compiling pause.c failed (exit {proc.returncode}); a static build needs libc6-dev:\n"
                + "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            )
        return (work / "pause").read_bytes()


@dataclass(frozen=True)
class TarEntry:
    """One entry of a layer. Owners, times and order are fixed when the tar is written, so only these fields vary."""

    path: str
    kind: bytes  # tarfile.DIRTYPE, REGTYPE or SYMTYPE
    mode: int
    data: bytes = b""
    target: str = ""

    @classmethod
    def directory(cls, path: str, mode: int = 0o755) -> TarEntry:
        return cls(path, tarfile.DIRTYPE, mode)

    @classmethod
    def file(cls, path: str, data: bytes, mode: int = 0o644) -> TarEntry:
        return cls(path, tarfile.REGTYPE, mode, data=data)

    @classmethod
    def symlink(cls, path: str, target: str) -> TarEntry:
        return cls(path, tarfile.SYMTYPE, 0o777, target=target)


def layer_tar(entries: Sequence[TarEntry]) -> bytes:
    """An uncompressed layer: entries sorted by path (a parent before its children), root-owned, fixed mtime."""
    paths = [e.path for e in entries]
    if len(set(paths)) != len(paths):
        raise ImageBuildError(f"duplicate paths in a layer: {sorted(p for p in set(paths) if paths.count(p) > 1)}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path.split("/")):
            info = tarfile.TarInfo(entry.path)
            info.type = entry.kind
            info.mode = entry.mode
            info.mtime = _EPOCH
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if entry.kind == tarfile.SYMTYPE:
                info.linkname = entry.target
                tar.addfile(info)
            elif entry.kind == tarfile.REGTYPE:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def gzip_bytes(data: bytes, compresslevel: int = 9) -> bytes:
    # mtime=0 and no file name in the header: the compressed bytes depend on the content (and the level) only.
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=compresslevel) as gz:
        gz.write(data)
    return buf.getvalue()


def _build(
    dest: Path,
    inputs: Mapping[str, object],
    files: Callable[[], list[TarEntry]],
    config: Mapping[str, object],
    *,
    compresslevel: int = 9,
) -> OCIImage:
    # The level is in the key only when not the default, so that the layouts already cached stay valid.
    level = {} if compresslevel == 9 else {"compresslevel": compresslevel}
    marker = canonical_json({"format": _FORMAT_VERSION, **inputs, "config": config, **level})
    cached = _reuse(dest, marker)
    if cached is not None:
        return cached
    tar = layer_tar(files())
    layer = gzip_bytes(tar, compresslevel)
    architecture = host_architecture()
    config_blob = canonical_json(
        {
            "architecture": architecture,
            "os": "linux",
            "config": dict(config),
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(tar)]},
        }
    )
    config_desc = Blob(MEDIA_TYPE_CONFIG, sha256_digest(config_blob), len(config_blob))
    layer_desc = Blob(MEDIA_TYPE_LAYER_GZIP, sha256_digest(layer), len(layer))
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_MANIFEST,
            "config": config_desc.descriptor(),
            "layers": [layer_desc.descriptor()],
        }
    )
    manifest_digest = sha256_digest(manifest)
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_INDEX,
            "manifests": [
                {
                    "mediaType": MEDIA_TYPE_MANIFEST,
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": architecture, "os": "linux"},
                }
            ],
        }
    )
    # Written beside dest and renamed into place, so a reader (another testbed building at the same time) never
    # sees half a layout.
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        blobs = staging / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        for data in (layer, config_blob, manifest):
            (blobs / sha256_digest(data).removeprefix("sha256:")).write_bytes(data)
        (staging / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
        (staging / "index.json").write_bytes(index)
        (staging / _INPUTS_FILE).write_bytes(marker)
        if dest.exists():
            shutil.rmtree(dest)
        try:
            staging.rename(dest)
        except OSError:
            # Another build put the same layout there first: use it.
            raced = _reuse(dest, marker)
            if raced is None:
                raise
            return raced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return OCIImage(dest, manifest_digest, manifest, config_desc, (layer_desc,))


def _reuse(dest: Path, marker: bytes) -> OCIImage | None:
    try:
        if (dest / _INPUTS_FILE).read_bytes() != marker:
            return None
        return load_image(dest)
    except (OSError, InvalidLayout):
        return None


# --- Reading ------------------------------------------------------------------------------------------------------


def load_image(layout: Path, *, verify: bool = True) -> OCIImage:
    """The single image of an OCI layout. With `verify`, every blob is checked against its size and digest."""
    try:
        version = json.loads((layout / "oci-layout").read_bytes())
        index = json.loads((layout / "index.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise InvalidLayout(f"{layout}: not an OCI image layout: {exc}") from exc
    if not isinstance(version, dict) or version.get("imageLayoutVersion") != "1.0.0":
        raise InvalidLayout(f"{layout}: unsupported oci-layout {version!r}")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or len(manifests) != 1:
        raise InvalidLayout(f"{layout}: index.json must list exactly one manifest")
    manifest_desc = _descriptor(layout, manifests[0], MEDIA_TYPE_MANIFEST)
    manifest = _read_blob(layout, manifest_desc, verify=True)
    try:
        doc = json.loads(manifest)
        config = _descriptor(layout, doc["config"], MEDIA_TYPE_CONFIG)
        layers = tuple(_descriptor(layout, d, MEDIA_TYPE_LAYER_GZIP) for d in doc["layers"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidLayout(f"{layout}: malformed manifest {manifest_desc.digest}: {exc!r}") from exc
    if doc.get("schemaVersion") != 2 or doc.get("mediaType") != MEDIA_TYPE_MANIFEST:
        raise InvalidLayout(f"{layout}: manifest {manifest_desc.digest} is not an OCI image manifest")
    for blob in (config, *layers):
        if verify:
            _read_blob(layout, blob, verify=True)
        elif not blob_path(layout, blob.digest).is_file():
            raise InvalidLayout(f"{layout}: blob {blob.digest} is missing")
    return OCIImage(layout, manifest_desc.digest, manifest, config, layers)


def _descriptor(layout: Path, raw: object, media_type: str) -> Blob:
    if not isinstance(raw, dict):
        raise InvalidLayout(f"{layout}: descriptor {raw!r} is not an object")
    digest, size, kind = raw.get("digest"), raw.get("size"), raw.get("mediaType")
    if kind != media_type or not isinstance(digest, str) or not isinstance(size, int):
        raise InvalidLayout(f"{layout}: expected a {media_type} descriptor, got {raw!r}")
    blob_path(layout, digest)  # validates the digest's form
    return Blob(media_type, digest, size)


def _read_blob(layout: Path, blob: Blob, *, verify: bool) -> bytes:
    try:
        data = blob_path(layout, blob.digest).read_bytes()
    except OSError as exc:
        raise InvalidLayout(f"{layout}: blob {blob.digest} is missing: {exc}") from exc
    if verify and (len(data) != blob.size or sha256_digest(data) != blob.digest):
        raise InvalidLayout(
            f"{layout}: blob {blob.digest} does not match its descriptor "
            f"(size {len(data)} for {blob.size}, digest {sha256_digest(data)})"
        )
    return data


# --- Export -------------------------------------------------------------------------------------------------------


def write_oci_archive(image: OCIImage, dest: Path, *, name: str) -> Path:
    """A tar of the layout for `ctr images import`, its index naming the image `name` (e.g. `example.test/pause:1`).

    The index carries containerd's name annotation and the OCI ref name (the tag), so that the import names the
    image without `--base-name`. Deterministic, like the layout.
    """
    _, _, tag = name.rpartition(":")
    if "/" in tag or not tag:
        tag = "latest"
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_INDEX,
            "manifests": [
                {
                    "mediaType": MEDIA_TYPE_MANIFEST,
                    "digest": image.manifest_digest,
                    "size": image.manifest_size,
                    "annotations": {ANNOTATION_CONTAINERD_NAME: name, ANNOTATION_REF_NAME: tag},
                }
            ],
        }
    )
    entries = [
        TarEntry.file("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"})),
        TarEntry.file("index.json", index),
        TarEntry.directory("blobs"),
        TarEntry.directory("blobs/sha256"),
        TarEntry.file(f"blobs/sha256/{image.manifest_digest.removeprefix('sha256:')}", image.manifest),
    ]
    for blob in image.blobs():
        entries.append(
            TarEntry.file(
                f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", image.blob_path(blob.digest).read_bytes()
            )
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        partial.write_bytes(layer_tar(entries))
        partial.replace(dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return dest
