"""`rapidllm predict` of one case end to end, Python start-up included: wall and CPU seconds per process.

Run: .venv/bin/python benchmarks/bench_predict_startup.py [CASE.yaml] [--runs N] [--python PY]

Like hyperfine: one warm-up process (bytecode and numba caches written), then N fresh processes of
`python -m rapidllm.cli predict CASE --json`, each timed on the wall clock and by its own CPU time (user +
system, from `os.wait4`), which the other load on a shared machine does not inflate. Prints best, median
and worst of both. Default case: examples/gpt175b-tp8-pp8.yaml (GPT-175B, TP 8, PP 8, 64 A100).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="?", default=str(ROOT / "examples" / "gpt175b-tp8-pp8.yaml"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}   # as installed: .pyc kept
    cmd = [args.python, "-m", "rapidllm.cli", "predict", args.case, "--json"]
    run_once(cmd, env)                                                          # warm-up
    walls, cpus = zip(*(run_once(cmd, env) for _ in range(args.runs)))
    for name, xs in (("wall", walls), ("CPU", cpus)):
        print(f"{name:4s} s: best {min(xs):.3f}  median {statistics.median(xs):.3f}  worst {max(xs):.3f}  "
              f"({args.runs} runs)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
