"""The images the suite names, which of them the testbed's registry holds, and testbed images pushed under them.

`e2e.test --list-images` prints every image of test/utils/image/manifest.go with the repo list applied, so the
names are already the testbed's (`<registry>/e2e-test-images/agnhost:2.56`); the CSI driver images it prints under
upstream's registries are mapped here as the framework maps them when it deploys them. The registry's catalog says
which of them a run can pull; the rest are for later work (a spec that uses one fails with ErrImagePull, whatever
the node).

The images the testbed already builds are pushed under the suite's names before a run: its e2e busybox (vanilla
BusyBox 1.37.0, which every testbed holds as e2e-test-images/busybox:1.37.0-1) under every tag the suite names for
busybox (the CSI manifests name 1.36.1-1 too), its pause as the manifest's pause (some specs run pause as an
ordinary container), and its agnhost, nonewprivs, nonroot and nginx (under both nginx tags). A testbed's registry
holds those four already (`testbed up` pushes them); a cluster given by `--kubeconfig` and `--registry`, or by
`--cluster`, does not: without them the certified run's ReplicationController lifecycle spec waited 5 minutes on
ErrImagePull for nginx:1.14-4. The testbed's own names stay as they are.

The images only the certified `[Conformance]` suite pulls (httpd, jessie-dnsutils, sample-apiserver, etcd 3.6,
nautilus: testbed/certifiedimages.py) are pushed too, each when its parts are on the machine (`nodeagent testbed
install --with-certified`); without them the image stays lacking in images.txt and the log says why. So is agnhost
with the DNS tools the DNS specs run in it (dig, getent), over the testbed's agnhost:2.56. Nothing is built for them
by a plain install, so a [NodeConformance] run on a machine without their parts costs nothing more.

One image the suite uses is in none of `--list-images`' lines: the DRA specs' proxy pods run
sig-storage/hostpathplugin:v1.7.3 (their manifest names it; manifest.go does not). It is added to the list
(`MANIFEST_ONLY`), and the testbed's stand-in (testbed/hostpathplugin.py: the proxy mode alone, on busybox) is pushed
under that tag only; the CSI hostpath specs' v1.16.1 would need the real CSI driver and stays lacking.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from cri.client import connect
from cri.errors import CRIError
from nodeagent.conformance import repolist
from nodeagent.conformance.errors import ConformanceError
from nodeagent.testbed import certifiedimages, hostpathplugin, images, nginximage, registry
from nodeagent.testbed.images import ImageBuildError
from nodeagent.testbed.install import Progress
from nodeagent.testbed.versions import (
    NONROOT_USER,
    agnhost_path,
    busybox_path,
    cache_root,
    nginx_root,
    nonewprivs_path,
)

log = logging.getLogger(__name__)

# The testbed image (by its builder) that stands in for a manifest repository below the registry.
ALIASES: dict[str, str] = {
    "e2e-test-images/agnhost": "agnhost",
    "e2e-test-images/busybox": "e2e-busybox",
    "pause": "pause",
    "e2e-test-images/nonewprivs": "nonewprivs",
    "e2e-test-images/nonroot": "nonroot",
    "e2e-test-images/nginx": "nginx",
}
# The same for one tag of a repository only: the stand-in does not serve the repository's other tags.
TAGGED_ALIASES: dict[tuple[str, str], str] = {
    (hostpathplugin.REPOSITORY, hostpathplugin.TAG): "hostpathplugin-proxy",
}
# Images the suite's manifests name that `--list-images` does not print (upstream names, localised like its lines).
MANIFEST_ONLY: tuple[str, ...] = (hostpathplugin.UPSTREAM_IMAGE,)


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"


def parse_ref(text: str) -> ImageRef | None:
    """`host:port/path/name:tag` split at the first slash and the last colon; None for a line that is not one."""
    text = text.strip()
    host, slash, rest = text.partition("/")
    name, colon, tag = rest.rpartition(":")
    if not slash or not colon or not name or not tag or "/" in tag or " " in text:
        return None
    return ImageRef(host, name, tag)


def parse_image_list(output: str) -> list[ImageRef]:
    """The refs in `--list-images` output, sorted and without duplicates (log lines in between are ignored)."""
    refs = {ref for line in output.splitlines() if (ref := parse_ref(line)) is not None}
    return sorted(refs, key=str)


def list_images(e2e_test: Path, repo_list: Path, registry_addr: str) -> list[ImageRef]:
    proc = subprocess.run(
        [str(e2e_test), "--list-images", f"--kube-test-repo-list={repo_list}"],
        env={**os.environ, "KUBE_TEST_REPO_LIST": str(repo_list)},
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise ConformanceError(f"e2e.test --list-images failed (exit {proc.returncode}):\n{tail}")
    lines = [*proc.stdout.splitlines(), *MANIFEST_ONLY]
    return parse_image_list("\n".join(repolist.localise(line.strip(), registry_addr) for line in lines))


@dataclass(frozen=True)
class Coverage:
    have: list[ImageRef]
    lack: list[ImageRef]
    invalid: list[ImageRef]  # under the invalid registry: lacking on purpose, their specs expect the pull to fail


def coverage(needed: Iterable[ImageRef], available: set[tuple[str, str]], registry_addr: str) -> Coverage:
    """Split the suite's images into those the registry holds ((repository, tag) pairs) and those it lacks. An
    image of another registry (not mapped by the repo list) is lacking by definition."""
    invalid_prefix = repolist.REGISTRY_PATHS["invalidRegistry"] + "/"
    have: list[ImageRef] = []
    lack: list[ImageRef] = []
    invalid: list[ImageRef] = []
    for ref in needed:
        if ref.registry == registry_addr and ref.repository.startswith(invalid_prefix):
            invalid.append(ref)
        elif ref.registry == registry_addr and (ref.repository, ref.tag) in available:
            have.append(ref)
        else:
            lack.append(ref)
    return Coverage(have=have, lack=lack, invalid=invalid)


def coverage_lines(cover: Coverage) -> list[str]:
    """images.txt: one `have|lack|invalid <ref>` line per image."""
    return (
        [f"have {ref}" for ref in cover.have]
        + [f"lack {ref}" for ref in cover.lack]
        + [f"invalid {ref}" for ref in cover.invalid]
    )


def alias_targets(needed: Sequence[ImageRef], registry_addr: str) -> list[tuple[ImageRef, str]]:
    """The manifest images a testbed image stands in for, each with the testbed image's builder name."""
    targets = []
    for ref in needed:
        if ref.registry != registry_addr:
            continue
        source = ALIASES.get(ref.repository) or TAGGED_ALIASES.get((ref.repository, ref.tag))
        if source is not None:
            targets.append((ref, source))
    return targets


