"""Chakra execution traces (per rank, protobuf) for ASTRA-sim, via the optional `mlc-chakra` package.

A rank's trace is its stage's schedule with every chunk expanded into its layers' template nodes:
COMP_NODE with duration_micros, COMM_COLL_NODE with comm_type/comm_size, and for pipeline transfers
COMM_SEND_NODE / COMM_RECV_NODE with comm_src/comm_dst. Data dependencies follow program order plus
the template's own edges. Install with `pip install --no-deps mlc-chakra "protobuf>=6.31.1"` (extra `chakra`).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rapidllm.graph.schedules import interleaving, stage_actions
from rapidllm.graph.templates import COMPUTE, case_templates, compute_durations, layer_counts
from rapidllm.network.mapping import RankMapping
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES

COLL = {"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
        "all_to_all": "ALL_TO_ALL", "broadcast": "BROADCAST"}


def _pb():
    try:
        from chakra.schema.protobuf import et_def_pb2 as pb
        from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage
    except ImportError as e:        # pragma: no cover - exercised only without the extra
        raise RuntimeError("Chakra export needs the optional extra: pip install --no-deps mlc-chakra 'protobuf>=6.31.1'") from e
    return pb, encodeMessage, decodeMessage


def rank_trace(case: Case, ops: pd.DataFrame, rank: int) -> list[dict]:
    """Plain node dicts of one rank's step (name, type, duration_us, deps, comm attributes)."""
    p, w = case.parallelism, case.workload
    mapping = RankMapping(case.network, {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp})
    s = mapping.parallel_coords(rank)["pp"]
    m = max(w.microbatches(p.dp), 1)
    v = interleaving(p.schedule, p.pp, p.virtual_stages, m)
    templates = {(t.section, t.part): t for t in case_templates(case, ops)}
    durs = {k: compute_durations(ops, t) for k, t in templates.items()}
    act = w.micro_batch * w.seq_len // p.cp * case.model.hidden * DTYPE_BYTES[case.precision]
    nodes: list[dict] = []

    def emit(node: dict, extra: tuple[int, ...] = ()) -> int:
        node["deps"] = sorted(set(([len(nodes) - 1] if nodes else []) + list(extra)))
        nodes.append(node)
        return len(nodes) - 1

    def expand(section: str, part: str) -> None:
        t = templates.get((section, part))
        if t is None:
            return
        it, base = iter(durs[(section, part)]), len(nodes)
        for n in t.nodes:
            extra = tuple(base + d for d in n.deps)
            if n.kind == COMPUTE:
                emit({"name": f"{section}.{n.name}", "type": "COMP_NODE", "duration_us": next(it) * 1e6}, extra)
            else:
                emit({"name": n.name, "type": "COMM_COLL_NODE", "comm_type": COLL[n.op], "comm_size": int(n.nbytes),
                      "group": n.axis}, extra)

    for a, c, i in stage_actions(p.schedule, p.pp, s, m, v):
        fwd = a == "F"
        peer = s - 1 if fwd else s + 1
        if 0 <= peer < p.pp:
            emit({"name": f"recv_{a}{c}.{i}", "type": "COMM_RECV_NODE", "comm_size": int(act),
                  "comm_src": mapping.rank({**mapping.parallel_coords(rank), "pp": peer}), "comm_dst": rank})
        for section, n in layer_counts(case).items():
            for _ in range(round(n / v)):
                expand(section, "fwd" if fwd else "bwd")
        out = s + 1 if fwd else s - 1
        if 0 <= out < p.pp:
            emit({"name": f"send_{a}{c}.{i}", "type": "COMM_SEND_NODE", "comm_size": int(act), "comm_src": rank,
                  "comm_dst": mapping.rank({**mapping.parallel_coords(rank), "pp": out})})
    expand("optimizer", "optimizer")
    return nodes


def write_chakra(case: Case, ops: pd.DataFrame, prefix: str | Path, ranks: list[int] | None = None) -> list[Path]:
    """Write `{prefix}.{rank}.et` for the given ranks (default: one per pipeline stage)."""
    pb, encode, _ = _pb()
    p = case.parallelism
    stride = RankMapping(case.network, {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}).stride("pp")
    ranks = ranks if ranks is not None else [s * stride for s in range(p.pp)]
    paths = []
    for r in ranks:
        path = Path(f"{prefix}.{r}.et")
        with open(path, "wb") as fh:
            encode(fh, pb.GlobalMetadata(version="0.0.4"))
            for k, n in enumerate(rank_trace(case, ops, r)):
                node = pb.Node(id=k, name=n["name"], type=getattr(pb, n["type"]))
                node.data_deps.extend(n["deps"])
                if "duration_us" in n:
                    node.duration_micros = int(round(n["duration_us"]))
                node.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
                if "comm_type" in n:
                    node.attr.append(pb.AttributeProto(name="comm_type", int64_val=getattr(pb, n["comm_type"])))
                for key in ("comm_size", "comm_src", "comm_dst"):
                    if key in n:
                        node.attr.append(pb.AttributeProto(name=key, int64_val=int(n[key])))
                encode(fh, node)
        paths.append(path)
    return paths


def read_chakra(path: str | Path) -> list:
    """Nodes of a Chakra ET file (after its GlobalMetadata)."""
    pb, _, decode = _pb()
    out = []
    with open(path, "rb") as fh:
        meta = pb.GlobalMetadata()
        decode(fh, meta)
        while True:
            node = pb.Node()
            if not decode(fh, node):
                break
            out.append(node)
    return out
