"""KUBE_TEST_REPO_LIST: every upstream registry field mapped into the testbed's registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodeagent.conformance.repolist import localise, repo_list, repo_list_yaml, write_repo_list

REGISTRY = "127.0.0.1:41409"

# RegistryList's yaml tags in k8s.io/kubernetes v1.34.4 test/utils/image/manifest.go: a field left out would keep
# pointing at the internet.
MANIFEST_FIELDS = {
    "gcAuthenticatedRegistry",
    "promoterE2eRegistry",
    "buildImageRegistry",
    "invalidRegistry",
    "gcEtcdRegistry",
    "gcRegistry",
    "sigStorageRegistry",
    "privateRegistry",
    "dockerLibraryRegistry",
    "cloudProviderGcpRegistry",
}


def test_every_manifest_field_is_mapped_into_the_registry() -> None:
    mapped = repo_list(REGISTRY)
    assert set(mapped) == MANIFEST_FIELDS
    assert all(value == REGISTRY or value.startswith(REGISTRY + "/") for value in mapped.values())


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("promoterE2eRegistry", f"{REGISTRY}/e2e-test-images"),  # agnhost, busybox, nginx ...
        ("gcRegistry", REGISTRY),  # registry.k8s.io/pause
        ("gcEtcdRegistry", REGISTRY),
        ("sigStorageRegistry", f"{REGISTRY}/sig-storage"),
        ("invalidRegistry", f"{REGISTRY}/invalid/invalid"),  # never pushed to: its pulls must fail
        ("dockerLibraryRegistry", f"{REGISTRY}/library"),
    ],
)
def test_mapping(field: str, expected: str) -> None:
    assert repo_list(REGISTRY)[field] == expected


def test_written_file_is_the_yaml_the_suite_reads(tmp_path: Path) -> None:
    path = write_repo_list(tmp_path / "sub" / "repo-list.yaml", REGISTRY)
    assert yaml.safe_load(path.read_text()) == repo_list(REGISTRY)
    assert path.read_text() == repo_list_yaml(REGISTRY)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("registry.k8s.io/sig-storage/csi-attacher:v4.8.0", f"{REGISTRY}/sig-storage/csi-attacher:v4.8.0"),
        ("registry.k8s.io/e2e-test-images/busybox:1.36.1-1", f"{REGISTRY}/e2e-test-images/busybox:1.36.1-1"),
        ("registry.k8s.io/pause:3.10.1", f"{REGISTRY}/pause:3.10.1"),
        (
            "registry.k8s.io/cloud-provider-gcp/gcp-compute-persistent-disk-csi-driver:v1.4.0",
            f"{REGISTRY}/cloud-provider-gcp/gcp-compute-persistent-disk-csi-driver:v1.4.0",
        ),
        (f"{REGISTRY}/e2e-test-images/agnhost:2.56", f"{REGISTRY}/e2e-test-images/agnhost:2.56"),  # already mapped
        ("quay.io/other/image:1", "quay.io/other/image:1"),  # not an upstream registry: left alone
        ("registry.k8s.io/sig-storage/nested/image:1", "registry.k8s.io/sig-storage/nested/image:1"),
        ("busybox", "busybox"),
    ],
)
def test_localise(image: str, expected: str) -> None:
    assert localise(image, REGISTRY) == expected
