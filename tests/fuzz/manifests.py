"""Static pod manifests: bytes as the file source reads them (`nodeagent.sources.file.read_manifest_file` minus the
read) and as the URL source gets them: `load_manifest` (size, UTF-8, JSON or YAML, aliases, depth) and then
`decode_pod` (the defaults and the validation) or `decode_pod_list`. Documented errors: `ManifestError`,
`InvalidManifest` (its `NotAPod` included)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from nodeagent.sources.manifest import ManifestError, load_manifest
from nodeagent.sources.static import InvalidManifest, decode_pod, decode_pod_list, is_pod_list
from tests.fuzz.engine import Target
from tests.fuzz.podgen import minimal_pod, pods
from tests.fuzz.strategies import encoded, hostile_documents, json_values, mutated


def run(data: bytes) -> None:
    obj = load_manifest(data)
    if is_pod_list(obj):
        decode_pod_list(obj, node_name="node", source="http://198.18.0.1/pods")
        return
    decode_pod(obj, node_name="Node-1", source="/etc/kubernetes/manifests/web.yaml", is_file=True)


def _pod_list(items: list[Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodList", "items": items}


_docs = st.one_of(
    pods,
    mutated(minimal_pod()),
    pods.flatmap(lambda p: mutated(p, max_mutations=3)),
    st.lists(st.one_of(pods, json_values(4)), max_size=3).map(_pod_list),
    json_values(20),
)
strategy = st.one_of(
    encoded(_docs),
    hostile_documents.map(lambda text: text.encode()),
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda text: text.encode("utf-8")),
)

TARGET = Target("manifests", strategy, run, (ManifestError, InvalidManifest), __doc__ or "")
