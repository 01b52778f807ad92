"""The certified suite's own images (beyond the [NodeConformance] set), built as OCI layouts from local parts.

Each is upstream's image in the shape its specs rely on (docs/conformance.md, "Images"), on parts that
`nodeagent testbed install --with-certified` provides (testbed/certifiedbuild.py):

- e2e-test-images/httpd:2.4.38-4 and :2.4.39-4 (upstream: httpd:2.4.x-alpine). Debian's Apache laid out as the
  official image: /usr/local/apache2 with bin/httpd and bin/httpd-foreground (`CMD ["httpd-foreground"]`, the
  server in the foreground), conf/httpd.conf (port 80, User/Group daemon, logs to the container's stdout and
  stderr), htdocs/index.html ("It works!"), on the vanilla busybox rootfs. The StatefulSet specs probe
  `GET /index.html` on port 80 and break the probe with `mv -v /usr/local/apache2/htdocs/index.html /tmp/`.
  Debian's build looks for /etc/apache2/apache2.conf unless told otherwise, so that is a link to conf/httpd.conf.
- e2e-test-images/jessie-dnsutils:1.7 (upstream: debian:jessie plus dnsutils). The DNS specs run
  `sh -c "for i in \\`seq 1 600\\`; do check=\\"$(dig +notcp +noall +answer +search NAME A)\\" && ...; getent hosts
  NAME ...; sleep 1; done"`: Debian's dig, nslookup and host, glibc's getent (files and dns are in libc.so.6 since
  glibc 2.34) with an nsswitch.conf, and bash, each with the libraries `ldd` finds, on the vanilla busybox rootfs.
- e2e-test-images/sample-apiserver:1.29.2: the static binary at /sample-apiserver, the entrypoint, on the vanilla
  busybox rootfs (upstream's base is alpine).
- etcd:3.6.4-0: static etcd and etcdctl at /usr/local/bin, as upstream's (whose base is distroless); the aggregator
  spec runs `/usr/local/bin/etcd --listen-client-urls ...` with the working directory's default data dir.
- e2e-test-images/agnhost:2.56 with the DNS tools: the same 7 DNS specs run a second prober ("wheezy") in agnhost
  with the same dig and getent loop; upstream's agnhost has them (`apk add bind-tools`, musl's getent), the testbed's
  (built for every testbed, images.py) has not, and giving it bind's libraries would grow every install and every
  agnhost image by 24 MB. So the certified step pushes, over the testbed's agnhost:2.56, that image's files and config
  plus dig, nslookup, host and getent with their libraries and an nsswitch.conf.
- e2e-test-images/nautilus:1.7 (upstream: FROM agnhost, `COPY nautilus.jpg`, `COPY data.json`, `CMD
  ["test-webserver"]`): the testbed's agnhost image's files plus those two at /, which test-webserver serves on
  port 80; the Update Demo specs read /data.json through the apiserver's pod proxy.

As every testbed image, builds are deterministic (images.py): a cached layout is reused when its inputs match.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import DEFAULT_PATH, ImageBuildError, OCIImage, TarEntry
from nodeagent.testbed.versions import (
    AGNHOST_VERSION,
    ETCD_E2E_TAG,
    HTTPD_IMAGE_TAGS,
    JESSIE_DNSUTILS_TAG,
    NAUTILUS_TAG,
    SAMPLE_APISERVER_TAG,
    agnhost_path,
    busybox_path,
    cache_root,
    etcd_e2e_dir,
    nautilus_dir,
    sample_apiserver_path,
)

# Repository paths below the testbed's registry, as the conformance repo list maps manifest.go's registries
# (conformance/repolist.py: promoterE2eRegistry -> e2e-test-images, gcEtcdRegistry -> the registry's root).
HTTPD_REPOSITORY = "e2e-test-images/httpd"
JESSIE_DNSUTILS_REPOSITORY = "e2e-test-images/jessie-dnsutils"
SAMPLE_APISERVER_REPOSITORY = "e2e-test-images/sample-apiserver"
ETCD_REPOSITORY = "etcd"
NAUTILUS_REPOSITORY = "e2e-test-images/nautilus"
AGNHOST_REPOSITORY = "e2e-test-images/agnhost"

HTTPD_PREFIX = "usr/local/apache2"
APACHE2_BINARY = Path("/usr/sbin/apache2")
APACHE2_MODULE_DIR = Path("/usr/lib/apache2/modules")
MIME_TYPES = Path("/etc/mime.types")
# The shared modules the configuration below loads (Debian builds the MPM as one too); unixd, log_config and logio
# are compiled into Debian's binary (`apache2 -l`).
HTTPD_MODULES = ("mpm_event", "authn_core", "authz_core", "authz_host", "dir", "mime", "alias", "setenvif")
# The official image's httpd.conf, reduced to what it enables: port 80, the daemon user, htdocs, index.html, and its
# two log changes (`sed` in its Dockerfile) that send the logs to the container's stdout and stderr.
# ServerRoot first: the module paths are relative to it when they are read.
HTTPD_CONF = (
    'ServerRoot "/usr/local/apache2"\n'
    + "".join(f"LoadModule {name}_module modules/mod_{name}.so\n" for name in HTTPD_MODULES)
    + """Listen 80
