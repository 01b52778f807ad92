"""The v1beta1 fields nodeagent has no field of its own for: a value nodeagent's behaviour matches loads without a
word, any other is refused with what nodeagent does instead, and only the fields upstream ignores too warn. Also
kernelMemcgNotification and mergeDefaultEvictionSettings, which were among them and are now honoured, and the docs
table that must list every rule."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.config import ConfigError, parse_config
from nodeagent.config.kubelet_config import DEFAULT_EVICTION_HARD
from nodeagent.config.upstreamonly import UPSTREAM_ONLY_RULES, Honoured, IgnoredUpstream

DOCS = Path(__file__).resolve().parents[3] / "docs" / "kubelet-config.md"


def _text(fields: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **fields})


# What kubeadm v1.34 writes into every node's config for the fields nodeagent has none of (docs/kubeadm.md).
KUBEADM_FIELDS: dict[str, Any] = {
    "cpuManagerReconcilePeriod": "0s",
    "crashLoopBackOff": {},
    "logging": {
        "flushFrequency": 0,
        "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}},
        "verbosity": 0,
    },
    "memorySwap": {},
    "shutdownGracePeriodCriticalPods": "0s",
    "volumeStatsAggPeriod": "0s",
}


def test_kubeadms_config_loads_without_a_warning() -> None:
    loaded = parse_config(_text(KUBEADM_FIELDS), source="test")
    assert loaded.warnings == ()


@pytest.mark.parametrize(
    ("fields",),
    [
        ({"cpuCFSQuota": True},),
        ({"cpuCFSQuotaPeriod": "100ms"},),
        ({"contentType": "application/json"},),
        ({"kubeAPIQPS": -1},),
        ({"eventRecordQPS": 0},),
        ({"memorySwap": {"swapBehavior": "NoSwap"}},),
        ({"topologyManagerScope": "pod"},),
        ({"crashLoopBackOff": {"maxContainerRestartPeriod": "5m"}},),
        ({"localStorageCapacityIsolation": True, "seccompDefault": False},),
        ({"logging": {"format": "text"}},),
        ({"tracing": None},),
    ],
)
def test_values_nodeagent_behaves_as_load_silently(fields: dict[str, Any]) -> None:
    assert parse_config(_text(fields), source="test").warnings == ()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"cpuManagerPolicy": "static"},
            'cpuManagerPolicy: "static": nodeagent cannot honour this value (only the none',
        ),
        ({"cpuCFSQuota": False}, "cpuCFSQuota: false: nodeagent cannot honour this value ("),
        ({"contentType": "application/vnd.kubernetes.protobuf"}, "talks JSON to the apiserver"),
        ({"kubeAPIQPS": 50}, "kubeAPIQPS: 50: nodeagent cannot honour this value ("),
        ({"seccompDefault": True}, "Unconfined"),
        ({"tlsCipherSuites": ["TLS_AES_128_GCM_SHA256"]}, "tlsCipherSuites: a list: nodeagent cannot honour"),
        ({"logging": {"format": "json"}}, "logging: a mapping: nodeagent cannot honour this value ("),
        ({"logging": {"verbosity": 4}}, "format text and verbosity 0 only"),
        ({"memorySwap": {"swapBehavior": "LimitedSwap"}}, "without swap (NoSwap)"),
        ({"oomScoreAdj": -1001}, "oomScoreAdj: must be between -1000 and 1000"),
        ({"podsPerCore": -1}, "podsPerCore: must be greater than or equal to 0"),
        ({"localStorageCapacityIsolation": False}, "always isolates local storage"),
        ({"cpuCFSQuotaPeriod": "50ms"}, "100ms"),
        ({"cpuCFSQuota": 1}, "cpuCFSQuota: 1"),  # an int is not a boolean
    ],
)
def test_values_nodeagent_cannot_honour_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_text(fields), source="test")
    assert message in str(refused.value)


def test_every_refusal_is_listed_not_only_the_first() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_text({"runOnce": True, "protectKernelDefaults": True}), source="test")
    assert "runOnce: true" in str(refused.value)
    assert "protectKernelDefaults: true" in str(refused.value)


@pytest.mark.parametrize(("raw", "on"), [(None, False), (False, False), (True, True)])
def test_kernel_memcg_notification_is_read_and_off_by_default(raw: bool | None, on: bool) -> None:
    fields = {} if raw is None else {"kernelMemcgNotification": raw}
    loaded = parse_config(_text(fields), source="test")
    assert loaded.config.kernel_memcg_notification is on
    assert loaded.warnings == ()


@pytest.mark.parametrize(
    ("merge", "expected"),
    [
        (False, {"memory.available": "200Mi"}),
        (True, {**DEFAULT_EVICTION_HARD, "memory.available": "200Mi"}),
    ],
)
def test_merge_default_eviction_settings_keeps_the_signals_left_out(merge: bool, expected: dict[str, str]) -> None:
    fields = {"evictionHard": {"memory.available": "200Mi"}, "mergeDefaultEvictionSettings": merge}
    assert dict(parse_config(_text(fields), source="test").config.eviction_hard) == expected


def test_the_docs_table_lists_every_rule() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (honoured|refused unless|ignored)", DOCS.read_text(), re.M))
    expected = {
        name: "ignored" if isinstance(rule, IgnoredUpstream) else "refused unless"
        for name, rule in UPSTREAM_ONLY_RULES.items()
    }
    implemented = [
        *("kernelMemcgNotification", "mergeDefaultEvictionSettings", "podLogsDir", "failCgroupV1"),
        *("maxOpenFiles", "oomScoreAdj", "podsPerCore"),
        *("shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority"),
    ]
    expected.update(dict.fromkeys(implemented, "honoured"))
    assert rows == expected
    assert all(isinstance(r, Honoured | IgnoredUpstream) for r in UPSTREAM_ONLY_RULES.values())


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("/srv/pod-logs", None),
        ("pod-logs", "podLogsDir: must be an absolute path"),
        ("/srv/../pod-logs", "podLogsDir: must be a normalised path (/pod-logs)"),
    ],
)
def test_pod_logs_dir_is_read_and_checked_as_upstream(raw: str, problem: str | None) -> None:
    if problem is None:
        assert parse_config(_text({"podLogsDir": raw}), source="test").config.pod_logs_dir == raw
        return
    with pytest.raises(ConfigError) as refused:
        parse_config(_text({"podLogsDir": raw}), source="test")
    assert problem in str(refused.value)