async def registry_inventory(registry_addr: str) -> set[tuple[str, str]]:
    """Every (repository, tag) the registry holds, from the Registry API's catalog and tag lists."""
    held: set[tuple[str, str]] = set()
    try:
        async with httpx.AsyncClient(base_url=f"http://{registry_addr}", timeout=30.0, trust_env=False) as client:
            # distribution answers 400 to a page size above its limit (1000): far more than a testbed holds.
            response = await client.get("/v2/_catalog", params={"n": 1000})
            response.raise_for_status()
            for repository in response.json().get("repositories") or []:
                tags = await client.get(f"/v2/{repository}/tags/list")
                if tags.status_code != 200:
                    continue
                held.update((repository, tag) for tag in tags.json().get("tags") or [])
    except httpx.HTTPError as exc:
        raise ConformanceError(f"registry {registry_addr}: cannot list its images: {exc}") from exc
    return held


async def push_aliases(registry_addr: str, needed: Sequence[ImageRef]) -> list[ImageRef]:
    """Push the testbed's e2e busybox, pause, agnhost, nonewprivs, nonroot, nginx and the DRA proxy image (built
    here, seconds, the first time) under the suite's names, then
    the certified suite's own images whose parts are here (`push_certified`: its agnhost with the DNS tools goes over
    the plain one); the refs pushed. A testbed's registry holds the last four already (`testbed up` pushes them);
    another cluster's (`--registry`, `--cluster`) gets them here."""
    cache = cache_root() / "images"
    builders = {
        "e2e-busybox": lambda: images.build_e2e_busybox_image(cache / "e2e-busybox", busybox_path()),
        "pause": lambda: images.build_pause_image(cache / "pause"),
        "agnhost": lambda: images.build_agnhost_image(cache / "agnhost", agnhost_path(), busybox_path()),
        "nonewprivs": lambda: images.build_nonewprivs_image(cache / "nonewprivs", nonewprivs_path(), busybox_path()),
        "nonroot": lambda: images.build_nonroot_image(cache / "nonroot", busybox_path(), user=NONROOT_USER),
        "nginx": lambda: nginximage.build_nginx_image(cache / "nginx", nginx_root(), busybox_path()),
        "hostpathplugin-proxy": lambda: hostpathplugin.build_image(
            cache / "hostpathplugin-proxy", hostpathplugin.build_binary(Progress(log.info)), busybox_path()
        ),
    }
    pushed = []
    for ref, source in alias_targets(needed, registry_addr):
        await registry.push_image(registry_addr, ref.repository, ref.tag, builders[source]())
        pushed.append(ref)
    certified, unbuilt = await push_certified(registry_addr, needed)
    for reason in unbuilt:
        log.info("certified image not pushed reason=%r", reason)
    return pushed + certified


def certified_targets(needed: Sequence[ImageRef], registry_addr: str) -> dict[str, list[ImageRef]]:
    """The certified-only images the suite names, by the builder's name in certifiedimages.certified_builders()."""
    repositories = certifiedimages.certified_repositories()
    targets: dict[str, list[ImageRef]] = {}
    for ref in needed:
        if ref.registry == registry_addr and ref.repository in repositories:
            targets.setdefault(repositories[ref.repository], []).append(ref)
    return targets


async def push_certified(registry_addr: str, needed: Sequence[ImageRef]) -> tuple[list[ImageRef], list[str]]:
    """Build (or reuse from the cache) and push each certified-only image the suite names, under exactly the tags it
    names; the refs pushed, and one reason per image whose parts are missing."""
    builders = certifiedimages.certified_builders()
    pushed: list[ImageRef] = []
    unbuilt: list[str] = []
    for name, refs in sorted(certified_targets(needed, registry_addr).items()):
        try:
            built = await asyncio.to_thread(builders[name])
        except ImageBuildError as exc:
            unbuilt.append(f"{name}: {exc}")
            continue
        by_tag = {(image.repository, image.tag): image.image for image in built}
        for ref in refs:
            image = by_tag.get((ref.repository, ref.tag))
            if image is None:
                unbuilt.append(f"{ref}: the testbed builds {name} under other tags ({', '.join(t for _, t in by_tag)})")
                continue
            await registry.push_image(registry_addr, ref.repository, ref.tag, image)
            pushed.append(ref)
    return pushed, unbuilt


async def runtime_images(containerd_socket: Path) -> list[str]:
    """The image names the node's containerd holds after a run: what the specs pulled (and the testbed's pause)."""
    try:
        async with connect(f"unix://{containerd_socket}", timeout=30.0) as client:
            found = await client.image.list_images()
    except CRIError as exc:
        raise ConformanceError(f"cannot list the node's images: {exc}") from exc
    return sorted({tag for image in found for tag in image.repo_tags})
