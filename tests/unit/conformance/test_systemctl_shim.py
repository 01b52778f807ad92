"""The systemctl shim's mapping of the node e2e suite's calls (test/e2e_node/util.go v1.34.4) onto the agent.

Fakes stand in for the agent's process here; tests/integration/conformance/test_systemctl_shim.py stops and starts
a real agent on a testbed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.conformance import systemctl_shim
from nodeagent.conformance.systemctl_shim import (
    UNIT,
    Command,
    Kubelet,
    ShimError,
    ShimState,
    Verb,
    execute,
    list_units_output,
    parse,
)

# findKubeletServiceName's regex: the unit is its first match in list-units' output.
SUITE_UNIT_REGEX = re.compile(r"(kubelet-\w+)")


class FakeAgent:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, running: bool) -> None:
        self.running = running
        self.calls: list[str] = []
        monkeypatch.setattr(systemctl_shim, "_agent_running", lambda _state: self.running)
        monkeypatch.setattr(systemctl_shim, "_stop", self._stop)
        monkeypatch.setattr(systemctl_shim, "_start", self._start)

    def _stop(self, _state: ShimState) -> bool:
        self.calls.append("stop")
        was, self.running = self.running, False
        return was

    async def _start(self, _state: ShimState) -> int:
        self.calls.append("start")
        self.running = True
        return 4242


def state(tmp_path: Path) -> ShimState:
    return ShimState(testbed=tmp_path / "tb", config=tmp_path / "kubelet-config", log=tmp_path / "log")


def suite_call(line: str) -> Command:
    """The argument list `sudo systemctl ...` gets from the suite (after `systemctl`)."""
    return parse(line.split()[1:])


def test_the_suites_calls_parse() -> None:
    assert suite_call("systemctl list-units *kubelet* --state=running") == Command(
        Verb.LIST_UNITS, pattern="*kubelet*", running_only=True
    )
    assert suite_call("systemctl list-units *kubelet*") == Command(Verb.LIST_UNITS, pattern="*kubelet*")
    for verb in (Verb.RESET_FAILED, Verb.KILL, Verb.RESTART):
        # the suite names the unit as its regex matched it, without `.service`
        assert suite_call(f"systemctl {verb.value} kubelet-nodeagent") == Command(verb, unit=UNIT)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no verb"),
        (["daemon-reload"], "'daemon-reload' is not served"),
        (["mask", "--now", "locksmithd"], "'mask' is not served"),
        (["kill", "--signal=SIGKILL", "kubelet-nodeagent"], "option '--signal=SIGKILL' is not served"),
        (["restart"], "takes one unit, got 0"),
        (["stop", "a", "b"], "takes one unit, got 2"),
        (["list-units", "a", "b"], "at most one pattern"),
        (["kill", "--state=running", "kubelet-nodeagent"], "--state is not served with kill"),
    ],
)
def test_what_is_not_served_is_refused_by_name(args: list[str], message: str) -> None:
    with pytest.raises(ShimError, match=re.escape(message)):
        parse(args)


def test_list_units_names_the_unit_the_suite_looks_for() -> None:
    out = list_units_output(UNIT, active=True, pattern="*kubelet*", running_only=True)
    match = SUITE_UNIT_REGEX.search(out)
    assert match is not None and match.group(0) == "kubelet-nodeagent"
    assert "1 loaded units listed." in out


def test_list_units_running_only_hides_a_stopped_unit_and_all_shows_it() -> None:
    assert (
        SUITE_UNIT_REGEX.search(list_units_output(UNIT, active=False, pattern="*kubelet*", running_only=True)) is None
    )
    shown = list_units_output(UNIT, active=False, pattern="*kubelet*", running_only=False)
    assert "kubelet-nodeagent.service loaded inactive dead" in shown


def test_list_units_pattern_filters() -> None:
    assert (
        SUITE_UNIT_REGEX.search(list_units_output(UNIT, active=True, pattern="*containerd*", running_only=False))
        is None
    )
    assert SUITE_UNIT_REGEX.search(list_units_output(UNIT, active=True, pattern="", running_only=False)) is not None


def test_kill_stops_a_running_agent_and_restart_starts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = FakeAgent(monkeypatch, running=True)
    s = state(tmp_path)
    assert execute(s, suite_call("systemctl reset-failed kubelet-nodeagent")) == (0, "")
    assert agent.calls == []
    assert execute(s, suite_call("systemctl kill kubelet-nodeagent")) == (0, "")
    assert agent.calls == ["stop"] and not agent.running
    code, out = execute(s, suite_call("systemctl list-units *kubelet* --state=running"))
    assert code == 0 and SUITE_UNIT_REGEX.search(out) is None
    assert execute(s, suite_call("systemctl restart kubelet-nodeagent")) == (0, "")
    assert agent.calls == ["stop", "stop", "start"] and agent.running


def test_restart_of_a_running_agent_stops_it_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = FakeAgent(monkeypatch, running=True)
    execute(state(tmp_path), parse(["restart", UNIT]))
    assert agent.calls == ["stop", "start"]


def test_start_of_a_running_agent_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = FakeAgent(monkeypatch, running=True)
    assert execute(state(tmp_path), parse(["start", UNIT])) == (0, "")
    assert agent.calls == []


def test_is_active_answers_as_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = FakeAgent(monkeypatch, running=True)
    assert execute(state(tmp_path), parse(["is-active", UNIT])) == (0, "active\n")
    agent.running = False
    assert execute(state(tmp_path), parse(["is-active", UNIT])) == (systemctl_shim.EXIT_INACTIVE, "inactive\n")


def test_another_unit_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = FakeAgent(monkeypatch, running=True)
    code, out = execute(state(tmp_path), parse(["kill", "containerd"]))
    assert code == 5 and "Unit containerd.service not loaded" in out
    assert agent.calls == []


def test_state_round_trips(tmp_path: Path) -> None:
    s = ShimState(testbed=tmp_path / "tb", config=tmp_path / "c", log=tmp_path / "l", kubelet=Kubelet.UPSTREAM)
    s.save(tmp_path / "shim.json")
    assert ShimState.load(tmp_path / "shim.json") == s


def test_main_prints_and_exits_with_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeAgent(monkeypatch, running=False)
    s = state(tmp_path)
    s.save(tmp_path / "shim.json")
    assert systemctl_shim.main(["--state", str(tmp_path / "shim.json"), "is-active", UNIT]) == 3
    assert systemctl_shim.main(["--state", str(tmp_path / "shim.json"), "daemon-reload"]) == 1
    out = capsys.readouterr().out
    assert out == "inactive\nsystemctl shim: verb 'daemon-reload' is not served (only kubelet-nodeagent.service)\n"
    assert "args='daemon-reload' exit=1" in (tmp_path / "log").read_text()


def test_the_pid_names_are_the_testbeds() -> None:
    from nodeagent.testbed.testbed import AGENT, UPSTREAM_KUBELET  # noqa: PLC0415

    assert systemctl_shim.PID_NAMES == {Kubelet.NODEAGENT: AGENT, Kubelet.UPSTREAM: UPSTREAM_KUBELET}
