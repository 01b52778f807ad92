"""The isolated daemon's configuration: everything under its own directory, no host networking."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from nodeagent.kind import dockerd

BASE = Path("/tmp/nodeagent-kind-x")


def test_daemon_json_keeps_off_the_hosts_network_and_the_testbeds_containerd() -> None:
    config = dockerd.daemon_config(dockerd.DockerPaths(BASE))
    for key in ("iptables", "ip6tables", "ip-masq", "ip-forward"):
        assert config[key] is False, key
    assert config["bridge"] == "none"
    assert config["containerd"] == str(BASE / "containerd" / "containerd.sock")
    for key in ("data-root", "exec-root", "pidfile", "deprecated-key-path"):
        assert Path(str(config[key])).is_relative_to(BASE), key
    assert config["hosts"] == [f"unix://{BASE}/docker.sock"]
    pools = config["default-address-pools"]
    assert isinstance(pools, list) and len(pools) == 1
    assert ipaddress.IPv4Network(pools[0]["base"]).subnet_of(ipaddress.IPv4Network("198.18.0.0/15"))
    assert config["default-runtime"] == dockerd.CAPS_RUNTIME
    assert config["runtimes"] == {dockerd.CAPS_RUNTIME: {"path": str(BASE / "nodeagent-runc")}}


def test_containerd_config_is_its_own() -> None:
    text = dockerd.containerd_config(dockerd.DockerPaths(BASE))
    assert "/run/containerd" not in text and "/var/lib/containerd" not in text
    assert f'address = "{BASE}/containerd/containerd.sock"' in text
    assert f'path = "{BASE}/containerd/opt"' in text  # not /opt/containerd
    assert 'disabled_plugins = ["io.containerd.grpc.v1.cri"]' in text


def test_runtime_script_runs_ocicaps_isolated() -> None:
    script = dockerd.runtime_script("/usr/bin/python3", Path("/src/nodeagent/kind/ocicaps.py"))
    assert script == '#!/bin/sh\nexec /usr/bin/python3 -I /src/nodeagent/kind/ocicaps.py "$@"\n'


def test_mounts_under_deepest_first() -> None:
    mountinfo = (
        "22 1 0:21 / /tmp rw - tmpfs tmpfs rw\n"
        f"90 22 0:50 / {BASE}/data/overlay2/abc/merged rw - overlay overlay rw\n"
        f"91 22 0:51 / {BASE}/exec/netns/default rw - nsfs nsfs rw\n"
        f"92 90 0:52 / {BASE}/data/overlay2/abc/merged/dev rw - tmpfs tmpfs rw\n"
        "93 22 0:53 / /tmp/nodeagent-kind-xy rw - tmpfs tmpfs rw\n"
    )
    found = dockerd.mounts_under(BASE, mountinfo)
    assert found[0] == BASE / "data/overlay2/abc/merged/dev"
    assert set(found) == {
        BASE / "data/overlay2/abc/merged/dev",
        BASE / "data/overlay2/abc/merged",
        BASE / "exec/netns/default",
    }
