"""The pipeline stages of DESIGN §2 as functions of paths: expand, price, memory, trace, simulate, collect."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from rapidllm.engine.baseline import predict
from rapidllm.graph.comm_nodes import CommNode, communication_nodes
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import OPERATOR_COLUMNS, price_case
from rapidllm.pipeline.io import shard_cases, write_npz, write_table
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import Experiment, expand

MEMORY_FIELDS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "framework", "capacity")
COMM_FIELDS = [f.name for f in dataclasses.fields(CommNode)]


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


def memory_record(case) -> dict:
    mem = memory_for_case(case)
    rec = {f"{f}_bytes": getattr(mem, f) for f in MEMORY_FIELDS}
    rec.update(peak_memory_bytes=mem.peak, feasible=mem.feasible, infeasible_reason=mem.reason)
    return rec


def run_memory(cases: str | Path, shard: int, out: str | Path) -> None:
    rows = [{"case_id": row["case_id"], **memory_record(case)} for row, case in shard_cases(cases, shard)]
    write_table(pd.DataFrame(rows, columns=["case_id", *(f"{f}_bytes" for f in MEMORY_FIELDS),
                                            "peak_memory_bytes", "feasible", "infeasible_reason"]), out)


def run_trace(cases: str | Path, memory: str | Path, shard: int, out: str | Path) -> None:
    """Communication nodes of every feasible case, as flat arrays (case index into `case_ids`)."""
    feasible = set(pd.read_parquet(memory).query("feasible").case_id)
    ids, owner, cols = [], [], {k: [] for k in COMM_FIELDS}
    for row, case in shard_cases(cases, shard):
        if row["case_id"] not in feasible:
            continue
        for node in communication_nodes(case):
            owner.append(len(ids))
            for k in COMM_FIELDS:
                cols[k].append(getattr(node, k))
        ids.append(row["case_id"])
    arrays = {"case_ids": np.array(ids, dtype=str), "node_case": np.array(owner, dtype=np.int64)}
    arrays.update({k: np.array(v, dtype=str if k in ("scope", "axis", "op") else np.float64) for k, v in cols.items()})
    write_npz(arrays, out)


def load_trace(path: str | Path) -> dict[str, list[CommNode]]:
    z = np.load(path)
    nodes: dict[str, list[CommNode]] = {cid: [] for cid in z["case_ids"]}
    for i, owner in enumerate(z["node_case"]):
        nodes[str(z["case_ids"][owner])].append(CommNode(str(z["scope"][i]), str(z["axis"][i]), str(z["op"][i]),
                                                         float(z["nbytes"][i]), float(z["count"][i])))
    return nodes


def run_simulate(cases: str | Path, ops: str | Path, memory: str | Path, graphs: str | Path, shard: int,
                 out: str | Path) -> None:
    op_table = pd.read_parquet(ops)
    mem = pd.read_parquet(memory).set_index("case_id")
    traces = load_trace(graphs)
    rows = []
    for row, case in shard_cases(cases, shard):
        cid = row["case_id"]
        if cid not in traces:
            rows.append({"case_id": cid, "status": "infeasible", "reason": mem.loc[cid, "infeasible_reason"],
                         "peak_memory_bytes": mem.loc[cid, "peak_memory_bytes"], "feasible": False})
            continue
        record = predict(case, op_table[op_table.case_id == cid], memory_for_case(case), traces[cid])
        record.pop("infeasible_reason")
        rows.append({"case_id": cid, "status": "ok", "reason": "", **record})
    write_table(pd.DataFrame(rows), out)


def run_collect(cases: str | Path, sims: list[str], out_parquet: str | Path, out_csv: str | Path) -> pd.DataFrame:
    """One row per expanded case: the case columns plus the prediction (or why there is none)."""
    base = pd.read_parquet(cases).drop(columns=["case_json"])
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
    write_table(base, out_parquet)
    write_table(base, out_csv)
    return base


def run_sweep(exp: Experiment, progress: bool = True) -> pd.DataFrame:
    """All stages in-process for `rapidllm sweep`, with a progress bar over cases."""
    rows = expand(exp)
    out = []
    for row in tqdm(rows, desc=exp.name, unit="case", disable=not progress):
        if row["status"] != "ok":
            out.append(row)
            continue
        case = resolve_case(json.loads(row["case_json"]), row["label"])
        out.append({**row, **evaluate_case(case)})
    df = pd.DataFrame(out).drop(columns=["case_json"])
    return df


def evaluate_case(case) -> dict:
    """Price, memory, trace and simulate one case in-process (the CLI's `predict`)."""
    mem = memory_for_case(case)
    record = {"case_id": case.case_id}
    if not mem.feasible:
        record.update(status="infeasible", reason=mem.reason, peak_memory_bytes=mem.peak, feasible=False)
        return record
    result = predict(case, price_case(case), mem, communication_nodes(case))
    result.pop("infeasible_reason")
    record.update(status="ok", reason="", **result)
    return record
