"""CNI ADD+DEL latency: our plugin (nodeagent-bridge) against the reference bridge + host-local, in one run.

Both plugins are exec'd as containerd execs them (a fresh process, only CNI_* in the environment, the config on
stdin) on the same bridge, the same /24 of 198.18.0.0/16 and the same network namespace, one ADD and its DEL per
run, alternating between the plugins so that both see the same machine load. Measured per plugin:
- ours: the installed executable with its resident helper (the testbed's setup);
- ours without a helper: the same executable doing the work in process (the fallback), fewer runs;
- reference: Debian's containernetworking-plugins `bridge` delegating to `host-local`;
- the floor of our design: `python -IS -c pass` (starting the interpreter, nothing else).

Prints one JSON line and one summary line. Run: `python -m benchmarks.cni [--runs 100] [--fallback-runs 20]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import percentile
from cni.install import install
from nodeagent.testbed import hostnet
from nodeagent.testbed.configs import REFERENCE_CNI_DIR

WARMUP = 3


@dataclass
class Samples:
    add: list[float] = field(default_factory=list)
    delete: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        both = [a + d for a, d in zip(self.add, self.delete, strict=True)]
        return {
            "runs": len(both),
            "add_p50_ms": round(statistics.median(self.add), 2),
            "add_p99_ms": round(percentile(self.add, 0.99), 2),
            "del_p50_ms": round(statistics.median(self.delete), 2),
            "del_p99_ms": round(percentile(self.delete, 0.99), 2),
            "add_del_p50_ms": round(statistics.median(both), 2),
            "add_del_p99_ms": round(percentile(both, 0.99), 2),
        }


def timed(argv: list[str], env: dict[str, str], stdin: bytes) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, cwd="/", check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} {env.get('CNI_COMMAND')} failed: {done.stdout!r} {done.stderr!r}")
    return elapsed


@dataclass
class Plugin:
    name: str
    argv: list[str]
    conf: dict[str, Any]
    extra_env: dict[str, str]
    samples: Samples = field(default_factory=Samples)

    def cycle(self, container_id: str, netns: str, record: bool) -> None:
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": container_id,
            "CNI_NETNS": netns,
            "CNI_IFNAME": "eth0",
            **self.extra_env,
        }
        stdin = json.dumps(self.conf).encode()
        add = timed(self.argv, env, stdin)
        delete = timed(self.argv, {**env, "CNI_COMMAND": "DEL"}, stdin)
        if record:
            self.samples.add.append(add)
            self.samples.delete.append(delete)


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the helper did not come up: {proc.communicate()[0]!r}")
        time.sleep(0.05)


def interpreter_floor(runs: int) -> float:
    times = [timed([sys.executable, "-IS", "-c", "pass"], {}, b"") for _ in range(runs)]
    return round(statistics.median(times), 2)


def run(runs: int, fallback_runs: int, root: Path) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    bridge, netns_name = f"nab{tag}", f"nabench-{tag}"
    subnet = hostnet.choose_pod_cidr(root, taken=set())
    netns = f"/run/netns/{netns_name}"
    ranges = [[{"subnet": subnet}]]
    routes = [{"dst": "0.0.0.0/0"}]
    ours_conf = {
        "cniVersion": "1.0.0",
        "name": f"bench-{tag}",
        "type": "nodeagent-bridge",
        "bridge": bridge,
        "isGateway": True,
        "hairpinMode": True,
        "ipam": {"type": "nodeagent-ipam", "ranges": ranges, "routes": routes, "dataDir": str(root / "ours")},
    }
    reference_conf = {
        "cniVersion": "1.0.0",
        "name": f"bench-{tag}",
        "type": "bridge",
        "bridge": bridge,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": str(root / "reference")},
    }
    with_helper = install(root / "bin", helper_socket=root / "helper.sock")
    alone = install(root / "bin-alone", helper_socket=None)
    reference = Plugin("reference", [f"{REFERENCE_CNI_DIR}/bridge"], reference_conf, {"CNI_PATH": REFERENCE_CNI_DIR})
    ours = Plugin("ours", [str(with_helper.path)], ours_conf, {})
    fallback = Plugin("ours_no_helper", [str(alone.path)], ours_conf, {})
    subprocess.run(["ip", "netns", "add", netns_name], check=True, capture_output=True)
    helper = subprocess.Popen(with_helper.helper_argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    try:
        _wait_for(root / "helper.sock", helper)
        plugins = [ours, reference]
        for i in range(WARMUP + runs):
            # Alternate who goes first, so neither always runs right after the other's DEL.
            for plugin in plugins if i % 2 == 0 else reversed(plugins):
                plugin.cycle(f"bench{i}", netns, record=i >= WARMUP)
        for i in range(fallback_runs):
            fallback.cycle(f"alone{i}", netns, record=True)
        floor = interpreter_floor(runs)
    finally:
        helper.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.communicate(timeout=30)
        subprocess.run(["ip", "netns", "del", netns_name], check=False, capture_output=True)
        hostnet.remove_bridge_leftovers(bridge)
    ours_s, ref_s = ours.samples.summary(), reference.samples.summary()
    return {
        "benchmark": "cni",
        "subnet": subnet,
        "ours": ours_s,
        "reference": ref_s,
        "ours_no_helper": fallback.samples.summary(),
        "python_IS_start_p50_ms": floor,
        "ratio_add_del_p50": round(ours_s["add_del_p50_ms"] / ref_s["add_del_p50_ms"], 2),
        "ratio_add_del_p99": round(ours_s["add_del_p99_ms"] / ref_s["add_del_p99_ms"], 2),
    }


def summary_line(doc: dict[str, Any]) -> str:
    o, r, f = doc["ours"], doc["reference"], doc["ours_no_helper"]
    return (
        f"cni: ADD+DEL p50 ours {o['add_del_p50_ms']} ms (ADD {o['add_p50_ms']}, DEL {o['del_p50_ms']}) vs reference "
        f"bridge+host-local {r['add_del_p50_ms']} ms (ADD {r['add_p50_ms']}, DEL {r['del_p50_ms']}): "
        f"x{doc['ratio_add_del_p50']}; p99 {o['add_del_p99_ms']} vs {r['add_del_p99_ms']} ms "
        f"(x{doc['ratio_add_del_p99']}); without the helper {f['add_del_p50_ms']} ms; "
        f"python -IS start {doc['python_IS_start_p50_ms']} ms"
    )


def main(argv: list[str], out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--fallback-runs", type=int, default=20)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="nodeagent-bench-cni-"))
    try:
        doc = run(args.runs, args.fallback_runs, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out(json.dumps(doc))
    out(summary_line(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
