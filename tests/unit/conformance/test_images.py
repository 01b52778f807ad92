"""The suite's image list read, held against the registry's inventory, and the stand-ins chosen."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.conformance import images
from nodeagent.conformance.images import (
    ImageRef,
    alias_targets,
    coverage,
    coverage_lines,
    parse_image_list,
    parse_ref,
)
from nodeagent.testbed import images as testbed_images
from nodeagent.testbed import nginximage, registry

REG = "127.0.0.1:41409"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"{REG}/e2e-test-images/agnhost:2.56", ImageRef(REG, "e2e-test-images/agnhost", "2.56")),
        (f"{REG}/pause:3.10.1", ImageRef(REG, "pause", "3.10.1")),
        (f"{REG}/e2e-test-images/node-perf/npb-ep:1.2", ImageRef(REG, "e2e-test-images/node-perf/npb-ep", "1.2")),
        (
            "registry.k8s.io/sig-storage/csi-attacher:v4.8.0",
            ImageRef("registry.k8s.io", "sig-storage/csi-attacher", "v4.8.0"),
        ),
        ("  padded.example/x:1  ", ImageRef("padded.example", "x", "1")),
        ("I1125 12:00:00.000000 1 log.go:1] a log line", None),
        ("no-slash:1", None),
        (f"{REG}/untagged", None),
        ("", None),
    ],
)
def test_parse_ref(line: str, expected: ImageRef | None) -> None:
    assert parse_ref(line) == expected


def test_parse_image_list_sorts_dedups_and_ignores_noise() -> None:
    output = f"{REG}/pause:3.10.1\nwarning: something\n{REG}/e2e-test-images/agnhost:2.56\n{REG}/pause:3.10.1\n"
    assert [str(r) for r in parse_image_list(output)] == [f"{REG}/e2e-test-images/agnhost:2.56", f"{REG}/pause:3.10.1"]


def test_coverage_splits_by_the_registry_inventory() -> None:
    needed = [
        ImageRef(REG, "e2e-test-images/agnhost", "2.56"),
        ImageRef(REG, "e2e-test-images/agnhost", "2.6"),  # another tag of a held repository
        ImageRef(REG, "e2e-test-images/nginx", "1.14-4"),
        ImageRef("registry.k8s.io", "e2e-test-images/agnhost", "2.56"),  # not mapped into the registry
    ]
    held = {("e2e-test-images/agnhost", "2.56"), ("busybox", "1.35")}
    cover = coverage([*needed, ImageRef(REG, "invalid/invalid/alpine", "3.1")], held, REG)
    assert cover.have == [needed[0]]
    assert cover.lack == needed[1:]
    assert cover.invalid == [ImageRef(REG, "invalid/invalid/alpine", "3.1")]  # lacking on purpose
    assert coverage_lines(cover) == [
        f"have {REG}/e2e-test-images/agnhost:2.56",
        f"lack {REG}/e2e-test-images/agnhost:2.6",
        f"lack {REG}/e2e-test-images/nginx:1.14-4",
        "lack registry.k8s.io/e2e-test-images/agnhost:2.56",
        f"invalid {REG}/invalid/invalid/alpine:3.1",
    ]


def test_alias_targets_are_the_manifest_names_of_busybox_pause_and_agnhost() -> None:
    needed = [
        ImageRef(REG, "e2e-test-images/busybox", "1.37.0-1"),
        ImageRef(REG, "pause", "3.10.1"),
        ImageRef(REG, "e2e-test-images/agnhost", "2.56"),
        ImageRef("registry.k8s.io", "e2e-test-images/busybox", "1.36.1-1"),  # another registry: not ours to fill
    ]
    # agnhost too: a cluster given by --kubeconfig and --registry has no testbed that pushed it.
    assert alias_targets(needed, REG) == [(needed[0], "e2e-busybox"), (needed[1], "pause"), (needed[2], "agnhost")]


def test_alias_targets_cover_the_testbed_images_a_cluster_registry_lacks() -> None:
    """nonewprivs, nonroot and both nginx tags: a testbed's registry holds them, a `cluster up` one does not (the
    certified run's ReplicationController lifecycle spec failed on ErrImagePull for nginx:1.14-4)."""
    needed = [
        ImageRef(REG, "e2e-test-images/nginx", "1.14-4"),
        ImageRef(REG, "e2e-test-images/nginx", "1.15-4"),
        ImageRef(REG, "e2e-test-images/nonewprivs", "1.3"),
        ImageRef(REG, "e2e-test-images/nonroot", "1.4"),
        ImageRef(REG, "e2e-test-images/perl", "5.26"),  # not built here: stays lacking
    ]
    assert alias_targets(needed, REG) == [
        (needed[0], "nginx"),
        (needed[1], "nginx"),
        (needed[2], "nonewprivs"),
        (needed[3], "nonroot"),
    ]


