"""The e2e suite's nginx images (e2e-test-images/nginx:1.14-4 and :1.15-4) from Debian's nginx.

Upstream's are FROM nginx:1.14-alpine and nginx:1.15-alpine (test/images/nginx, nginx-new): nginx serving
/usr/share/nginx/html on port 80, `CMD ["nginx", "-g", "daemon off;"]`, on alpine's busybox (specs run
`/bin/sh -c "sleep 5"` in them). Here: the vanilla e2e busybox rootfs, Debian bookworm's /usr/sbin/nginx (package
nginx, unpacked by `nodeagent testbed install`, never installed) with the shared libraries `ldd` finds for it,
nginx-common's mime.types and welcome page, and the official image's nginx.conf and conf.d/default.conf, with its
logs linked to the container's stdout and stderr. Debian has one nginx, so both tags get the same image.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import ImageBuildError, OCIImage, TarEntry

NGINX_BINARY = "usr/sbin/nginx"
# From nginx-common: the types nginx.conf includes, and the "Welcome to nginx!" page upstream's image serves too.
NGINX_COMMON_FILES = ("etc/nginx/mime.types", "usr/share/nginx/html/index.html")
# As the official image: the master runs as root, its workers as nginx (101:101, alpine's numbers there).
NGINX_PASSWD_LINE = b"nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n"
NGINX_GROUP_LINE = b"nginx:x:101:nginx\n"
# The official image's nginx.conf, but the pid file at Debian's compiled-in path.
NGINX_CONF = b"""user  nginx;
worker_processes  1;

error_log  /var/log/nginx/error.log warn;
pid        /run/nginx.pid;

events {
    worker_connections  1024;
}

http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent "$http_referer" '
                      '"$http_user_agent" "$http_x_forwarded_for"';

    access_log  /var/log/nginx/access.log  main;

    sendfile        on;
    keepalive_timeout  65;

    include /etc/nginx/conf.d/*.conf;
}
"""
NGINX_DEFAULT_CONF = b"""server {
    listen       80;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
}
"""
# Directories Debian's build needs that the busybox rootfs lacks: its compiled-in temp paths live under
# /var/lib/nginx (nginx makes the subdirectories, not the parent), the pid file under /run, the cache home.
NGINX_DIRECTORIES = ("run", "var/cache/nginx", "var/lib/nginx", "var/log/nginx", "etc/nginx/conf.d")
NGINX_CMD = ("nginx", "-g", "daemon off;")
NGINX_EXPOSED_PORT = 80


def build_nginx_image(dest: Path, root: Path, busybox: Path) -> OCIImage:
    """The e2e nginx image in an OCI layout at `dest`: `root` is where the installer unpacked nginx and
    nginx-common (versions.nginx_root()), `busybox` the installer's vanilla BusyBox."""
    binary = root / NGINX_BINARY
    common = {path: root / path for path in NGINX_COMMON_FILES}
    missing = [str(path) for path in (binary, *common.values()) if not path.is_file()]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} missing: `nodeagent testbed install` unpacks Debian's nginx")
    shell = images._vanilla_busybox(busybox)  # the e2e rootfs helpers images.py shares
    applets = images._busybox_applets(busybox)
    host_files = images.host_program_files({NGINX_BINARY: binary})
    inputs = {
        "image": "e2e-nginx",
        "busybox": images.sha256_digest(shell),
        "host": {path: images.sha256_digest(source.read_bytes()) for path, source in sorted(host_files.items())},
        "common": {path: images.sha256_digest(source.read_bytes()) for path, source in sorted(common.items())},
        "nginx.conf": images.sha256_digest(NGINX_CONF),
        "default.conf": images.sha256_digest(NGINX_DEFAULT_CONF),
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        base = images.e2e_busybox_rootfs(shell, applets, source=busybox)
        own = {"etc/passwd": NGINX_PASSWD_LINE, "etc/group": NGINX_GROUP_LINE}
        entries = [e for e in base if e.path not in own]
        entries += [TarEntry.file(path, _base_file(base, path) + line) for path, line in own.items()]
        entries += [TarEntry.directory(path) for path in NGINX_DIRECTORIES]
        entries += [
            TarEntry.file("etc/nginx/nginx.conf", NGINX_CONF),
            TarEntry.file("etc/nginx/conf.d/default.conf", NGINX_DEFAULT_CONF),
            # As the official image: the logs are the container's, so `kubectl logs` shows them.
            TarEntry.symlink("var/log/nginx/access.log", "/dev/stdout"),
            TarEntry.symlink("var/log/nginx/error.log", "/dev/stderr"),
        ]
        entries += [TarEntry.file(path, source.read_bytes()) for path, source in common.items()]
        entries += [TarEntry.file(path, source.read_bytes(), mode=0o755) for path, source in host_files.items()]
        return images.with_parent_directories(entries)

    config = {
        "Cmd": list(NGINX_CMD),
        "Env": [images.DEFAULT_PATH],
        "ExposedPorts": {f"{NGINX_EXPOSED_PORT}/tcp": {}},
        "StopSignal": "SIGTERM",
    }
    return images._build(dest, inputs, files, config)


def _base_file(entries: list[TarEntry], path: str) -> bytes:
    for entry in entries:
        if entry.path == path and entry.kind == tarfile.REGTYPE:
            return entry.data
    raise ImageBuildError(f"the e2e busybox rootfs has no {path}")
