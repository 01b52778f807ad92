"""Requests to the apiserver as plain data, as lightkube builds them: what to send, never how.

Every verb of the client is a function here from its arguments to an `ApiRequest`; `client.KubeClient` is the thin
layer that sends one through httpx. Tests check what is asked for without a transport.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Obj = dict[str, Any]
"""A Kubernetes object, list or Status as the apiserver's JSON: the agent builds and patches these itself."""

PatchBody = Obj | list[Obj]
"""A patch document: an object for strategic/merge/apply patches, a list of operations for a JSON patch."""

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
PatchType = Literal["strategic", "merge", "json", "apply"]
PropagationPolicy = Literal["Orphan", "Background", "Foreground"]

JSON = "application/json"
PATCH_CONTENT_TYPES: dict[PatchType, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    # JSON is YAML, so the body goes out as JSON under the apply content type.
    "apply": "application/apply-patch+yaml",
}


@dataclass(frozen=True)
class ApiRequest:
    method: Method
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: PatchBody | None = None
    content_type: str | None = None


def _params(**values: str | int | bool | None) -> tuple[tuple[str, str], ...]:
    """Query parameters in the apiserver's camelCase names, leaving out the unset ones."""
    out: list[tuple[str, str]] = []
    for key, value in values.items():
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append((key, text))
    return tuple(out)


def get_request(path: str, *, resource_version: str | None = None) -> ApiRequest:
    """A GET; resource_version "0" lets the apiserver answer from its watch cache."""
    return ApiRequest("GET", path, _params(resourceVersion=resource_version))


def list_request(
    path: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    resource_version: str | None = None,
    limit: int | None = None,
    continue_token: str | None = None,
) -> ApiRequest:
    # The apiserver refuses resourceVersion together with continue: the token already pins the snapshot.
    return ApiRequest(
        "GET",
        path,
        _params(
            labelSelector=label_selector or None,
            fieldSelector=field_selector or None,
            resourceVersion=None if continue_token else resource_version,
            limit=limit,
            **{"continue": continue_token or None},
        ),
    )


def create_request(path: str, body: Obj, *, field_manager: str | None = None) -> ApiRequest:
    return ApiRequest("POST", path, _params(fieldManager=field_manager), body, JSON)


def replace_request(path: str, body: Obj, *, field_manager: str | None = None) -> ApiRequest:
    return ApiRequest("PUT", path, _params(fieldManager=field_manager), body, JSON)


def patch_request(
    path: str,
    body: PatchBody,
    *,
    patch_type: PatchType = "strategic",
    field_manager: str | None = None,
    force: bool | None = None,
    subresource: str | None = None,
) -> ApiRequest:
    if patch_type not in PATCH_CONTENT_TYPES:
        raise ValueError(f"unknown patch type {patch_type!r}")
    if patch_type == "apply" and not field_manager:
        raise ValueError("a server-side apply patch needs a field manager")
    if force is not None and patch_type != "apply":
        raise ValueError("force is only meaningful for a server-side apply patch")
    if patch_type == "json" and not isinstance(body, list):
        raise ValueError("a JSON patch is a list of operations")
    if patch_type != "json" and not isinstance(body, dict):
        raise ValueError(f"a {patch_type} patch is an object")
    if subresource:
        path = f"{path}/{subresource}"
    return ApiRequest(
        "PATCH",
        path,
        _params(fieldManager=field_manager, force=force),
        body,
        PATCH_CONTENT_TYPES[patch_type],
    )


def delete_request(
    path: str,
    *,
    grace_period_seconds: int | None = None,
    preconditions_uid: str | None = None,
    preconditions_resource_version: str | None = None,
    propagation_policy: PropagationPolicy | None = None,
) -> ApiRequest:
    options: Obj = {}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    preconditions = {
        k: v for k, v in (("uid", preconditions_uid), ("resourceVersion", preconditions_resource_version)) if v
    }
    if preconditions:
        options["preconditions"] = preconditions
    if propagation_policy is not None:
        options["propagationPolicy"] = propagation_policy
    if not options:
        return ApiRequest("DELETE", path)
    body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", **options}
    return ApiRequest("DELETE", path, (), body, JSON)


def watch_request(
    path: str,
    *,
    resource_version: str,
    field_selector: str | None = None,
    label_selector: str | None = None,
    timeout_seconds: int | None = None,
    allow_bookmarks: bool = True,
) -> ApiRequest:
    return ApiRequest(
        "GET",
        path,
        _params(
            watch=True,
            resourceVersion=resource_version,
            labelSelector=label_selector or None,
            fieldSelector=field_selector or None,
            timeoutSeconds=timeout_seconds,
            allowWatchBookmarks=True if allow_bookmarks else None,
        ),
    )
