"""The text of the config files one testbed writes: containerd, CNI, registry hosts, the agent config, `env`."""

from __future__ import annotations

import json
import shlex

import yaml

from nodeagent.testbed.layout import Layout, Settings
from nodeagent.testbed.versions import (
    AGNHOST_VERSION,
    E2E_BUSYBOX_TAG,
    NGINX_IMAGE_TAGS,
    NONEWPRIVS_VERSION,
    NONROOT_VERSION,
    crictl_path,
    kubernetes_bin_dir,
)

PAUSE_IMAGE_REPOSITORY = "pause"
PAUSE_IMAGE_TAG = "3.10"
# Debian's busybox-static: what the project's tests run (its `wget` segfaults on these machines: they use `nc`).
BUSYBOX_IMAGE_REPOSITORY = "busybox"
BUSYBOX_IMAGE_TAG = "1.35"
# The busybox a user is offered (`BUSYBOX_IMAGE` in `env`, the README, `nodeagent up`): the e2e busybox image (the
# vanilla BusyBox 1.37.0 on docker-library's busybox:1.37.0 rootfs) under docker-library's own name and tag.
VANILLA_BUSYBOX_IMAGE_TAG = "1.37.0"
GRPC_HEALTH_IMAGE_REPOSITORY = "grpc-health"
GRPC_HEALTH_IMAGE_TAG = "1"
# Upstream's e2e name for agnhost (registry.k8s.io/e2e-test-images/agnhost:2.56 in test/utils/image/manifest.go),
# under the testbed's registry: a KUBE_TEST_REPO_LIST mapping only the registry finds it.
AGNHOST_IMAGE_REPOSITORY = "e2e-test-images/agnhost"
AGNHOST_IMAGE_TAG = AGNHOST_VERSION
# The e2e suite's busybox and nonewprivs under upstream's names and tags (manifest.go), on vanilla BusyBox. The
# testbed's own busybox above (Debian's) stays what the project's tests run.
E2E_BUSYBOX_IMAGE_REPOSITORY = "e2e-test-images/busybox"
E2E_BUSYBOX_IMAGE_TAG = E2E_BUSYBOX_TAG
NONEWPRIVS_IMAGE_REPOSITORY = "e2e-test-images/nonewprivs"
NONEWPRIVS_IMAGE_TAG = NONEWPRIVS_VERSION
NONROOT_IMAGE_REPOSITORY = "e2e-test-images/nonroot"
NONROOT_IMAGE_TAG = NONROOT_VERSION
# The e2e suite's nginx under upstream's name and both its tags (Nginx, NginxNew), built from Debian's nginx.
NGINX_IMAGE_REPOSITORY = "e2e-test-images/nginx"
NGINX_IMAGE_TAG, NGINX_NEW_IMAGE_TAG = NGINX_IMAGE_TAGS
# Debian's containernetworking-plugins: portmap and loopback are linked into each testbed's CNI bin dir, next to
# the project's own plugin; bridge and host-local are the peer the CNI benchmark measures against.
REFERENCE_CNI_DIR = "/usr/lib/cni"
# The bridge's MTU, in the conflist and where `up` creates the bridge: the plugin's ADD must find it as it makes it.
BRIDGE_MTU = 1500
# A second, real runtime handler: runc again, under upstream's e2e name for a preconfigured handler
# (e2eruntimeclass.PreconfiguredRuntimeClassHandler), so a RuntimeClass naming it runs pods and a sandbox's
# PodSandboxStatus.runtime_handler shows which handler made it.
ALT_RUNTIME_HANDLER = "test-handler"


def pause_image(settings: Settings) -> str:
    return f"{settings.registry}/{PAUSE_IMAGE_REPOSITORY}:{PAUSE_IMAGE_TAG}"


def busybox_image(settings: Settings) -> str:
    return f"{settings.registry}/{BUSYBOX_IMAGE_REPOSITORY}:{BUSYBOX_IMAGE_TAG}"


