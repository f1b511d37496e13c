"""Sweep throughput: configurations per second through `rapidllm.sweep` (expand + evaluate), and peak RSS.

Run: NUMBA_CACHE_DIR=.cache/numba .venv/bin/python benchmarks/bench_sweep_1000.py [EXPERIMENT.yaml] [--repeat N] [--jobs N]

Default experiment: config/experiments/sweep-1000.yaml (1,472 combinations: 92 dp x tp x pp layouts of
64-512 GPUs x 4 models x recompute x micro-batch on superpod-hdr). One case is evaluated first so numba's
JIT (or its on-disk cache) is loaded outside the timing; then the in-process result caches are cleared so
every repeat starts as a fresh sweep would. Each repeat times `sweep(exp, progress=False)` end to end
(expansion included) and prints combinations/s (all rows) and evaluated configurations/s (rows that were
priced, checked for memory and, if feasible, simulated). The median over repeats is the number to quote.
CPU seconds of the process (`time.process_time`) are printed beside wall seconds: on a shared machine
they are the number to compare. With --jobs N (N worker processes, `sweep(..., jobs=N)`) the workers' CPU
seconds (RUSAGE_CHILDREN, counted once the pool has exited) are added, and the wall-second rate is the one
to quote: it is what the pool buys on N free cores. A serial repeat loads the kernels the first case did
not need during the first repeat (the median hides it); workers forked for every repeat would load them
each time, so with --jobs the bench first runs one untimed serial sweep. Peak RSS is the process maximum (ru_maxrss; a worker's
is its own). Results go to docs/performance.md by hand.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

from rapidllm.prediction import evaluate, sweep
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand, load_experiment

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (the sweep's pool workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="?", default=str(ROOT / "config" / "experiments" / "sweep-1000.yaml"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes of the sweep (0: one per core)")
    args = ap.parse_args()
    exp = load_experiment(args.experiment)
    t0 = time.perf_counter()
    rows = expand(exp)
    t_expand = time.perf_counter() - t0
    first = next(r for r in rows if r["status"] == "ok")
    evaluate(resolve_case(json.loads(first["case_json"]), first["label"]))      # JIT warm-up
    if args.jobs != 1:      # kernels the first case did not load: forked workers would load them every repeat
        sweep(exp, progress=False)
    walls, cpus = [], []
    for _ in range(args.repeat):            # each sweep runs with fresh memo tables of its own
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        df = sweep(exp, progress=False, jobs=args.jobs)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0 + _children_cpu() - k0)
    n = len(df)
    evaluated = int((df.status != "invalid").sum())
    simulated = int((df.status == "ok").sum())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"experiment {exp.name}: {n} combinations, {evaluated} valid ({simulated} feasible and simulated, "
          f"{evaluated - simulated} infeasible), {n - evaluated} invalid; expand alone {t_expand:.2f} s")
    print(f"jobs: {args.jobs}")
    print("run_sweep wall s: " + ", ".join(f"{w:.2f}" for w in walls) + f" (median {wall:.2f})")
    print(f"throughput (median): {n / wall:.0f} combinations/s, {evaluated / wall:.0f} valid configurations/s, "
          f"{simulated / wall:.0f} simulated/s; peak RSS {rss:.0f} MiB")
    print("run_sweep CPU s (this process and its workers): " + ", ".join(f"{c:.2f}" for c in cpus) + f" (median {cpu:.2f}): "
          f"{evaluated / cpu:.0f} valid configurations per CPU second, {simulated / cpu:.0f} simulated")


if __name__ == "__main__":
    main()
