"""A pod's ResourceClaims as upstream's k8s.io/dynamic-resource-allocation/resourceclaim helpers see them: pure
functions over the pod and claim dicts, with upstream's error texts (they reach the pod's events).

- `claim_name`: the ResourceClaim a `spec.resourceClaims` entry stands for: `resourceClaimName` as is, or, for
  `resourceClaimTemplateName`, the claim the resourceclaim controller made, named in `status.resourceClaimStatuses`
  (None there: no claim is needed). The template case says the claim must be owned by the pod;
- `is_for_pod`: a generated claim is controlled by the pod (its controller ownerReference has the pod's UID);
- `is_reserved_for_pod`: `status.reservedFor` names the pod's UID (the scheduler reserves the claim when it binds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]

ERR_API_UNSUPPORTED = "none of the supported fields are set"
ERR_CLAIM_NOT_FOUND = "ResourceClaim not created yet"


class ClaimError(Exception):
    """A pod's claim cannot be used; the message is upstream's."""


@dataclass(frozen=True)
class ClaimName:
    name: str | None  # None: no claim needed for this entry
    must_check_owner: bool


def _meta(obj: Obj) -> Obj:
    out: Obj = obj.get("metadata") or {}
    return out


def pod_claims(pod: Obj) -> Sequence[Obj]:
    return [c for c in ((pod.get("spec") or {}).get("resourceClaims") or []) if isinstance(c, Mapping)]


def claim_name(pod: Obj, pod_claim: Obj) -> ClaimName:
    """Upstream's resourceclaim.Name."""
    meta = _meta(pod)
    if pod_claim.get("resourceClaimName"):
        return ClaimName(str(pod_claim["resourceClaimName"]), False)
    if pod_claim.get("resourceClaimTemplateName"):
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == pod_claim.get("name"):
                name = status.get("resourceClaimName")
                return ClaimName(str(name) if name else None, True)
        raise ClaimError(f'pod "{meta.get("namespace", "")}/{meta.get("name", "")}": {ERR_CLAIM_NOT_FOUND}')
    raise ClaimError(
        f'pod "{meta.get("namespace", "")}/{meta.get("name", "")}", spec.resourceClaim "{pod_claim.get("name", "")}": '
        f"{ERR_API_UNSUPPORTED}"
    )


def is_for_pod(pod: Obj, claim: Obj) -> None:
    """Upstream's resourceclaim.IsForPod: raises when the pod is not the claim's controller."""
    pod_meta, claim_meta = _meta(pod), _meta(claim)
    controller = next((ref for ref in claim_meta.get("ownerReferences") or [] if ref.get("controller")), None)
    same_namespace = claim_meta.get("namespace", "") == pod_meta.get("namespace", "")
    if same_namespace and controller is not None and controller.get("uid") == pod_meta.get("uid"):
        return
    raise ClaimError(
        f"ResourceClaim {claim_meta.get('namespace', '')}/{claim_meta.get('name', '')} was not created for pod "
        f"{pod_meta.get('namespace', '')}/{pod_meta.get('name', '')} (pod is not owner)"
    )


def is_reserved_for_pod(pod: Obj, claim: Obj) -> bool:
    uid = _meta(pod).get("uid")
    return any(ref.get("uid") == uid for ref in (claim.get("status") or {}).get("reservedFor") or [])


def allocated_drivers(claim: Obj) -> list[str] | None:
    """The drivers of the claim's allocation results, in order and without repeats; None when not allocated."""
    allocation = (claim.get("status") or {}).get("allocation")
    if allocation is None:
        return None
    drivers: list[str] = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        driver = str(result.get("driver", ""))
        if driver not in drivers:
            drivers.append(driver)
    return drivers


def container_claim_requests(pod: Obj, container: Obj) -> list[tuple[str, str]]:
    """(claim name, request name) for each of the container's `resources.claims` ("" is the whole claim), in the
    order of the pod's claims (upstream's GetResources). Every pod claim's name is resolved, as upstream does:
    raises ClaimError as claim_name."""
    entries = [
        (str(entry.get("name", "")), str(entry.get("request") or ""))
        for entry in (container.get("resources") or {}).get("claims") or []
    ]
    out: list[tuple[str, str]] = []
    for pod_claim in pod_claims(pod):
        name = claim_name(pod, pod_claim).name
        if name is None:
            continue
        out.extend((name, request) for claim, request in entries if claim == pod_claim.get("name"))
    return out
