"""Best-layout search speed: wall and CPU seconds, layouts enumerated + bounded + pruned per second, full
simulations, and peak RSS (docs/performance.md, "Best-layout search").

Run: NUMBA_CACHE_DIR=.cache/numba .venv/bin/python benchmarks/bench_search.py [SPEC.yaml ...]

Default specs: benchmarks/search/llama405b-superpod.yaml (128-4,096 GPUs) and llama405b-16k.yaml (16,384
GPUs). numba's JIT (or its on-disk cache) is loaded first by predicting one case of the first spec, then each
timed search runs in a fresh `Caches` scope, so it starts as a fresh process's would after JIT. Peak RSS
is the process's so far (run one spec per process to read each search's own).
The rate counts every enumerated layout (invalid, out of memory, dominated or simulated) per wall second.
"""
from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from rapidllm.caches import Caches
from rapidllm.prediction import predict
from rapidllm.search import load_search, search
from rapidllm.search.space import layouts

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "benchmarks" / "search" / f"{n}.yaml" for n in ("llama405b-superpod", "llama405b-16k")]


def warm_up(path: Path) -> None:
    spec = load_search(path)
    cand = spec.candidates[0]
    for lay in layouts(spec, cand, spec.gpus[0]):
        if lay.case is not None:
            predict(lay.case)
            return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="*", default=[str(p) for p in DEFAULT])
    args = ap.parse_args()
    warm_up(Path(args.specs[0]))
    for path in args.specs:
        spec = load_search(path)
        w0, c0 = time.perf_counter(), time.process_time()
        with Caches().active():
            df = search(spec)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        c = df.attrs["counts"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        best = df.iloc[0]
        print(f"{spec.name}: {c['layouts']} layouts in {wall:.1f} s wall ({cpu:.1f} s CPU): "
              f"{c['layouts'] / wall:.0f} layouts/s wall, {c['layouts'] / cpu:.0f}/s CPU; {c['evaluated']} simulated, "
              f"{c['out_of_memory']} out of memory, {c['dominated']} dominated, {c['invalid']} invalid; "
              f"peak RSS {rss:.0f} MiB")
        print(f"  best: {int(best.gpus)} GPUs dp {best.dp} tp {best.tp} pp {best.pp} cp {best.cp} "
              f"{best.schedule} v{best.virtual_stages} mb {best.micro_batch} {best.recompute}: "
              f"{spec.objective.name} {best[spec.objective.name]:.4g}")


if __name__ == "__main__":
    main()