def vanilla_busybox_image(settings: Settings) -> str:
    return f"{settings.registry}/{BUSYBOX_IMAGE_REPOSITORY}:{VANILLA_BUSYBOX_IMAGE_TAG}"


def grpc_health_image(settings: Settings) -> str:
    return f"{settings.registry}/{GRPC_HEALTH_IMAGE_REPOSITORY}:{GRPC_HEALTH_IMAGE_TAG}"


def agnhost_image(settings: Settings) -> str:
    return f"{settings.registry}/{AGNHOST_IMAGE_REPOSITORY}:{AGNHOST_IMAGE_TAG}"


def e2e_busybox_image(settings: Settings) -> str:
    return f"{settings.registry}/{E2E_BUSYBOX_IMAGE_REPOSITORY}:{E2E_BUSYBOX_IMAGE_TAG}"


def nonewprivs_image(settings: Settings) -> str:
    return f"{settings.registry}/{NONEWPRIVS_IMAGE_REPOSITORY}:{NONEWPRIVS_IMAGE_TAG}"


def nginx_image(settings: Settings, tag: str = NGINX_IMAGE_TAG) -> str:
    return f"{settings.registry}/{NGINX_IMAGE_REPOSITORY}:{tag}"


def agent_cgroup_root(settings: Settings) -> str:
    """The agent's own cgroup root, so two agents on one machine never share a kubepods hierarchy."""
    return f"/nodeagent-{settings.bridge}"


# containerd's default second CDI spec directory (after /etc/cdi), the hostPath test/e2e/testing-manifests/dra uses.
HOST_CDI_SPEC_DIR = "/var/run/cdi"


def containerd_config(layout: Layout, settings: Settings) -> str:
    """containerd 1.7 (config version 2): own root, state and sockets, cgroupfs, CNI and registry from the testbed.
    Two runtime handlers, both runc: `runc` (the default) and `ALT_RUNTIME_HANDLER` for RuntimeClass.

    `restrict_oom_score_adj` is required on these machines: lowering oom_score_adj is refused even for root, and
    without it every sandbox fails. CDI is on (`enable_cdi`, off by default in 1.7) with the testbed's own spec
    directory, so that the CDI device names a DRA driver returns (and a device plugin's CDI devices) are injected,
    and containerd's default `HOST_CDI_SPEC_DIR`: upstream's e2e DRA specs write their test driver's specs there
    through a proxy pod's hostPath, whatever the node (`nodeagent conformance --preset devices`).
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    c = layout.containerd
    return f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{c / "containerd.sock.ttrpc"}"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"

[{cri}]
  sandbox_image = "{pause_image(settings)}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "{settings.stream_port}"
  enable_cdi = true
  cdi_spec_dirs = ["{layout.cdi_spec_dir}", "{HOST_CDI_SPEC_DIR}"]

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.containerd.runtimes.{ALT_RUNTIME_HANDLER}]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.{ALT_RUNTIME_HANDLER}.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{layout.cni_bin_dir}"
  conf_dir = "{layout.cni_conf_dir}"
  max_conf_num = 1

[{cri}.registry]
  config_path = "{layout.registry_hosts}"
"""


def registry_hosts_toml(settings: Settings) -> str:
    """containerd's hosts.toml for the local registry: plain HTTP on loopback."""
    url = f"http://{settings.registry}"
    return f'server = "{url}"\n\n[host."{url}"]\n  capabilities = ["pull", "resolve", "push"]\n  skip_verify = true\n'


