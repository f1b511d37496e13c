"""Files of a search: the ranked table (CSV and parquet), the counts (JSON) and the figure, written all at
once or not at all; and the sharded form the Snakemake rules run (one shard per job, then a merge).

Everything is written into a staging folder next to the destination and moved in only when complete, so
an interrupted search (Ctrl-C) leaves no partial or half-updated output behind.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.figures.search import search_figure
from rapidllm.pipeline.io import atomic_write, write_table
from rapidllm.search.run import merge, search
from rapidllm.search.spec import SearchSpec, load_search
from rapidllm.search.counts import check_not_empty

TABLE = "ranked"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value.item() if hasattr(value, "item") else value


def summary(df: pd.DataFrame) -> dict[str, Any]:
    """The JSON form: objective, counts and the ranked rows (stable snake_case keys, SI units)."""
    rows = [{k: _clean(v) for k, v in r.items()} for r in df.to_dict("records")]
    return {"objective": df.attrs.get("objective"), "counts": df.attrs.get("counts"), "rows": rows}


def write_search(df: pd.DataFrame, spec: SearchSpec, out: str | Path, figure: bool = True) -> list[Path]:
    """ranked.csv, ranked.parquet, counts.json and (with rows) pareto.png/pdf under `out`, all or none."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))
    try:
        write_table(df, staging / f"{TABLE}.csv")
        write_table(df, staging / f"{TABLE}.parquet")
        (staging / "counts.json").write_text(json.dumps({"objective": df.attrs.get("objective"),
                                                         "counts": df.attrs.get("counts")}, indent=2) + "\n")
        if figure and not df.empty:
            search_figure(df, spec.objective.name, f"{spec.name}: best layouts per GPU count", staging / "pareto")
        written = []
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
            written.append(out / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_search_shard(spec_path: str, shard: int, shards: int, out_parquet: str, out_counts: str) -> None:
    """One Snakemake shard: every `shards`-th layout from the `shard`-th, its ranked rows and its counts."""
    df = search(spec_path, shard=(shard, shards))
    write_table(df, out_parquet)
    atomic_write(out_counts, lambda tmp: Path(tmp).write_text(json.dumps(df.attrs["counts"], indent=2) + "\n"))


def run_search_merge(spec_path: str, shard_tables: list[str], shard_counts: list[str], out: str) -> None:
    """Merge the shards' rows and counts and write the search's files under `out`."""
    spec = load_search(spec_path)
    frames = []
    for table, counts in zip(shard_tables, shard_counts):
        part = pd.read_parquet(table)
        part.attrs["counts"] = json.loads(Path(counts).read_text())
        frames.append(part)
    df = merge(frames, spec)
    check_not_empty(df, spec)
    write_search(df, spec, out)
