"""`python3 -m tests.differential [--only NAME ...] [--agents nodeagent,kubelet] [--dir DIR] [--keep]`

Brings up a testbed (or uses the running one in --dir), plays the corpus on each agent in turn, prints each
scenario's differences and a table scenario -> same / DIFFERS, and writes them to the run directory. Exit status 1
when a difference is not explained by a `known_differences` entry. `--agents nodeagent,nodeagent` is the runner's
self-check: two runs of the same agent must show no difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from nodeagent.testbed.testbed import Testbed
from tests.differential.agents import AGENTS
from tests.differential.compare import table
from tests.differential.runner import Report, run
from tests.differential.scenario import load_all


def _write(report: Report, out: Path) -> None:
    recordings = {
        agent: {name: {"states": r.states, "events": r.events, "outcomes": r.outcomes, "error": r.error,
                       "runtime": r.runtime}
                for name, r in by_scenario.items()}
        for agent, by_scenario in report.recordings.items()
    }  # fmt: skip
    (out / "recordings.json").write_text(json.dumps(recordings, indent=1))
    lines = []
    for c in report.comparisons:
        lines.append(f"=== {c.scenario}: {'same' if c.same else 'DIFFERS'}")
        lines.extend(f"    kept on purpose: {reason}" for reason in c.kept)
        if c.diff:
            lines.append(c.diff)
    (out / "differences.txt").write_text("\n".join(lines) + "\n")
    (out / "table.txt").write_text(table(report.comparisons) + "\n")


async def _main(args: argparse.Namespace) -> int:
    scenarios = load_all(only=tuple(args.only or ()))
    names = tuple(a.strip() for a in args.agents.split(",") if a.strip())
    unknown = [a for a in names if a not in AGENTS]
    if unknown or not names:
        print(f"unknown agents {unknown}: choose from {', '.join(AGENTS)}", file=sys.stderr)
        return 2
    own = args.dir is None
    root = Path(tempfile.mkdtemp(prefix="nodeagent-differential-")) if own else args.dir
    testbed = Testbed(root / "testbed" if own else root)
    out = root / "differential" if not own else root
    out.mkdir(parents=True, exist_ok=True)
    if own:
        print(f"testbed coming up in {testbed.layout.root}", flush=True)
        await testbed.up()
    try:
        report = await run(testbed, scenarios, names, out, progress=lambda m: print(m, flush=True))
    finally:
        if own and not args.keep:
            await testbed.down()
            shutil.rmtree(root / "testbed", ignore_errors=True)
    _write(report, out)
    for c in report.comparisons:
        if not c.same:
            print(f"\n=== {c.scenario}: DIFFERS\n{c.diff}")
    if report.comparisons:
        print("\n" + table(report.comparisons))
    print(f"recordings and differences in {out}")
    return 1 if report.unexplained else 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m tests.differential", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="play only these scenarios (file stems)")
    parser.add_argument("--agents", default="nodeagent,kubelet", help="comma-separated, played in this order")
    parser.add_argument("--dir", type=Path, default=None, help="a running testbed's directory (default: a new one)")
    parser.add_argument("--keep", action="store_true", help="leave the new testbed up (remove it yourself)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    sys.exit(asyncio.run(_main(args)))


if __name__ == "__main__":
    main()
