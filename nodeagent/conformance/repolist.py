"""The KUBE_TEST_REPO_LIST file: upstream's image registries mapped to the testbed's registry.

The suite names every image as `<registry field>/<name>:<tag>` (test/utils/image/manifest.go, RegistryList). These
machines reach no registry beyond the testbed's own, so each field is pointed at a path in it that keeps upstream's
last path element(s): `registry.k8s.io/e2e-test-images/agnhost:2.56` becomes `<registry>/e2e-test-images/agnhost:2.56`.
The testbed then pushes an image under exactly that path to satisfy a spec.

The invalid registry stays invalid: its specs expect the pull to fail. It points at a repository path of the local
registry that nothing is ever pushed to, so the pull fails at once ("not found") instead of waiting on a DNS lookup
that cannot succeed here.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# RegistryList's YAML field names at v1.34.4, each with the path below the testbed's registry it is mapped to.
REGISTRY_PATHS: dict[str, str] = {
    "gcAuthenticatedRegistry": "authenticated-image-pulling",
    "promoterE2eRegistry": "e2e-test-images",
    "buildImageRegistry": "build-image",
    "invalidRegistry": "invalid/invalid",
    "gcEtcdRegistry": "",
    "gcRegistry": "",
    "sigStorageRegistry": "sig-storage",
    "privateRegistry": "k8s-authenticated-test",
    "dockerLibraryRegistry": "library",
    "cloudProviderGcpRegistry": "cloud-provider-gcp",
}

# RegistryList's upstream defaults (manifest.go's initRegistry), for the images the suite lists unmapped: the CSI
# driver images, whose registry the framework replaces only when it deploys them (ReplaceRegistryInImageURL).
UPSTREAM_REGISTRIES: dict[str, str] = {
    "gcAuthenticatedRegistry": "gcr.io/authenticated-image-pulling",
    "promoterE2eRegistry": "registry.k8s.io/e2e-test-images",
    "buildImageRegistry": "registry.k8s.io/build-image",
    "invalidRegistry": "invalid.registry.k8s.io/invalid",
    "gcEtcdRegistry": "registry.k8s.io",
    "gcRegistry": "registry.k8s.io",
    "sigStorageRegistry": "registry.k8s.io/sig-storage",
    "privateRegistry": "gcr.io/k8s-authenticated-test",
    "dockerLibraryRegistry": "docker.io/library",
    "cloudProviderGcpRegistry": "registry.k8s.io/cloud-provider-gcp",
}


def repo_list(registry: str) -> dict[str, str]:
    """Every RegistryList field mapped into `registry` (host:port). registry.k8s.io itself maps to the root."""
    return {field: f"{registry}/{path}" if path else registry for field, path in REGISTRY_PATHS.items()}


def repo_list_yaml(registry: str) -> str:
    return yaml.safe_dump(repo_list(registry), sort_keys=True)


def write_repo_list(path: Path, registry: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(repo_list_yaml(registry))
    return path


def localise(image: str, registry: str) -> str:
    """An upstream image name as the framework rewrites it with this repo list: the part before the image's last
    path element, when it is one of upstream's registries exactly, replaced by its mapping."""
    prefix, slash, last = image.rpartition("/")
    if not slash:
        return image
    mapped = repo_list(registry)
    for field, upstream in UPSTREAM_REGISTRIES.items():
        if prefix == upstream:
            return f"{mapped[field]}/{last}"
    return image
