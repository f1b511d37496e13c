"""The pipeline stages (docs/architecture.md, data flow) as functions of paths: expand, price, memory, trace, simulate, collect."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rapidllm.engine.engine import simulate
from rapidllm.prediction import MEMORY_FIELDS, device_record, memory_record, sweep_frame, workload_mode
from rapidllm.pipeline.graph_store import read_graphs, write_graphs
from rapidllm.graph.schedules import interleaving
from rapidllm.graph.templates import case_templates, operator_frame
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import OPERATOR_COLUMNS, price_case
from rapidllm.pipeline.io import shard_cases, write_table
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import Experiment, expand

def run_expand(exp: Experiment, out: str | Path) -> pd.DataFrame:
    df = pd.DataFrame(expand(exp))
    write_table(df, out)
    return df


def run_price(cases: str | Path, shard: int, out: str | Path) -> None:
    frames = []
    for row, case in shard_cases(cases, shard):
        ops = price_case(case)
        ops.insert(0, "case_id", row["case_id"])
        frames.append(ops)
    write_table(pd.concat(frames) if frames else pd.DataFrame(columns=["case_id", *OPERATOR_COLUMNS]), out)


def run_memory(cases: str | Path, shard: int, out: str | Path) -> None:
    rows = [{"case_id": row["case_id"], **memory_record(memory_for_case(case))} for row, case in shard_cases(cases, shard)]
    write_table(pd.DataFrame(rows, columns=["case_id", *(f"{f}_bytes" for f in MEMORY_FIELDS),
                                            "peak_memory_bytes", "feasible", "infeasible_reason"]), out)


def pipeline_descriptor(case) -> dict:
    """Schedule parameters the pipeline DAG is rebuilt from (pipeline/graph_store.py)."""
    p, w = case.parallelism, case.workload
    m = max(w.microbatches(p.dp), 1) if case.training else 1
    return {"schedule": p.schedule, "pp": p.pp, "v": interleaving(p.schedule, p.pp, p.virtual_stages, m), "m": m}


def run_trace(cases: str | Path, memory: str | Path, shard: int, out: str | Path) -> None:
    """Layer/extra graph templates and the pipeline descriptor of every feasible case (compact format)."""
    feasible = set(pd.read_parquet(memory).query("feasible").case_id)
    graphs = {}
    for row, case in shard_cases(cases, shard):
        if row["case_id"] in feasible:
            graphs[row["case_id"]] = (case_templates(case, operator_frame(case)), pipeline_descriptor(case))
    write_graphs(graphs, out)


def run_simulate(cases: str | Path, ops: str | Path, memory: str | Path, graphs: str | Path, shard: int,
                 out: str | Path, engine: str = "event") -> None:
    op_table = pd.read_parquet(ops)
    mem = pd.read_parquet(memory).set_index("case_id")
    traces = read_graphs(graphs)
    rows = []
    for row, case in shard_cases(cases, shard):
        cid = row["case_id"]
        if cid not in traces:
            rows.append({"case_id": cid, "status": "infeasible", "reason": mem.loc[cid, "infeasible_reason"],
                         "peak_memory_bytes": mem.loc[cid, "peak_memory_bytes"], "feasible": False,
                         **device_record(case)})
            continue
        ops_c = op_table[op_table.case_id == cid].drop(columns="case_id").reset_index(drop=True)
        try:
            record = simulate(case, ops_c, memory_for_case(case), engine=engine, templates=traces[cid][0] or None)
        except SpecError as err:        # a limit met while simulating (as `prediction.sweep`): the row says so
            rows.append({"case_id": cid, "status": "invalid", "reason": str(err), **device_record(case)})
            continue
        record.pop("infeasible_reason")
        rows.append({"case_id": cid, "status": "ok", "reason": "", **device_record(case), **record})
    write_table(pd.DataFrame(rows), out)


def run_collect(cases: str | Path, sims: list[str], out_parquet: str | Path, out_csv: str | Path,
                engine: str = "event") -> pd.DataFrame:
    """One row per expanded case: the case columns plus the prediction (or why there is none), with the
    columns, in order, that `prediction.sweep` gives the same experiment on `engine` (`sweep_frame`): they
    follow each row's workload mode, not which rows are valid or which shard came first, so a study whose
    every row is invalid or infeasible, or one of both modes, has the columns of a valid one. A row's own
    keys are its non-null values (parquet keeps no absent-or-null difference; a null meta value counts as
    absent), its mode its `mode` column, else its raw case's (`case_json`)."""
    base = pd.read_parquet(cases)
    sim = pd.concat([pd.read_parquet(s) for s in sims], ignore_index=True) if sims else pd.DataFrame()
    if len(sim):
        sim = sim.drop_duplicates("case_id")
        status = sim[["case_id", "status", "reason"]]
        base = base.merge(sim.drop(columns=["status", "reason"]), on="case_id", how="left")
        base = base.merge(status.rename(columns={"status": "sim_status", "reason": "sim_reason"}), on="case_id", how="left")
        ok = base.status == "ok"
        base.loc[ok, "reason"] = base.loc[ok, "sim_reason"].fillna("")
        base.loc[ok, "status"] = base.loc[ok, "sim_status"].fillna("ok")
        base = base.drop(columns=["sim_status", "sim_reason"])
    base = base.sort_values("index").reset_index(drop=True)
    raw = base.pop("case_json")
    own = base["mode"] if "mode" in base else [None] * len(base)       # no mode column: every row invalid
    modes = [m if isinstance(m, str) else workload_mode(json.loads(j)) for m, j in zip(own, raw, strict=True)]
    names = list(base.columns)
    keys = ([c for c, has in zip(names, row) if has] for row in base.notna().to_numpy())
    base = sweep_frame(base, keys, modes, engine)
    write_table(base, out_parquet)
    write_table(base, out_csv)
    return base
