"""A run's process with and without TensorFlow's objects frozen out of the garbage collector.

    python bench/startup.py            # 3 alternating pairs of 2-epoch runs on the digits (~2 min here)
    python bench/startup.py --quick    # 1 pair: checks the script

Each side is a fresh `python -m tfx_hydra` process training the default MLP for `--epochs` epochs on
the digits, with tracking (a store per process) and the SavedModel export. A is tfx_hydra as it
ships: the collector is paused while TensorFlow loads and what it made is then frozen
(tfx_hydra.process.long_lived). B is the same command with `gc.disable` and `gc.freeze` made no-ops in
that process before tfx_hydra starts, i.e. Python's default collector. Both report their own CPU time
(user + system), wall time, and the number and cost of full (generation 2) collections, counted by a
`gc.callbacks` hook. Pairs alternate AB, BA, ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import write_json

# What the child runs: count full collections, optionally switch the freeze off, then the command.
CHILD = r"""
import gc, json, os, resource, runpy, sys, time
default_gc = sys.argv.pop(1) == "default"
if default_gc:
    gc.disable = gc.freeze = lambda: None
full = {"count": 0, "seconds": 0.0}
started = [0.0]
def count(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        full["count"] += 1
        full["seconds"] += time.perf_counter() - started[0]
gc.callbacks.append(count)
wall = time.perf_counter()
sys.argv = ["tfx-hydra"] + sys.argv[1:]
try:
    runpy.run_module("tfx_hydra", run_name="__main__")
finally:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_REPORT"], "w") as out:
        json.dump({"cpu_seconds": usage.ru_utime + usage.ru_stime, "wall_seconds": time.perf_counter() - wall,
                   "full_collections": full["count"], "full_collection_seconds": full["seconds"],
                   "frozen_objects": gc.get_freeze_count()}, out)
"""


def one_run(side: str, epochs: int, folder: Path) -> dict:
    """One fresh process of `python -m tfx_hydra` on side "frozen" (as shipped) or "default"."""
    launch = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=folder))
    report = launch / "report.json"
    command = [sys.executable, "-c", CHILD, side, f"trainer.epochs={epochs}", "export.mlflow_model=false"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "BENCH_REPORT": str(report)}
    done = subprocess.run(command, cwd=launch, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the {side} run failed:\n{done.stderr[-3000:]}")
    return json.loads(report.read_text())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one pair instead of three")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    pairs = 1 if args.quick else args.pairs
    results = {"frozen": [], "default": []}
    with tempfile.TemporaryDirectory() as folder:
        for pair in range(pairs):
            for side in (("frozen", "default") if pair % 2 == 0 else ("default", "frozen")):
                results[side].append(one_run(side, args.epochs, Path(folder)))
    print(f"{pairs} pair(s) of `python -m tfx_hydra trainer.epochs={args.epochs}`, fresh processes:")
    print(f"{'':<32}{'A frozen (as shipped)':>26}{'B default gc':>26}")
    for key, label in (("cpu_seconds", "process CPU (user + sys), s"), ("wall_seconds", "wall, s"),
                       ("full_collections", "full collections"), ("full_collection_seconds", "in full collections, s")):
        a = [round(run[key], 2) for run in results["frozen"]]
        b = [round(run[key], 2) for run in results["default"]]
        print(f"{label:<32}{' / '.join(map(str, a)):>26}{' / '.join(map(str, b)):>26}")
    ratio = (statistics.median(run["cpu_seconds"] for run in results["frozen"])
             / statistics.median(run["cpu_seconds"] for run in results["default"]))
    print(f"median A/B process CPU: {ratio:.2f}x")
    write_json(args.json, {**results, "cpu_ratio": ratio})


if __name__ == "__main__":
    main()
