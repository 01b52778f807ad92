"""Four scenarios of the differential corpus (tests/differential/) on nodeagent and on the upstream kubelet, one
after the other on this session's testbed: fails on any difference, in the API status or in the runtime spec
containerd holds, that no `known_differences` entry explains, so that the corpus stays runnable. The full corpus is
run by hand (docs/differential.md).

Never skipped: without the upstream kubelet the test fails with the command that builds it.
"""

from __future__ import annotations

from nodeagent.testbed.testbed import Testbed
from tests.differential import agents
from tests.differential.compare import table
from tests.differential.runner import run
from tests.differential.scenario import load_all

# One of each family: a crash loop (restart back-off and its events), a probe turning readiness off through CRI
# exec, a graceful delete (termination states and the Killing event), and capabilities added and dropped (seen only
# in the runtime spec: the API status of a pod that got no capability change is the same).
SCENARIOS = ("crashloop-always", "probe-readiness-exec-toggle", "running-delete-grace", "spec-capabilities")


async def test_four_scenarios_behave_alike_on_nodeagent_and_the_kubelet(testbed: Testbed) -> None:
    try:
        agents.check_kubelet()
    except agents.AgentUnavailable as exc:
        raise AssertionError(f"{exc}\ninstall it with: {agents.INSTALL_KUBELET}") from exc
    scenarios = load_all(only=SCENARIOS)
    log_dir = testbed.layout.logs / "differential"
    log_dir.mkdir(parents=True, exist_ok=True)
    report = await run(testbed, scenarios, ("nodeagent", "kubelet"), log_dir, progress=lambda _: None)
    assert [c.scenario for c in report.comparisons] == list(SCENARIOS)
    for agent, by_scenario in report.recordings.items():
        for name, recording in by_scenario.items():
            assert not recording.error, f"{agent} {name}: {recording.error}"
            assert recording.states, f"{agent} {name}: the watch recorded no pod state"
            assert any(k.startswith("container[") for k in recording.runtime), f"{agent} {name}: no runtime spec"
    capabilities = report.recordings["kubelet"]["spec-capabilities"].runtime
    assert "CAP_NET_ADMIN" in capabilities["container[p/addrop].runtimeSpec.process.capabilities.bounding"]
    diffs = "\n".join(f"=== {c.scenario}\n{c.diff}" for c in report.unexplained)
    assert not report.unexplained, (
        f"unexplained differences (agent logs in {log_dir}):\n{table(report.comparisons)}\n{diffs}"
    )
