"""Loading a config file: YAML or JSON, one mapping, at most 1 MiB, apiVersion and kind checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.config import MAX_CONFIG_BYTES, ConfigError, load_config
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Layout, Settings

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def _write(tmp_path: Path, content: str | bytes, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def test_yaml_file(tmp_path: Path) -> None:
    loaded = load_config(_write(tmp_path, HEADER + "maxPods: 50\nsyncFrequency: 30s\n"))
    assert loaded.config.max_pods == 50
    assert loaded.config.sync_frequency.total_seconds() == 30
    assert loaded.warnings == ()


def test_json_file(tmp_path: Path) -> None:
    doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 50}
    loaded = load_config(_write(tmp_path, json.dumps(doc), "config.json"))
    assert loaded.config.max_pods == 50


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "empty; expected a KubeletConfiguration document"),
        ("\n  \n# only a comment\n", "empty; expected a KubeletConfiguration document"),
        ("---\n", "empty"),
        ("null\n", "empty"),
        ("- a\n- b\n", "expected a KubeletConfiguration mapping, got a list"),
        ("just text\n", 'expected a KubeletConfiguration mapping, got "just text"'),
        ("42\n", "expected a KubeletConfiguration mapping, got 42"),
        ("maxPods: [\n", "not valid YAML or JSON"),
        ('{"maxPods": 1', "not valid YAML or JSON"),
        ("maxPods: 1\n\tport: 2\n", "not valid YAML or JSON"),  # a tab is not YAML indentation
        (HEADER + "---\n" + HEADER, "not valid YAML or JSON: expected a single document"),
        ("kind: KubeletConfiguration\n", 'apiVersion missing; a kubelet config file needs apiVersion "kubelet.config'),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\n", "kind missing; a kubelet config file needs apiVersion"),
        ("maxPods: 10\n", "apiVersion and kind missing"),
        (
            "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
            'apiVersion: must be "kubelet.config.k8s.io/v1beta1", got "kubelet.config.k8s.io/v1alpha1"',
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
            'kind: must be "KubeletConfiguration", got "KubeProxyConfiguration"',
        ),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: [x]\n", 'kind: must be "KubeletConfiguration", got a list'),
        (HEADER + "!!python/object:os.system {}\n", "not valid YAML or JSON"),  # the safe loader refuses Python tags
    ],
)
def test_unusable_files_raise(tmp_path: Path, content: str, fragment: str) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert fragment in str(caught.value)


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file: No such file or directory"):
        load_config(tmp_path / "absent.yaml")


def test_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path)


def test_non_utf8_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(_write(tmp_path, HEADER.encode() + b"clusterDomain: \xff\xfe\n"))


def test_file_over_one_mib_raises(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "#" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        load_config(path)


def test_file_of_exactly_one_mib_loads(tmp_path: Path) -> None:
    body = HEADER + "maxPods: 7\n#"
    padding = MAX_CONFIG_BYTES - len(body) - 1
    path = _write(tmp_path, body + "x" * padding + "\n")
    assert path.stat().st_size == MAX_CONFIG_BYTES
    assert load_config(path).config.max_pods == 7


def test_duplicate_keys_warn_and_the_last_wins(tmp_path: Path) -> None:
    loaded = load_config(
        _write(tmp_path, HEADER + "maxPods: 10\nmaxPods: 20\nauthentication:\n  x509: {}\n  x509: {}\n")
    )
    assert loaded.config.max_pods == 20
    assert loaded.warnings == (
        'duplicate field "maxPods" (line 4); the last value is used',
        'duplicate field "x509" (line 7); the last value is used',
    )


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    content = HEADER + "base: &b {enabled: true}\nauthentication:\n  anonymous:\n    <<: *b\n    enabled: false\n"
    loaded = load_config(_write(tmp_path, content))
    assert loaded.config.authentication.anonymous.enabled is False
    assert loaded.warnings == ('unknown field "base"',)


def test_unknown_field_warnings_come_back_with_the_config(tmp_path: Path) -> None:
    loaded = load_config(_write(tmp_path, HEADER + "fooBar: 1\nauthentication:\n  foo: 2\n"))
    assert loaded.warnings == ('unknown field "fooBar"', 'unknown field "authentication.foo"')


def _settings() -> Settings:
    return Settings(
        node_name="worker-1",
        etcd_client_port=20001,
        etcd_peer_port=20002,
        apiserver_port=20003,
        controller_manager_port=20004,
        scheduler_port=20005,
        registry_port=20006,
        stream_port=20007,
        bridge="na0123456789",
        pod_cidr="198.18.7.0/24",
        service_cidr="198.19.0.0/16",
    )


def test_the_testbed_agent_config_loads_without_warnings(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    path = _write(tmp_path, configs.agent_config(layout, _settings()), "agent.yaml")
    loaded = load_config(path)
    assert loaded.warnings == ()
    config = loaded.config
    assert config.container_runtime_endpoint == f"unix://{layout.containerd_socket}"
    assert config.static_pod_path == str(layout.manifests)
    assert config.cgroup_root == "/nodeagent-na0123456789"
    assert config.pod_cidr == "198.18.7.0/24"
    assert config.address == "198.18.7.1"  # the testbed's node address: its pod range's gateway
