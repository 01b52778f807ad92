"""`python3 -m tests.fuzz [--cases N] [--seed S] [--target T]`: run the fuzz targets, one after the other, in this
process. Prints `target=... cases=... crashes=... seconds=...` per target (and each distinct crash under it), then
one JSON line and a one-line summary, as the benchmarks do. Exit status 1 when anything crashed."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import sys

from tests.fuzz.engine import DEFAULT_CASE_SECONDS, DEFAULT_MEMORY_BYTES, Result, run_target
from tests.fuzz.targets import MODULES, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=1000, help="cases per target (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--target", action="append", choices=MODULES, help="only this target (repeatable)")
    parser.add_argument(
        "--cpu-budget", type=float, default=None, help="seconds of CPU per target: no new chunk of cases after it"
    )
    parser.add_argument("--case-seconds", type=float, default=DEFAULT_CASE_SECONDS, help="CPU time limit per case")
    parser.add_argument(
        "--memory-mib", type=int, default=DEFAULT_MEMORY_BYTES >> 20, help="address space a case may add"
    )
    args = parser.parse_args(argv)
    # The targets log what they refuse (the CNI plugin warns on every error): only the fuzzer's lines are wanted.
    logging.disable(logging.CRITICAL)
    # A case stuck inside C code (no signal handler runs there) cannot be interrupted: the process then dumps every
    # thread's stack and exits, re-armed before each case.
    hard_limit = max(30.0, args.case_seconds * 6)

    def arm() -> None:
        faulthandler.dump_traceback_later(hard_limit, exit=True)

    results: list[Result] = []
    for name in args.target or MODULES:
        result = run_target(
            load(name),
            cases=args.cases,
            seed=args.seed,
            case_seconds=args.case_seconds,
            memory_bytes=args.memory_mib << 20,
            cpu_budget=args.cpu_budget,
            before_case=arm,
        )
        faulthandler.cancel_dump_traceback_later()
        results.append(result)
        print(
            f"target={result.target} cases={result.cases} crashes={len(result.crashes)} "
            f"unique={len(result.unique)} seconds={result.seconds:.1f} cpu_seconds={result.cpu_seconds:.1f} "
            f"mapped_mib={result.mapped_mib[0]}->{result.mapped_mib[1]}",
            flush=True,
        )
        for signature, crash in result.unique.items():
            print(f"  crash: {signature}: {crash.error}\n    input: {crash.input[:600]}", flush=True)
    cases = sum(r.cases for r in results)
    crashes = sum(len(r.crashes) for r in results)
    seconds = sum(r.seconds for r in results)
    print(
        json.dumps(
            {
                "benchmark": "fuzz",
                "seed": args.seed,
                "cases_per_target": args.cases,
                "case_seconds": args.case_seconds,
                "memory_mib": args.memory_mib,
                "cpu_budget": args.cpu_budget,
                "cases": cases,
                "crashes": crashes,
                "seconds": round(seconds, 1),
                "targets": [r.as_json() for r in results],
            }
        )
    )
    print(
        f"fuzz: {len(results)} targets, {cases} cases, {crashes} crashes "
        f"({sum(len(r.unique) for r in results)} distinct) in {seconds:.0f} s, seed {args.seed}"
    )
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
