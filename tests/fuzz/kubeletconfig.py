"""KubeletConfiguration text as `nodeagent run --config` reads it: `nodeagent.config.loading.parse_config` (YAML or
JSON, duplicate keys, decoding, defaults, validation, eviction thresholds). Documented error: `ConfigError`."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from nodeagent.config.errors import ConfigError
from nodeagent.config.kubelet_config import defaults
from nodeagent.config.loading import parse_config
from nodeagent.config.schema import encode_document
from tests.fuzz.engine import Target
from tests.fuzz.strategies import dump_yaml, hostile_documents, json_values, mutated


def _full() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(encode_document(defaults()), default=str))
    doc.update(
        {
            "staticPodPath": "/etc/kubernetes/manifests",
            "evictionSoft": {"memory.available": "300Mi", "nodefs.available": "15%"},
            "evictionSoftGracePeriod": {"memory.available": "1m30s", "nodefs.available": "2m"},
            "evictionMinimumReclaim": {"memory.available": "0Mi", "nodefs.available": "500Mi"},
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "kubeReserved": {"cpu": "100m", "memory": "100Mi", "pid": "100"},
            "registerWithTaints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
            "allowedUnsafeSysctls": ["net.core.*", "kernel.msg*"],
            "clusterDNS": ["198.19.0.10"],
        }
    )
    return doc


_FULL = _full()
_docs = st.one_of(mutated(_FULL, max_mutations=6), json_values(15))
strategy = st.one_of(
    st.builds(dump_yaml, _docs),
    st.builds(json.dumps, _docs),
    _docs.map(dump_yaml).flatmap(lambda text: st.integers(0, len(text)).map(lambda n: text[:n])),
    hostile_documents,
    st.text(max_size=200),
)


def run(text: str) -> None:
    parse_config(text, source="fuzz.yaml")


TARGET = Target("kubeletconfig", strategy, run, (ConfigError,), __doc__ or "")