def test_push_aliases_pushes_nginx_under_both_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    pushed_as: list[str] = []

    async def push_image(registry_addr: str, repository: str, tag: str, image: object) -> None:
        pushed_as.append(f"{repository}:{tag} {image}")

    async def push_certified(registry_addr: str, needed: Sequence[ImageRef]) -> tuple[list[ImageRef], list[str]]:
        return [], []

    monkeypatch.setattr(registry, "push_image", push_image)
    monkeypatch.setattr(images, "push_certified", push_certified)
    monkeypatch.setattr(nginximage, "build_nginx_image", lambda dest, root, busybox: "nginx-layout")
    needed = [ImageRef(REG, "e2e-test-images/nginx", "1.14-4"), ImageRef(REG, "e2e-test-images/nginx", "1.15-4")]
    assert asyncio.run(images.push_aliases(REG, needed)) == needed
    assert pushed_as == ["e2e-test-images/nginx:1.14-4 nginx-layout", "e2e-test-images/nginx:1.15-4 nginx-layout"]


def test_push_aliases_pushes_agnhost_before_the_certified_variant_over_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A --registry cluster gets the testbed's agnhost; the certified step's agnhost (with dig) then goes over it
    under the same tag, so the certified run's pods get the variant when it is built and the plain one otherwise."""
    events: list[str] = []

    async def push_image(registry_addr: str, repository: str, tag: str, image: object) -> None:
        events.append(f"push {repository}:{tag} {image}")

    async def push_certified(registry_addr: str, needed: Sequence[ImageRef]) -> tuple[list[ImageRef], list[str]]:
        events.append("certified")
        return [], ["agnhost_dns: bind9-dnsutils missing"]

    monkeypatch.setattr(registry, "push_image", push_image)
    monkeypatch.setattr(images, "push_certified", push_certified)
    monkeypatch.setattr(testbed_images, "build_agnhost_image", lambda dest, binary, busybox: "agnhost-layout")
    monkeypatch.setattr(testbed_images, "build_pause_image", lambda dest: "pause-layout")
    needed = [ImageRef(REG, "e2e-test-images/agnhost", "2.56"), ImageRef(REG, "pause", "3.10.1")]
    pushed = asyncio.run(images.push_aliases(REG, needed))
    assert pushed == needed
    assert events == [
        "push e2e-test-images/agnhost:2.56 agnhost-layout",
        "push pause:3.10.1 pause-layout",
        "certified",
    ]


def test_the_dra_proxy_image_is_aliased_under_the_dra_manifest_tag_only() -> None:
    """The DRA specs' proxy pods run sig-storage/hostpathplugin:v1.7.3; the stand-in has only the proxy mode, so the
    CSI hostpath specs' v1.16.1 (the real CSI driver) is not pushed over."""
    needed = [
        ImageRef(REG, "sig-storage/hostpathplugin", "v1.7.3"),
        ImageRef(REG, "sig-storage/hostpathplugin", "v1.16.1"),
        ImageRef("elsewhere:5000", "sig-storage/hostpathplugin", "v1.7.3"),
    ]
    assert alias_targets(needed, REG) == [(needed[0], "hostpathplugin-proxy")]


def test_the_dra_proxy_image_is_added_to_the_suite_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--list-images` does not print the DRA manifest's image: list_images adds it, localised."""
    fake = tmp_path / "e2e.test"
    fake.write_text("#!/bin/sh\necho registry.k8s.io/sig-storage/hostpathplugin:v1.16.1\n")
    fake.chmod(0o755)
    refs = images.list_images(fake, tmp_path / "repo-list.yaml", REG)
    assert [str(r) for r in refs] == [
        f"{REG}/sig-storage/hostpathplugin:v1.16.1",
        f"{REG}/sig-storage/hostpathplugin:v1.7.3",
    ]
