"""`nodeagent experiment eviction` end to end: a short scenario on a testbed of its own (the command brings it up and
down), with memory.available injected below the hard threshold for 25 s. As upstream, each cycle evicts one pod and
the next follows once it is cleaned up, so under the lasting pressure both pods go, in upstream's ranking: the
BestEffort hog first, the Guaranteed pod after it. The PNG must be a PNG, and nothing of the testbed may be left
behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

SCENARIO = {
    "name": "short-hog",
    "description": "a BestEffort hog and a Guaranteed sleeper under injected memory pressure",
    "duration": "45s",
    "eviction": {"evictionHard": {"memory.available": "100Mi"}, "evictionPressureTransitionPeriod": "10s"},
    # 25 s: the first monitoring cycle (every 10 s) in it takes the hog by second 15, the next one, right after the
    # hog's cleanup (seconds), the Guaranteed pod, well before the window ends.
    "inject": {"memory.available": [[5, "60Mi"], [30, "observed"]]},
    "pods": [
        {
            "name": "guaranteed",
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "50m", "memory": "64Mi"},
        },
        {"name": "hog", "workload": {"type": "memory-hog", "rate": "4Mi", "max": "16Mi"}},
    ],
    "expect": {"evicted": ["hog", "guaranteed"]},  # and in this order
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_scenario_runs_end_to_end(tmp_path: Path) -> None:
    scenario = tmp_path / "short-hog.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    # Short: the testbed's unix sockets live below it, and their paths may not pass 107 bytes.
    beds = Path(tempfile.mkdtemp(prefix="h3exp-", dir="/tmp"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent", "experiment", "eviction", str(scenario), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
            env={**os.environ, "NODEAGENT_TEST_DIR": str(beds)},
        )
        assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr (tail):\n{done.stderr[-4000:]}"
        records = [json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines()]
        evictions = [r for r in records if r["kind"] == "eviction"]
        assert [r["pod"] for r in evictions] == ["hog", "guaranteed"], evictions
        hog, guaranteed = evictions
        assert 5 <= hog["t"] < guaranteed["t"] < 30  # not before the injection made the pressure, nor after it
        assert hog["signal"] == "memory.available"  # from the agent's log line
        assert hog["message"].startswith(
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi."
        )
        injected = [r for r in records if r["kind"] == "signal" and r["injected"] and 5 <= r["t"] < 30]
        assert injected and all(r["available"] == 60 << 20 and r["threshold"] == 100 << 20 for r in injected)
        assert any(r["kind"] == "reclaim" for r in records)
        assert (out / "timeline.csv").read_text().startswith("t,time,kind,signal,available")
        assert (out / "short-hog.png").read_bytes()[:8] == PNG_MAGIC
        assert "expectations: PASS" in done.stdout
        assert "eviction signals are injected" in (out / "agent.log").read_text()
        # Torn down: the testbed's directory is gone, and so is every process it started.
        assert list(beds.iterdir()) == []
        leftovers = subprocess.run(["pgrep", "-f", str(beds)], capture_output=True, text=True, check=False).stdout
        assert leftovers.strip() == "", leftovers
    finally:
        shutil.rmtree(beds, ignore_errors=True)
