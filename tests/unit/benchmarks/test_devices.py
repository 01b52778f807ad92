"""benchmarks/devices.py's figures: stats, the comparison with the plain pods, the goals, the summary."""

from __future__ import annotations

import math

import pytest

from benchmarks import devices


def test_stats_quote_the_median_and_the_nearest_rank_p90() -> None:
    assert devices.stats([0.3, 0.1, 0.2, 0.5, 0.4]) == {"n": 5, "p50_s": 0.3, "p90_s": 0.5}
    assert devices.stats([0.2, 0.4]) == {"n": 2, "p50_s": 0.3, "p90_s": 0.4}
    empty = devices.stats([])
    assert empty["n"] == 0 and math.isnan(empty["p50_s"]) and math.isnan(empty["p90_s"])


def test_versus_plain_gives_the_added_milliseconds_and_the_ratio() -> None:
    assert devices.versus_plain([0.25, 0.27, 0.26], [0.2, 0.22, 0.21]) == {
        "added_p50_ms": 50.0,
        "added_p90_ms": 50.0,
        "ratio_p50": 1.238,
    }
    # Faster than plain is a negative addition.
    assert devices.versus_plain([0.2], [0.21])["added_p50_ms"] == -10.0


@pytest.mark.parametrize(("added", "met"), [(-5.0, True), (30.0, True), (30.1, False)])
def test_the_device_plugin_goal_is_30_ms_at_p50(added: float, met: bool) -> None:
    assert devices.device_plugin_goal_met(added) is met


@pytest.mark.parametrize(("added", "driver", "met"), [(70.0, 10.0, True), (70.1, 10.0, False), (55.0, 0.0, True)])
def test_the_dra_goal_is_60_ms_beyond_the_driver(added: float, driver: float, met: bool) -> None:
    assert devices.dra_goal_met(added, driver) is met


def test_summarize_checks_both_goals_on_both_measures() -> None:
    start = {"plain": [0.40, 0.42, 0.41], "device_plugin": [0.43, 0.44, 0.42], "dra": [0.60, 0.62, 0.61]}
    node = {"plain": [0.20, 0.22, 0.21], "device_plugin": [0.22, 0.21, 0.23], "dra": [0.25, 0.26, 0.27]}
    out = devices.summarize(start, node, [0.004, 0.006, 0.005])
    assert out["driver_prepare_p50_ms"] == 5.0
    assert out["start"]["device_plugin_vs_plain"]["added_p50_ms"] == 20.0
    assert out["start"]["device_plugin_goal_met"] is True
    assert out["start"]["dra_vs_plain"]["added_p50_ms"] == 200.0
    assert out["start"]["dra_added_beyond_driver_p50_ms"] == 195.0
    assert out["start"]["dra_goal_met"] is False
    assert out["node"]["dra_vs_plain"]["added_p50_ms"] == 50.0
    assert out["node"]["dra_goal_met"] is True
    line = devices.summary_line({**out, "pods": 3, "load_before": 0.5, "load_after": 0.7})
    assert line.startswith("devices (3 pods per kind, load 0.5→0.7): create→Running p50/p90: plain 0.41/0.42s")
    assert "DRA 0.61/0.62s (+200.0 ms, +195.0 beyond the driver, goal +60: missed)" in line
    assert line.endswith("driver NodePrepareResources p50 5.0 ms")


def test_the_three_pods_differ_only_in_what_they_ask_for() -> None:
    plain = devices.plain_pod("p", "img")
    dp = devices.device_plugin_pod("p", "img")
    dra = devices.dra_pod("p", "img")
    assert plain["spec"]["terminationGracePeriodSeconds"] == 1
    assert dp["spec"]["containers"][0]["resources"] == {"limits": {"example.com/resource": "1"}}
    assert dra["spec"]["resourceClaims"] == [{"name": "accel", "resourceClaimTemplateName": devices.TEMPLATE}]
    assert dra["spec"]["containers"][0]["resources"] == {"claims": [{"name": "accel"}]}
    for body in (dp, dra):
        body["spec"]["containers"][0].pop("resources")
        body["spec"].pop("resourceClaims", None)
        assert body == plain
