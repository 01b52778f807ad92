"""Pinned versions of the real parts, and where their build cache lives (outside the repo, reused across runs)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
# The cri-api staging module released with KUBERNETES_VERSION: the wire-compatibility oracle of cri/.
CRI_API_VERSION = "v0.34.4"
CRI_TOOLS_VERSION = "v1.34.0"
# google.golang.org/grpc for the testbed's gRPC health server (the grpc probe's target): the release Kubernetes
# KUBERNETES_VERSION builds with, so the module cache of the control plane build already holds it.
GRPC_GO_VERSION = "v1.72.1"
GRPC_HEALTH_SOURCE = Path(__file__).with_name("grpchealth") / "main.go"
# sigs.k8s.io/metrics-server, built from its own go.mod (k8s.io/* v0.33): what `kubectl top` reads through the
# aggregation layer.
METRICS_SERVER_VERSION = "v0.8.0"
# agnhost, the e2e suite's multi-purpose test image, built from k8s.io/kubernetes/test/images/agnhost of
# KUBERNETES_VERSION: its VERSION file there, which is also the tag test/utils/image/manifest.go expects
# (registry.k8s.io/e2e-test-images/agnhost:2.56). The installer checks both against this.
AGNHOST_VERSION = "2.56"
# Vanilla BusyBox, built here from its release tarball (`make defconfig`, static): upstream's e2e busybox image
# (e2e-test-images/busybox:1.37.0-1) is FROM busybox:1.37.0, and the testbed's e2e busybox, agnhost and nonewprivs
# images are built on it, not on Debian's busybox-static, whose ash drops variables with '-' in their names from a
# child's environment and whose nc has no -u. Fetched from the Debian pool (the orig tarball is busybox.net's
# busybox-1.37.0.tar.bz2, byte for byte) and checked against this digest.
BUSYBOX_VERSION = "1.37.0"
BUSYBOX_SOURCE_URL = f"http://deb.debian.org/debian/pool/main/b/busybox/busybox_{BUSYBOX_VERSION}.orig.tar.bz2"
BUSYBOX_SOURCE_SHA256 = "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4"
# The tags test/utils/image/manifest.go of KUBERNETES_VERSION gives the e2e busybox and nonewprivs images; the
# installer checks them as it does agnhost's.
E2E_BUSYBOX_TAG = "1.37.0-1"
NONEWPRIVS_VERSION = "1.3"
# manifest.go's e2e-test-images/nonroot: upstream's is `USER 1234` on a base image with `id`; the testbed's is the e2e
# busybox rootfs with that user (the runAsNonRoot specs run `id -u` in it).
NONROOT_VERSION = "1.4"
NONROOT_USER = "1234"
# The e2e suite's nginx images (manifest.go: e2e-test-images/nginx:1.14-4 and :1.15-4, upstream FROM
# nginx:1.14-alpine and nginx:1.15-alpine) are built from Debian bookworm's nginx, which has one version: both tags
# carry it (the specs need two distinct image references, not two nginx releases). The installer checks the tags
# against manifest.go and the .deb's version against NGINX_VERSION.
NGINX_VERSION = "1.22.1"
NGINX_IMAGE_TAGS = ("1.14-4", "1.15-4")


def cache_root() -> Path:
    return Path(os.environ.get("NODEAGENT_CACHE", "/var/cache/nodeagent"))


def kubernetes_bin_dir() -> Path:
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / "bin"


def crictl_path() -> Path:
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"crictl-{CRI_TOOLS_VERSION}" / "crictl"


def grpc_health_path() -> Path:
    """The gRPC health server binary, keyed by its source and the grpc release, so an edit rebuilds it."""
    digest = hashlib.sha256(GRPC_HEALTH_SOURCE.read_bytes()).hexdigest()[:12]
    return cache_root() / f"grpc-health-{GRPC_GO_VERSION}-{digest}" / "grpc-health"


def metrics_server_path() -> Path:
    return cache_root() / f"metrics-server-{METRICS_SERVER_VERSION}" / "metrics-server"


def e2e_dir() -> Path:
    """The upstream e2e suite of KUBERNETES_VERSION and the ginkgo CLI that runs it (`nodeagent conformance`)."""
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / "e2e"


def e2e_test_path() -> Path:
    return e2e_dir() / "e2e.test"


def e2e_node_test_path() -> Path:
    """The node e2e suite (`k8s.io/kubernetes/test/e2e_node`), built beside e2e.test from the same release."""
    return e2e_dir() / "e2e_node.test"


def ginkgo_path() -> Path:
    return e2e_dir() / "ginkgo"


def agnhost_dir() -> Path:
    """The agnhost binary and the files its image carries besides it (upstream's porter/localhost.{crt,key})."""
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"agnhost-{AGNHOST_VERSION}"


def agnhost_path() -> Path:
    return agnhost_dir() / "agnhost"


def busybox_path() -> Path:
    """The vanilla BusyBox binary (static), with the `.config` it was built with beside it."""
    return cache_root() / f"busybox-{BUSYBOX_VERSION}" / "busybox"


def nginx_root() -> Path:
    """Debian's nginx and nginx-common unpacked (`dpkg-deb -x`, never installed: that would start a daemon)."""
    return cache_root() / f"nginx-{NGINX_VERSION}" / "root"


def nonewprivs_path() -> Path:
    """nnp, built from k8s.io/kubernetes/test/images/nonewprivs of KUBERNETES_VERSION."""
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"nonewprivs-{NONEWPRIVS_VERSION}" / "nnp"


def kubelet_path() -> Path:
    """The upstream kubelet of KUBERNETES_VERSION (`nodeagent testbed install --with-kubelet`), beside the control
    plane's binaries."""
    return kubernetes_bin_dir() / "kubelet"


# The testbed's CSI stack (`nodeagent testbed install --with-csi`, testbed/csistack.py). The CSI mock driver is
# Kubernetes' own (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test of KUBERNETES_VERSION, what the e2e suite tests
# the kubelet's CSI code with: csi-test v5 dropped its standalone mock-driver), served by our csimock/main.go; the
# registration sidecar is our csiregistrar/main.go on k8s.io/kubelet's pluginregistration API, since the module proxy
# serves no node-driver-registrar. Both are built in a copy of the control plane's build module, keyed by their
# sources. The external-attacher is built from its own module (its go.mod and go.sum, as its release is).
CSI_MOCK_SOURCE = Path(__file__).with_name("csimock") / "main.go"
CSI_REGISTRAR_SOURCE = Path(__file__).with_name("csiregistrar") / "main.go"
EXTERNAL_ATTACHER_VERSION = "v4.13.0"


def _source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def csi_mock_path() -> Path:
    """The CSI mock driver, keyed by the release it is built from and by its main.go, so an edit rebuilds it."""
    digest = _source_digest(CSI_MOCK_SOURCE)
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"csi-mock-{digest}" / "csi-mock"


def csi_registrar_path() -> Path:
    digest = _source_digest(CSI_REGISTRAR_SOURCE)
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"csi-registrar-{digest}" / "csi-registrar"


def csi_attacher_path() -> Path:
    return cache_root() / f"external-attacher-{EXTERNAL_ATTACHER_VERSION}" / "csi-attacher"


# The images only the certified suite (focus `[Conformance]`) pulls beyond the [NodeConformance] set, built by
# `nodeagent testbed install --with-certified` (testbed/certifiedbuild.py) and packed by testbed/certifiedimages.py,
# under the tags test/utils/image/manifest.go of KUBERNETES_VERSION gives them (the installer checks each):
# - e2e-test-images/sample-apiserver:1.29.2, the aggregator spec's API server: k8s.io/sample-apiserver of the
#   release the tag names (the image directory's own VERSION file says 1.33.2; the manifest, which the suite pulls
#   by, says 1.29.2), built from that module's own go.mod and go.sum;
SAMPLE_APISERVER_VERSION = "v0.29.2"
SAMPLE_APISERVER_TAG = "1.29.2"
# - etcd:3.6.4-0 (registry.k8s.io/etcd, gcEtcdRegistry), the sample-apiserver's storage in the same spec: etcd and
#   etcdctl of go.etcd.io/etcd v3.6.4, static (the testbed's own etcd is Debian's 3.5);
ETCD_E2E_VERSION = "v3.6.4"
ETCD_E2E_TAG = "3.6.4-0"
# - e2e-test-images/httpd:2.4.38-4 and :2.4.39-4 (upstream FROM httpd:2.4.38-alpine / 2.4.39-alpine): Debian
#   bookworm's Apache (apache2-bin) under both tags, as nginx's one Debian build carries both nginx tags;
HTTPD_IMAGE_TAGS = ("2.4.38-4", "2.4.39-4")
# - e2e-test-images/jessie-dnsutils:1.7 (upstream debian:jessie plus dnsutils): Debian bookworm's dig, nslookup and
#   host (bind9-dnsutils) and glibc's getent on the vanilla busybox rootfs;
JESSIE_DNSUTILS_TAG = "1.7"
# - e2e-test-images/nautilus:1.7 (upstream FROM agnhost, plus nautilus.jpg and data.json, CMD test-webserver): the
#   testbed's agnhost image plus those two files of the release.
NAUTILUS_TAG = "1.7"


def sample_apiserver_path() -> Path:
    return cache_root() / f"sample-apiserver-{SAMPLE_APISERVER_VERSION}" / "sample-apiserver"


def etcd_e2e_dir() -> Path:
    """etcd and etcdctl of ETCD_E2E_VERSION (the certified suite's etcd image), static."""
    return cache_root() / f"etcd-{ETCD_E2E_VERSION}"


def nautilus_dir() -> Path:
    """nautilus.jpg and data.json of the release's test/images/nautilus/html (the installer copies them here)."""
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"nautilus-{NAUTILUS_TAG}"
