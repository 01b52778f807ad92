"""REST paths of the objects the agent reads and writes, built in one place.

Core objects live under `/api/v1`, grouped ones under `/apis/GROUP/VERSION`; namespaced ones add
`/namespaces/NS`. A collection path (no name) is what list, create and watch take.
"""

from __future__ import annotations

from urllib.parse import quote


def _segment(value: str, what: str) -> str:
    if not value:
        raise ValueError(f"empty {what} in an API path")
    return quote(value, safe="")


def api_path(
    resource: str,
    *,
    group: str = "",
    version: str = "v1",
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/namespaces/NS/pods/NAME/status` and the like; `group=""` is the core group."""
    ver = _segment(version, "version")
    parts = [f"/apis/{_segment(group, 'group')}/{ver}" if group else f"/api/{ver}"]
    if namespace is not None:
        parts.append(f"namespaces/{_segment(namespace, 'namespace')}")
    parts.append(_segment(resource, "resource"))
    if name is not None:
        parts.append(_segment(name, "name"))
    if subresource is not None:
        if name is None:
            raise ValueError("a subresource needs an object name")
        parts.append(_segment(subresource, "subresource"))
    return "/".join(parts)


def pods(namespace: str | None = None) -> str:
    """Pods of one namespace, or of all namespaces (what the agent watches with a spec.nodeName selector)."""
    return api_path("pods", namespace=namespace)


def pod(namespace: str, name: str, subresource: str | None = None) -> str:
    return api_path("pods", namespace=namespace, name=name, subresource=subresource)


def pod_status(namespace: str, name: str) -> str:
    return pod(namespace, name, "status")


def nodes() -> str:
    return api_path("nodes")


def node(name: str, subresource: str | None = None) -> str:
    return api_path("nodes", name=name, subresource=subresource)


def node_status(name: str) -> str:
    return node(name, "status")


def leases(namespace: str) -> str:
    return api_path("leases", group="coordination.k8s.io", namespace=namespace)


def lease(namespace: str, name: str) -> str:
    """The node's heartbeat lives at `lease("kube-node-lease", node_name)`."""
    return api_path("leases", group="coordination.k8s.io", namespace=namespace, name=name)


def events(namespace: str) -> str:
    """core/v1 Events, which the kubelet's recorder writes."""
    return api_path("events", namespace=namespace)


def event(namespace: str, name: str) -> str:
    return api_path("events", namespace=namespace, name=name)


def namespaces() -> str:
    return api_path("namespaces")


def namespace(name: str) -> str:
    return api_path("namespaces", name=name)


def configmaps(namespace: str) -> str:
    return api_path("configmaps", namespace=namespace)


def configmap(namespace: str, name: str) -> str:
    return api_path("configmaps", namespace=namespace, name=name)


def secret(namespace: str, name: str) -> str:
    return api_path("secrets", namespace=namespace, name=name)