User daemon
Group daemon
ServerName localhost
ServerAdmin you@example.com
PidFile logs/httpd.pid
DefaultRuntimeDir logs
<Directory />
    AllowOverride none
    Require all denied
</Directory>
DocumentRoot "/usr/local/apache2/htdocs"
<Directory "/usr/local/apache2/htdocs">
    Options Indexes FollowSymLinks
    AllowOverride None
    Require all granted
</Directory>
DirectoryIndex index.html
<Files ".ht*">
    Require all denied
</Files>
ErrorLog /proc/self/fd/2
LogLevel warn
LogFormat "%h %l %u %t \\"%r\\" %>s %b" common
CustomLog /proc/self/fd/1 common
TypesConfig conf/mime.types
"""
).encode()
HTTPD_INDEX = b"<html><body><h1>It works!</h1></body></html>\n"
# The official image's entry script: a stale pid file would stop a restarted container's httpd.
HTTPD_FOREGROUND = b'#!/bin/sh\nset -e\n\nrm -f /usr/local/apache2/logs/httpd.pid\n\nexec httpd -DFOREGROUND "$@"\n'
HTTPD_PATH = "PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HTTPD_CMD = ("httpd-foreground",)

# jessie-dnsutils' programs: image path -> host file (bind9-dnsutils, libc-bin, bash).
DNSUTILS_PROGRAMS: dict[str, Path] = {
    "usr/bin/dig": Path("/usr/bin/dig"),
    "usr/bin/nslookup": Path("/usr/bin/nslookup"),
    "usr/bin/host": Path("/usr/bin/host"),
    "usr/bin/getent": Path("/usr/bin/getent"),
    "bin/bash": Path("/bin/bash"),
}
# Debian's default for the lookups getent and the resolver make.
NSSWITCH_CONF = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
JESSIE_CMD = ("bash",)
# What agnhost gains for the DNS specs' wheezy prober (alpine's bind-tools and getent are at these paths too).
AGNHOST_DNS_PROGRAMS: dict[str, Path] = {
    path: source for path, source in DNSUTILS_PROGRAMS.items() if path.startswith("usr/bin/")
}

SAMPLE_APISERVER_ENTRYPOINT = ("/sample-apiserver",)
ETCD_BINARIES = ("etcd", "etcdctl")
ETCD_EXPOSED_PORTS = (2379, 2380)
NAUTILUS_FILES = ("nautilus.jpg", "data.json")
NAUTILUS_CMD = ("test-webserver",)


@dataclass(frozen=True)
class CertifiedImage:
    repository: str
    tag: str
    image: OCIImage


def _e2e_rootfs(busybox: Path) -> list[TarEntry]:
    """The vanilla busybox rootfs the e2e images share (images.e2e_busybox_rootfs)."""
    return images.e2e_busybox_rootfs(images._vanilla_busybox(busybox), images._busybox_applets(busybox), source=busybox)


def _host_digests(host_files: Mapping[str, Path]) -> dict[str, str]:
    return {path: images.sha256_digest(source.read_bytes()) for path, source in sorted(host_files.items())}


def with_libgcc_s(host_files: Mapping[str, Path]) -> dict[str, Path]:
    """`host_files` plus libgcc_s.so.1 beside their libc: glibc dlopens it to unwind a thread that exits
    (pthread_exit, cancellation), so `ldd` never lists it; without it Apache's worker children abort with
    "libgcc_s.so.1 must be installed for pthread_exit to work"."""
    libcs = [path for path in host_files if Path(path).name == "libc.so.6"]
    if not libcs:
        return dict(host_files)
    image_path = (Path(libcs[0]).parent / "libgcc_s.so.1").as_posix()
    source = host_files[libcs[0]].parent / "libgcc_s.so.1"
    if not source.is_file():
        raise ImageBuildError(f"{source} is missing: apt-get install libgcc-s1")
    return {**host_files, image_path: source}


def _host_entries(host_files: Mapping[str, Path], mode: int = 0o755) -> list[TarEntry]:
    return [TarEntry.file(path, source.read_bytes(), mode=mode) for path, source in sorted(host_files.items())]


def build_httpd_image(
    dest: Path,
    busybox: Path,
    *,
    binary: Path = APACHE2_BINARY,
    module_dir: Path = APACHE2_MODULE_DIR,
    mime_types: Path = MIME_TYPES,
) -> OCIImage:
    """The e2e httpd image from the host's Apache (apache2-bin) and media-types."""
    modules = {f"{HTTPD_PREFIX}/modules/mod_{name}.so": module_dir / f"mod_{name}.so" for name in HTTPD_MODULES}
    missing = [str(path) for path in (binary, mime_types, *modules.values()) if not path.is_file()]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} missing: `nodeagent testbed install --with-certified` installs apache2-bin"
        )
    host_files = with_libgcc_s(images.host_program_files({f"{HTTPD_PREFIX}/bin/httpd": binary, **modules}))
    shell = images._vanilla_busybox(busybox)
    inputs = {
        "image": "e2e-httpd",
        "busybox": images.sha256_digest(shell),
        "host": _host_digests(host_files),
        "mime.types": images.sha256_digest(mime_types.read_bytes()),
        "httpd.conf": images.sha256_digest(HTTPD_CONF),
        "index.html": images.sha256_digest(HTTPD_INDEX),
        "httpd-foreground": images.sha256_digest(HTTPD_FOREGROUND),
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = _e2e_rootfs(busybox)
        entries += _host_entries(host_files)
        entries += [
            TarEntry.file(f"{HTTPD_PREFIX}/bin/httpd-foreground", HTTPD_FOREGROUND, mode=0o755),
            TarEntry.file(f"{HTTPD_PREFIX}/conf/httpd.conf", HTTPD_CONF),
            TarEntry.file(f"{HTTPD_PREFIX}/conf/mime.types", mime_types.read_bytes()),
            TarEntry.file(f"{HTTPD_PREFIX}/htdocs/index.html", HTTPD_INDEX),
            TarEntry.directory(f"{HTTPD_PREFIX}/logs"),
            # Debian's httpd reads /etc/apache2/apache2.conf when no -f is given (its compiled-in HTTPD_ROOT).
            TarEntry.symlink("etc/apache2/apache2.conf", f"/{HTTPD_PREFIX}/conf/httpd.conf"),
        ]
        return images.with_parent_directories(entries)

    config = {
        "Cmd": list(HTTPD_CMD),
        "Env": [HTTPD_PATH, "HTTPD_PREFIX=/usr/local/apache2"],
        "ExposedPorts": {"80/tcp": {}},
        "WorkingDir": f"/{HTTPD_PREFIX}",
    }
    return images._build(dest, inputs, files, config)


def build_jessie_dnsutils_image(
    dest: Path, busybox: Path, *, programs: Mapping[str, Path] = DNSUTILS_PROGRAMS
) -> OCIImage:
    """The e2e jessie-dnsutils image from the host's bind9-dnsutils, getent and bash."""
    missing = [str(path) for path in programs.values() if not path.is_file()]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} missing: `nodeagent testbed install --with-certified` installs bind9-dnsutils"
        )
    host_files = with_libgcc_s(images.host_program_files(programs))
    shell = images._vanilla_busybox(busybox)
    inputs = {
        "image": "e2e-jessie-dnsutils",
        "busybox": images.sha256_digest(shell),
        "host": _host_digests(host_files),
        "nsswitch.conf": images.sha256_digest(NSSWITCH_CONF),
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = [e for e in _e2e_rootfs(busybox) if e.path not in host_files]
        entries += _host_entries(host_files)
        entries.append(TarEntry.file("etc/nsswitch.conf", NSSWITCH_CONF))
        return images.with_parent_directories(entries)

    config = {"Cmd": list(JESSIE_CMD), "Env": [DEFAULT_PATH]}
    return images._build(dest, inputs, files, config)


def build_sample_apiserver_image(dest: Path, binary: Path, busybox: Path) -> OCIImage:
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install --with-certified` builds it")
    data = binary.read_bytes()
    shell = images._vanilla_busybox(busybox)
    inputs = {
        "image": "e2e-sample-apiserver",
        "binary": images.sha256_digest(data),
        "busybox": images.sha256_digest(shell),
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        return [*_e2e_rootfs(busybox), TarEntry.file("sample-apiserver", data, mode=0o755)]

    config = {"Entrypoint": list(SAMPLE_APISERVER_ENTRYPOINT), "Env": [DEFAULT_PATH]}
    return images._build(dest, inputs, files, config)


def build_etcd_image(dest: Path, binaries: Path) -> OCIImage:
    """etcd and etcdctl (static, from `binaries`) at /usr/local/bin."""
    paths = {name: binaries / name for name in ETCD_BINARIES}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} missing: `nodeagent testbed install --with-certified` builds etcd")
    data = {name: path.read_bytes() for name, path in paths.items()}
    inputs = {
        "image": "e2e-etcd",
        "binaries": {name: images.sha256_digest(blob) for name, blob in sorted(data.items())},
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = [TarEntry.file(f"usr/local/bin/{name}", blob, mode=0o755) for name, blob in data.items()]
        # etcd's default data dir is relative to the working directory; /tmp for whatever else it writes.
        entries += [TarEntry.directory("tmp", mode=0o1777), TarEntry.directory("var/lib/etcd", mode=0o700)]
        return images.with_parent_directories(entries)

    config = {
        "Env": [DEFAULT_PATH],
        "ExposedPorts": {f"{port}/tcp": {} for port in ETCD_EXPOSED_PORTS},
        "WorkingDir": "/",
    }
    return images._build(dest, inputs, files, config)


def layer_entries(image: OCIImage) -> list[TarEntry]:
    """The entries of a single-layer testbed image (directories, files, symlinks), to build another on it."""
    if len(image.layers) != 1:
        raise ImageBuildError(f"{image.layout}: expected one layer, found {len(image.layers)}")
    raw = gzip.decompress(image.blob_path(image.layers[0].digest).read_bytes())
    entries = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for info in tar.getmembers():
            if info.isdir():
                entries.append(TarEntry.directory(info.name, mode=info.mode))
            elif info.issym():
                entries.append(TarEntry.symlink(info.name, info.linkname))
            elif info.isfile():
                member = tar.extractfile(info)
                assert member is not None  # a regular file always has data
                entries.append(TarEntry.file(info.name, member.read(), mode=info.mode))
            else:
                raise ImageBuildError(f"{image.layout}: cannot carry {info.name!r} (tar type {info.type!r})")
    return entries


def image_config(image: OCIImage) -> dict[str, object]:
    """The `config` part of an image's config blob (Entrypoint, Cmd, Env, ...)."""
    doc = json.loads(image.blob_path(image.config_digest).read_bytes())
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise ImageBuildError(f"{image.layout}: malformed image config")
    return dict(config)


def build_nautilus_image(dest: Path, agnhost: OCIImage, sources: Mapping[str, Path]) -> OCIImage:
    """agnhost's files and config, plus nautilus.jpg and data.json at / and test-webserver as its command."""
    missing = [str(sources.get(name)) for name in NAUTILUS_FILES if not sources.get(name, Path()).is_file()]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} missing (test/images/nautilus/html of the release)")
    data = {name: sources[name].read_bytes() for name in NAUTILUS_FILES}
    inputs = {
        "image": "e2e-nautilus",
        "agnhost": agnhost.manifest_digest,
        "files": {name: images.sha256_digest(blob) for name, blob in sorted(data.items())},
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        return [*layer_entries(agnhost), *(TarEntry.file(name, blob) for name, blob in data.items())]

    config = {**image_config(agnhost), "Cmd": list(NAUTILUS_CMD)}
    return images._build(dest, inputs, files, config)


def build_agnhost_dns_image(
    dest: Path, agnhost: OCIImage, *, programs: Mapping[str, Path] = AGNHOST_DNS_PROGRAMS
) -> OCIImage:
    """agnhost's files and config plus dig, nslookup, host and getent (with their libraries) and an nsswitch.conf;
    a library agnhost already carries (bash's and curl's) is taken from the host once, as it is the same file."""
    missing = [str(path) for path in programs.values() if not path.is_file()]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} missing: `nodeagent testbed install --with-certified` installs bind9-dnsutils"
        )
    host_files = with_libgcc_s(images.host_program_files(programs))
    inputs = {
        "image": "e2e-agnhost-dns",
        "agnhost": agnhost.manifest_digest,
        "host": _host_digests(host_files),
        "nsswitch.conf": images.sha256_digest(NSSWITCH_CONF),
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        own = {*host_files, "etc/nsswitch.conf"}
        entries = [e for e in layer_entries(agnhost) if e.path not in own]
        entries += _host_entries(host_files)
        entries.append(TarEntry.file("etc/nsswitch.conf", NSSWITCH_CONF))
        return images.with_parent_directories(entries)

    return images._build(dest, inputs, files, image_config(agnhost))


def default_cache() -> Path:
    return cache_root() / "images" / "certified"


def certified_builders(cache: Path | None = None) -> dict[str, Callable[[], list[CertifiedImage]]]:
    """Image name -> a build of it under its repository and tag(s), from what `install --with-certified` left in the
    cache and on the host (each raises ImageBuildError when its parts are missing)."""
    cache = cache or default_cache()
    busybox = busybox_path()

    def httpd() -> list[CertifiedImage]:
        image = build_httpd_image(cache / "httpd", busybox)
        return [CertifiedImage(HTTPD_REPOSITORY, tag, image) for tag in HTTPD_IMAGE_TAGS]

    def jessie() -> list[CertifiedImage]:
        image = build_jessie_dnsutils_image(cache / "jessie-dnsutils", busybox)
        return [CertifiedImage(JESSIE_DNSUTILS_REPOSITORY, JESSIE_DNSUTILS_TAG, image)]

    def sample_apiserver() -> list[CertifiedImage]:
        image = build_sample_apiserver_image(cache / "sample-apiserver", sample_apiserver_path(), busybox)
        return [CertifiedImage(SAMPLE_APISERVER_REPOSITORY, SAMPLE_APISERVER_TAG, image)]

    def etcd() -> list[CertifiedImage]:
        return [CertifiedImage(ETCD_REPOSITORY, ETCD_E2E_TAG, build_etcd_image(cache / "etcd", etcd_e2e_dir()))]

    def testbed_agnhost() -> OCIImage:
        return images.build_agnhost_image(cache_root() / "images" / "agnhost", agnhost_path(), busybox)

    def agnhost_dns() -> list[CertifiedImage]:
        image = build_agnhost_dns_image(cache / "agnhost-dns", testbed_agnhost())
        return [CertifiedImage(AGNHOST_REPOSITORY, AGNHOST_VERSION, image)]

    def nautilus() -> list[CertifiedImage]:
        agnhost = testbed_agnhost()
        sources = {name: nautilus_dir() / name for name in NAUTILUS_FILES}
        image = build_nautilus_image(cache / "nautilus", agnhost, sources)
        return [CertifiedImage(NAUTILUS_REPOSITORY, NAUTILUS_TAG, image)]

    return {
        "agnhost-dns": agnhost_dns,
        "httpd": httpd,
        "jessie-dnsutils": jessie,
        "sample-apiserver": sample_apiserver,
        "etcd": etcd,
        "nautilus": nautilus,
    }


def certified_repositories() -> dict[str, str]:
    """Repository path -> the builder's name in certified_builders()."""
    return {
        AGNHOST_REPOSITORY: "agnhost-dns",
        HTTPD_REPOSITORY: "httpd",
        JESSIE_DNSUTILS_REPOSITORY: "jessie-dnsutils",
        SAMPLE_APISERVER_REPOSITORY: "sample-apiserver",
        ETCD_REPOSITORY: "etcd",
        NAUTILUS_REPOSITORY: "nautilus",
    }
