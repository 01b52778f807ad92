"""KubeClient under a real apiserver that throttles: API priority and fairness sends a user's every request to a
priority level with no seats of its own and none to borrow, which rejects (429 with a Retry-After of 1 s and up, as
its dropped-requests tracker says) a request that arrives while another of the level's is executing. A burst of
concurrent creates from that user is throttled in part; the client waits each Retry-After and sends the POST again,
body and all, as client-go does (nodeagent/kube/retry.py), so every create succeeds once and holds its own data;
with no retries allowed, the burst's throttled requests fail with TooManyRequests."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry

from nodeagent.clock import SystemClock
from nodeagent.kube import KubeClient, NotFound, TooManyRequests, paths
from nodeagent.kube.kubeconfig import load_kubeconfig
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.testbed.kubeconfig import write_kubeconfig
from nodeagent.testbed.pki import CertificateAuthority

if TYPE_CHECKING:
    from nodeagent.testbed.testbed import Testbed

pytestmark = pytest.mark.integration

NS = "default"
DEADLINE = 60.0
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


class RecordingClock(SystemClock):
    """Real time; every sleep asked for is recorded (the Retry-After waits)."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(seconds)


def rejecting(name: str, subject: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A priority level with no seats of its own and none to borrow, rejecting what it cannot seat, and a flow
    schema sending every request of `subject` (a FlowSchema subject: a user, a group) to it."""
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 50,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [subject],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                }
            ],
        },
    }
    return level, schema


def _configmaps_role(name: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return role, binding


def _client(config: Path, registry: CollectorRegistry, clock: RecordingClock, max_retries: int) -> KubeClient:
    client = KubeClient(load_kubeconfig(config), clock=clock, max_retries=max_retries)
    client.metrics = RestClientMetrics(registry)
    return client


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


BURST = 12  # concurrent requests: enough that some arrive while another executes
ROUNDS = 5  # bursts tried until one is throttled


async def _burst_of_creates(client: KubeClient, prefix: str) -> list[dict[str, Any] | BaseException]:
    bodies = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i}"}, "data": {"i": str(i) * 200}}
        for i in range(BURST)
    ]
    return list(await asyncio.gather(*(client.create(paths.configmaps(NS), b) for b in bodies), return_exceptions=True))


async def test_a_throttled_burst_is_retried_after_retry_after_and_all_of_it_gets_through(
    testbed: Testbed, admin: KubeClient, tmp_path: Path
) -> None:
    name = f"kc-throttled-{uuid.uuid4().hex[:8]}"
    ca = CertificateAuthority.load(testbed.layout.pki)
    config = tmp_path / "throttled.kubeconfig"
    pair = ca.issue(tmp_path, "throttled", common_name=name, client=True)
    write_kubeconfig(
        config, server=testbed.settings.apiserver_url, ca=testbed.layout.pki / "ca.crt", client=pair, user=name
    )
    level, schema = rejecting(name, {"kind": "User", "user": {"name": name}})
    role, binding = _configmaps_role(name, name)
    host = load_kubeconfig(config).server.split("://", 1)[1]
    created: list[str] = []
    await admin.create(f"{RBAC}/namespaces/{NS}/roles", role)
    await admin.create(f"{RBAC}/namespaces/{NS}/rolebindings", binding)
    await admin.create(f"{FLOWCONTROL}/prioritylevelconfigurations", level)
    await admin.create(f"{FLOWCONTROL}/flowschemas", schema)
    try:
        async with asyncio.timeout(4 * DEADLINE):
            # Without retries: bursts until one has requests rejected; each of those fails with TooManyRequests and
            # its Retry-After; the others are created.
            async with KubeClient(load_kubeconfig(config), max_retries=0) as bare:
                for round_ in range(ROUNDS):
                    results = await _burst_of_creates(bare, f"{name}-bare{round_}")
                    created += [r["metadata"]["name"] for r in results if isinstance(r, dict)]
                    rejected = [r for r in results if isinstance(r, BaseException)]
                    assert all(isinstance(r, TooManyRequests) for r in rejected), rejected
                    if rejected:
                        break
                assert rejected, f"no request of {ROUNDS} bursts of {BURST} was throttled"
                assert all(
                    isinstance(r, TooManyRequests) and r.retry_after is not None and r.retry_after >= 1.0
                    for r in rejected
                )

            # With client-go's retries: every create of a throttled burst succeeds, once, with its own body.
            registry, clock = CollectorRegistry(), RecordingClock()
            async with _client(config, registry, clock, max_retries=10) as client:
                for round_ in range(ROUNDS):
                    results = await _burst_of_creates(client, f"{name}-r{round_}")
                    assert all(isinstance(r, dict) for r in results), results
                    created += [r["metadata"]["name"] for r in results if isinstance(r, dict)]
                    if _sample(registry, "rest_client_requests_total", code="429", host=host, method="POST"):
                        break
            throttled = _sample(registry, "rest_client_requests_total", code="429", host=host, method="POST")
            assert throttled >= 1.0, f"no request of {ROUNDS} bursts of {BURST} was throttled"
            # Each 429 was followed by a retry (429 again, or the create), after a wait of its Retry-After.
            retries = _sample(registry, "rest_client_request_retries_total", code="429", host=host, verb="POST")
            retries += _sample(registry, "rest_client_request_retries_total", code="201", host=host, verb="POST")
            assert retries == throttled == len(clock.sleeps)
            assert all(s >= 1.0 and s == int(s) for s in clock.sleeps), clock.sleeps
            for i in range(BURST):
                stored = await admin.get(paths.configmap(NS, f"{name}-r{round_}-{i}"))
                assert stored["data"] == {"i": str(i) * 200}
    finally:
        for path in (
            f"{FLOWCONTROL}/flowschemas/{name}",
            f"{FLOWCONTROL}/prioritylevelconfigurations/{name}",
            f"{RBAC}/namespaces/{NS}/rolebindings/{name}",
            f"{RBAC}/namespaces/{NS}/roles/{name}",
            *(paths.configmap(NS, c) for c in created),
        ):
            with contextlib.suppress(NotFound):
                await admin.delete(path)
