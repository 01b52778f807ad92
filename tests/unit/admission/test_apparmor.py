"""AppArmor and supplementalGroupsPolicy at admission: upstream's admit handlers, reasons and messages."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent import apparmor
from nodeagent.admission import APPARMOR, SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED, AdmitResult, admit

ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
NOT_ENABLED = AdmitResult(
    admit=False, reason="AppArmor", message="Cannot enforce AppArmor: AppArmor is not enabled on the host"
)
OK = AdmitResult(admit=True)
NODE: dict[str, Any] = {
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}},
}


def pod(
    *,
    pod_profile: str | None = None,
    container_profile: str | None = None,
    init_profile: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = "Pending",
) -> dict[str, Any]:
    def sc(profile: str | None) -> dict[str, Any]:
        return {} if profile is None else {"securityContext": {"appArmorProfile": {"type": profile}}}

    spec: dict[str, Any] = {
        "nodeName": "n1",
        "containers": [{"name": "c", "image": "img", **sc(container_profile)}],
        "initContainers": [{"name": "i", "image": "img", **sc(init_profile)}],
    }
    if pod_profile is not None:
        spec["securityContext"] = {"appArmorProfile": {"type": pod_profile}}
    out: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u", "annotations": annotations or {}},
        "spec": spec,
    }
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        (pod(), OK),
        (pod(pod_profile="RuntimeDefault"), NOT_ENABLED),
        (pod(pod_profile="Localhost"), NOT_ENABLED),
        (pod(container_profile="RuntimeDefault"), NOT_ENABLED),
        (pod(init_profile="RuntimeDefault"), NOT_ENABLED),
        # Unconfined asks for nothing the host must have.
        (pod(pod_profile="Unconfined", container_profile="Unconfined"), OK),
        # The deprecated annotations still count in v1.34.
        (pod(annotations={ANNOTATION + "c": "runtime/default"}), NOT_ENABLED),
        (pod(annotations={ANNOTATION + "c": "localhost/p1"}), NOT_ENABLED),
        (pod(annotations={ANNOTATION + "c": "unconfined"}), OK),
        # Upstream checks only a Pending pod (a static pod is Pending from its source; none here is unset).
        (pod(pod_profile="RuntimeDefault", phase=None), NOT_ENABLED),
        (pod(pod_profile="RuntimeDefault", phase="Running"), OK),
    ],
)
def test_apparmor_on_a_host_without_it(the_pod: dict[str, Any], expected: AdmitResult) -> None:
    assert admit(the_pod, NODE, [], host_apparmor=False) == expected
    # Standalone (no Node) checks it too, as upstream's handler does not need the Node.
    assert admit(the_pod, None, [], host_apparmor=False) == expected


def test_apparmor_on_a_host_with_it() -> None:
    assert admit(pod(pod_profile="RuntimeDefault"), NODE, [], host_apparmor=True) == OK
    empty = pod()
    empty["spec"]["containers"][0]["securityContext"] = {
        "appArmorProfile": {"type": "Localhost", "localhostProfile": " "}
    }
    refused = admit(empty, NODE, [], host_apparmor=True)
    assert (refused.admit, refused.reason) == (False, APPARMOR)
    assert refused.message.startswith("Cannot enforce AppArmor: invalid empty AppArmor profile name")


def test_apparmor_is_checked_after_the_predicates() -> None:
    # As upstream's handler order: a pod that fails a predicate gets that reason, not AppArmor's.
    big = pod(pod_profile="RuntimeDefault")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
    assert admit(big, NODE, [], host_apparmor=False).reason == "OutOfcpu"


def test_this_host_has_no_apparmor() -> None:
    # TESTBED.md: /sys/module/apparmor is absent on these machines; the default reads the host.
    assert apparmor.host_enabled() is False
    assert admit(pod(pod_profile="RuntimeDefault"), NODE, []) == NOT_ENABLED


@pytest.mark.parametrize(
    ("policy", "features", "admitted"),
    [
        (None, None, True),
        ("Merge", None, True),
        ("Strict", None, False),
        ("Strict", {"supplementalGroupsPolicy": False}, False),
        ("Strict", {"supplementalGroupsPolicy": True}, True),
    ],
)
def test_supplemental_groups_policy_strict_needs_the_runtime(
    policy: str | None, features: dict[str, bool] | None, admitted: bool
) -> None:
    the_pod = pod()
    if policy is not None:
        the_pod["spec"]["securityContext"] = {"supplementalGroupsPolicy": policy}
    node = {**NODE, "status": {**NODE["status"], **({"features": features} if features is not None else {})}}
    result = admit(the_pod, node, [], host_apparmor=False)
    if admitted:
        assert result == OK
    else:
        assert result == AdmitResult(
            admit=False,
            reason=SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
            message="SupplementalGroupsPolicy=Strict is not supported in this node",
        )


@pytest.mark.parametrize(
    "resources",
    [
        None,
        {},
        {"requests": {"cpu": "100m"}},
        {"limits": {"memory": "64Mi"}},
        {"requests": {"example.com/widget": "1"}},
    ],
)
def test_pod_level_resources_are_admitted(resources: dict[str, Any] | None) -> None:
    """PodLevelResources is beta and on in v1.34: upstream's podFeaturesAdmitHandler admits pods that set
    spec.resources, and so does nodeagent now that it honours them (with a Node and without one)."""
    the_pod = pod()
    if resources is not None:
        the_pod["spec"]["resources"] = resources
    assert admit(the_pod, NODE, [], host_apparmor=False) == OK
    assert admit(the_pod, None, [], host_apparmor=False) == OK