def cni_conflist(layout: Layout, settings: Settings) -> str:
    """The project's plugin (cni/, `nodeagent-bridge`) chained with the reference portmap (hostPort)."""
    doc = {
        "cniVersion": "1.0.0",
        "name": f"nodeagent-{settings.bridge}",
        "plugins": [
            {
                "type": "nodeagent-bridge",
                "bridge": settings.bridge,
                "isGateway": True,
                "hairpinMode": True,
                "mtu": BRIDGE_MTU,
                "ipam": {
                    "type": "nodeagent-ipam",
                    # The gateway is the node's own address (see hostnet): named, so the two never drift apart.
                    "ranges": [[{"subnet": settings.pod_cidr, "gateway": settings.node_ip}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def agent_config(layout: Layout, settings: Settings) -> str:
    """A KubeletConfiguration (kubelet.config.k8s.io/v1beta1) pointing into this testbed."""
    doc: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "staticPodPath": str(layout.manifests),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": agent_cgroup_root(settings),
        "podCIDR": settings.pod_cidr,
        "clusterDomain": "cluster.local",
        # The `kube-dns` Service when the testbed runs CoreDNS (testbed/clusterdns.py), as kubeadm writes it.
        **({"clusterDNS": [settings.cluster_dns]} if settings.cluster_dns else {}),
        # The kubelet API listens on the node's address only: the apiserver (node proxy, logs, exec) and
        # metrics-server reach it there, and so do pods, as on a real node. Not 0.0.0.0: that would also offer an
        # API that can exec into pods on every address of this (shared) machine, which nothing needs.
        "address": settings.node_ip,
    }
    if settings.healthz_port:
        # Its own port, so agents of two testbeds on one machine never fight over the default 10248.
        doc["healthzPort"] = settings.healthz_port
    if settings.kubelet_port:
        # The kubelet API as a real cluster runs it: a serving certificate from the testbed's CA (the apiserver
        # verifies it), client certificates from that CA, bearer tokens through TokenReview, and every request
        # authorized by a SubjectAccessReview.
        doc["port"] = settings.kubelet_port
        doc["tlsCertFile"] = str(layout.pki / "kubelet-serving.crt")
        doc["tlsPrivateKeyFile"] = str(layout.pki / "kubelet-serving.key")
        doc["authentication"] = {
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
            "webhook": {"enabled": True},
            "anonymous": {"enabled": False},
        }
        doc["authorization"] = {"mode": "Webhook"}
    return yaml.safe_dump(doc, sort_keys=False)


def env_file(layout: Layout, settings: Settings) -> str:
    values = {
        "KUBECONFIG": str(layout.admin_kubeconfig),
        "NODEAGENT_KUBECONFIG": str(layout.node_kubeconfig),
        "NODEAGENT_CONFIG": str(layout.agent_config),
        "NODEAGENT_NODE_NAME": settings.node_name,
        # The node's address (its bridge's gateway): the agent's kubelet API listens there, on KUBELET_PORT.
        "NODEAGENT_NODE_IP": settings.node_ip,
        "KUBELET_PORT": str(settings.kubelet_port),
        "CONTAINERD_ADDRESS": str(layout.containerd_socket),
        "CONTAINER_RUNTIME_ENDPOINT": f"unix://{layout.containerd_socket}",
        "REGISTRY": settings.registry,
        "PAUSE_IMAGE": pause_image(settings),
        "BUSYBOX_IMAGE": vanilla_busybox_image(settings),
        "GRPC_HEALTH_IMAGE": grpc_health_image(settings),
        "AGNHOST_IMAGE": agnhost_image(settings),
        "E2E_BUSYBOX_IMAGE": e2e_busybox_image(settings),
        "NONEWPRIVS_IMAGE": nonewprivs_image(settings),
        "NGINX_IMAGE": nginx_image(settings),
    }
    lines = ["# Written by `nodeagent testbed up`. Source it: . " + shlex.quote(str(layout.env_file))]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in values.items()]
    # kubectl and crictl of the pinned release first on PATH.
    tools = f"{kubernetes_bin_dir()}:{crictl_path().parent}"
    lines.append(f'export PATH={shlex.quote(tools)}:"$PATH"')
    return "\n".join(lines) + "\n"
