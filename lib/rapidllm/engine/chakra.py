"""Chakra execution traces of a training step, one per NPU, that stock ASTRA-sim replays as our engine does.

The trace of a rank is its pipeline stage's schedule (`graph.schedules.stage_actions`) with every action
expanded into the layer templates our engine replays (`engine.composer.training_plan`), so the same
operators, collectives and overlaps reach ASTRA-sim:
- compute nodes run in program order (each depends on the previous compute node of the rank);
- a collective depends only on the operator that produces its input, and only its consumer waits for it
  (the template's edges), so e.g. the weight-gradient GEMM runs beside the backward TP all-reduce;
- pipeline transfers are COMM_SEND / COMM_RECV pairs with one `comm_tag` per (direction, chunk,
  micro-batch, sending stage); a receive is posted when the rank reaches the action that consumes it;
- every collective names its communicator group in `pg_name` (a positive integer as a string, the key of the
  group file ASTRA-sim reads with `--comm-group-configuration`); group members come from the same rank
  mapping our collectives are simulated on (`engine.comm_cost.CommCost.groups`);
- the first and last stages carry the embedding, LM head and loss; ZeRO-3 / FSDP gathers each layer's
  weights one layer ahead, in the calls the engine prices (`engine.sharding`: one per layer under FSDP, one
  per module holding weights under ZeRO-3), and reduce-scatters its gradients after its backward (FSDP) or
  in DeepSpeed's buckets, the partial one at the end of each backward pass; the data-parallel gradient
  buckets are launched during the last micro-batch's backward of each chunk (after the whole backward with
  `overlap_grad_reduce: false`); then each stage's own
  optimizer step (its share of the parameters) and, for a sharded optimizer, the parameter all-gather.
Sizes are ASTRA-sim's (`astra_comm_size`: an all-gather carries one rank's input). Not expressed: the merged forward/backward
pairs of `moe_a2a_overlap` (the trace runs them one after the other), and the SMs that the ZeRO-3 / FSDP
collectives' NCCL CTAs hold (`engine.sharding.nccl_sm_share`): a Chakra compute node has a fixed duration,
so ASTRA-sim runs the overlapped layer compute at full speed where the engine slows it. Needs the optional `mlc-chakra`
package (extra `chakra`). docs/engine.md says how to replay the files in ASTRA-sim.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import (
    TrainingPlan,
    chunk_scale,
    p2p_bytes,
    sharded_layer_bytes,
    sharded_layer_params,
    training_plan,
)
from rapidllm.engine.sharding import layer_collectives, layer_gathers, scatter_calls
from rapidllm.graph.pipeline_dag import consumer_of
from rapidllm.graph.schedules import stage_actions
from rapidllm.graph.templates import COMPUTE, Template, case_templates, compute_durations, layer_counts, ops_view
from rapidllm.spec.case import Case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.layout import TrainingWorkload

COLL = {"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
        "all_to_all": "ALL_TO_ALL", "broadcast": "BROADCAST"}
AXES = ("tp", "cp", "ep", "dp")


@dataclass
class TraceNode:
    """One Chakra node before encoding; `deps` index earlier nodes of the same rank."""
    name: str
    type: str                                   # COMP_NODE | COMM_COLL_NODE | COMM_SEND_NODE | COMM_RECV_NODE
    deps: list[int] = field(default_factory=list)
    duration_us: float = 0.0
    comm_type: str = ""
    comm_size: int = 0
    comm_src: int = -1
    comm_dst: int = -1
    comm_tag: int = -1
    pg_name: str = ""


def communicator_groups(case: Case) -> dict[tuple[str, int], tuple[int, ...]]:
    """(axis, ordinal) -> ranks of every TP/CP/EP/DP group of the layout, in a fixed order."""
    cost = CommCost(case)
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for axis in AXES:
        if cost.group_size(axis) > 1:
            for k, g in enumerate(sorted(set(cost.groups(axis, -1)))):
                out[(axis, k)] = tuple(sorted(g))
    return out


def group_ids(case: Case) -> tuple[dict[str, list[int]], dict[tuple[str, int], str]]:
    """The group file's content ({"1": [ranks], ...}) and (axis, rank) -> pg_name."""
    table: dict[str, list[int]] = {}
    of_rank: dict[tuple[str, int], str] = {}
    for k, ((axis, _), ranks) in enumerate(communicator_groups(case).items(), start=1):
        table[str(k)] = list(ranks)
        for r in ranks:
            of_rank[(axis, r)] = str(k)
    return table, of_rank


class _RankTrace:
    """Builds one rank's node list; keeps the last compute node so program order chains compute."""

    def __init__(self, rank: int, groups: dict[str, list[int]], pg_of: dict[tuple[str, int], str]) -> None:
        self.rank, self.groups, self.pg_of = rank, groups, pg_of
        self.nodes: list[TraceNode] = []
        self.last_compute = -1

    def add(self, node: TraceNode) -> int:
        node.deps = sorted({d for d in node.deps if d >= 0})
        self.nodes.append(node)
        if node.type == "COMP_NODE":
            self.last_compute = len(self.nodes) - 1
        return len(self.nodes) - 1

    def collective(self, name: str, axis: str, op: str, nbytes: float, deps: list[int]) -> int:
        pg = self.pg_of[(axis, self.rank)]
        return self.add(TraceNode(name, "COMM_COLL_NODE", deps, comm_type=COLL[op],
                                  comm_size=int(round(astra_comm_size(op, nbytes, len(self.groups[pg])))), pg_name=pg))

    def template(self, prefix: str, t: Template, durations: list[float], share: float,
                 wait_for: list[int]) -> list[int]:
        """One instance of a template, its compute scaled by `share` (<1 for the fractional remainder of a
        layer kind that does not split evenly); returns the indices of its compute nodes."""
        local: list[int] = []
        computes: list[int] = []
        it = iter(durations)
        for n in t.nodes:
            deps = [local[d] for d in n.deps]
            if n.kind == COMPUTE:
                if not any(self.nodes[d].type == "COMP_NODE" for d in deps):
                    deps.append(self.last_compute)
                if not computes:
                    deps += wait_for
                local.append(self.add(TraceNode(f"{prefix}{t.section}.{n.name}", "COMP_NODE", deps,
                                                duration_us=next(it) * share * 1e6)))
                computes.append(local[-1])
            else:
                local.append(self.collective(f"{prefix}{t.section}.{n.name}", n.axis, n.op, n.nbytes * share,
                                             deps or [self.last_compute]))
        return computes


def astra_comm_size(op: str, nbytes: float, group_size: int) -> float:
    """ASTRA-sim's `comm_size` from our nccl-tests size: the same for all-reduce, reduce-scatter (the full
    input) and all-to-all, but an all-gather's is one rank's input (its ring sends `comm_size` per step and
    ends with `comm_size` x n; system/astraccl/native_collectives/collective_algorithm/Ring.cc), where
    nccl-tests counts the gathered output."""
    return nbytes / group_size if op == "all_gather" else nbytes


def _tag(kind: str, chunk: int, micro: int, stage: int, pp: int, v: int, m: int) -> int:
    """One tag per pipeline transfer, the same on the sending and the receiving rank."""
    return 1 + ((int(kind == "B") * v + chunk) * m + micro) * pp + stage


def _producer(kind: str, s: int, c: int, pp: int, v: int) -> tuple[int, int] | None:
    """(stage, chunk) whose output this action consumes, or None for the first forward / last backward."""
    if kind == "F":
        if s > 0:
            return s - 1, c
        return (pp - 1, c - 1) if c > 0 else None
    if s + 1 < pp:
        return s + 1, c
    return (0, c + 1) if c + 1 < v else None


def rank_trace(case: Case, ops: pd.DataFrame, rank: int, plan: TrainingPlan | None = None,
               groups: tuple[dict[str, list[int]], dict[tuple[str, int], str]] | None = None) -> list[TraceNode]:
    """Nodes of one rank's training step, in issue order."""
    w, p = case.workload, case.parallelism
    if not isinstance(w, TrainingWorkload):
        raise SpecError("Chakra export covers training steps; this case is an inference case")
    cost = CommCost(case)
    plan = plan or training_plan(case, ops, cost)
    table, pg_of = groups if groups is not None else group_ids(case)
    x = plan.inputs
    view = ops_view(ops)
    templates = {(t.section, t.part): t for t in case_templates(case, view)}
    durations = {k: compute_durations(view, t) for k, t in templates.items()}
    coords = cost.mapping.parallel_coords(rank)
    s = coords["pp"]

    def rank_of_stage(stage: int) -> int:
        return cost.mapping.rank({**coords, "pp": stage})

    scale = chunk_scale(case, x.v)
    counts = layer_counts(case)
    gather_b, scatter_b = sharded_layer_bytes(case)
    if gather_b:        # the engine's calls per layer and bytes per call (`sharding.layer_collectives`)
        (_, gather_each), (_, bucket) = layer_collectives(case, gather_b, scatter_b, sharded_layer_params(case))
        module_gathers = {section: int(round(layer_gathers(case, section.endswith("layer_moe"))))
                          for section in counts}
    act = p2p_bytes(case)
    out = _RankTrace(rank, table, pg_of)
    grad_deps: list[int] = []

    def expand(section: str, part: str, wait_for: list[int] = ()) -> list[int]:
        t = templates.get((section, part))
        return out.template("", t, durations[(section, part)], 1.0, list(wait_for)) if t else []

    def layers(c: int, part: str, wait_for: list[int], label: str) -> list[int]:
        """The chunk's layers in one pass; under ZeRO-3 / FSDP each layer's weight gathers (`layer_gathers`
        calls of the engine's size, back to back, one layer ahead: launched when the previous layer starts
        computing) and, in the backward, the reduce-scatters `sharding.scatter_calls` places after it."""
        computes: list[int] = []
        prev_gather, prev_start = -1, out.last_compute
        instances = [(section, min(1.0, n / x.v * scale[s, c] - k)) for section, n in counts.items()
                     for k in range(math.ceil(n / x.v * scale[s, c] - 1e-9))]
        scatters = scatter_calls(case, [scatter_b * share for _, share in instances], bucket) \
            if gather_b and part == "bwd" else [[] for _ in instances]
        for (section, share), reduce in zip(instances, scatters):
            waits = list(wait_for) if not computes else []
            if gather_b:
                for _ in range(module_gathers[section]):
                    prev_gather = out.collective(f"{label}.dp.all_gather", "dp", "all_gather", gather_each * share,
                                                 [prev_start, prev_gather])
                waits.append(prev_gather)
            layer = out.template(f"{label}.", templates[(section, part)], durations[(section, part)], share, waits)
            prev_start = layer[0] if layer else prev_start
            computes += layer
            grad_deps.extend(out.collective(f"{label}.dp.reduce_scatter", "dp", "reduce_scatter", nbytes,
                                            [computes[-1]]) for nbytes in reduce)
        return computes

    for kind, c, i in stage_actions(x.schedule, x.pp, s, x.m, x.v):
        label = f"{kind}{c}.{i}"
        waits: list[int] = []
        src = _producer(kind, s, c, x.pp, x.v)
        if src is not None:
            waits.append(out.add(TraceNode(f"recv_{label}", "COMM_RECV_NODE", [out.last_compute],
                                           comm_size=int(round(act)), comm_src=rank_of_stage(src[0]),
                                           comm_dst=rank, comm_tag=_tag(kind, src[1], i, src[0], x.pp, x.v, x.m))))
        first, last = s == 0 and c == 0, s == x.pp - 1 and c == x.v - 1
        if kind == "F":
            computes = expand("first_stage", "extra_fwd", waits) if first else []
            computes += layers(c, "fwd", [] if computes else waits, label)
            computes += expand("last_stage", "extra_fwd") if last else []
        else:
            computes = expand("last_stage", "extra_bwd", waits) if last else []
            computes += layers(c, "bwd", [] if computes else waits, label)
            computes += expand("first_stage", "extra_bwd") if first else []
        if kind == "B" and i == x.m - 1 and plan.bucket_op and x.grad_overlap:
            for b in range(x.buckets):
                pick = (b + 1) * len(computes) // x.buckets - 1
                after = computes[pick] if computes and pick >= 0 else out.last_compute
                grad_deps.append(out.collective(f"{label}.grad_bucket{b}.dp.{plan.bucket_op}", "dp", plan.bucket_op,
                                                plan.bucket_bytes, [after]))
        dst = consumer_of(kind, s, c, i, x.pp, x.v)
        if dst is not None:
            out.add(TraceNode(f"send_{label}", "COMM_SEND_NODE", [out.last_compute], comm_size=int(round(act)),
                              comm_src=rank, comm_dst=rank_of_stage(dst[1]),
                              comm_tag=_tag(kind, c, i, s, x.pp, x.v, x.m)))
    if plan.bucket_op and not x.grad_overlap:       # reduced after the whole backward (overlap_grad_reduce off)
        grad_deps += [out.collective(f"grad_bucket{b}.dp.{plan.bucket_op}", "dp", plan.bucket_op, plan.bucket_bytes,
                                     [out.last_compute]) for b in range(x.buckets * x.v)]
    opt = out.add(TraceNode("optimizer", "COMP_NODE", [out.last_compute, *grad_deps],
                            duration_us=float(x.optimizer_s[s]) * 1e6))
    if plan.gather_bytes:
        out.collective("param_gather.dp.all_gather", "dp", "all_gather", plan.gather_bytes, [opt])
    return out.nodes


def stage_compute_s(plan: TrainingPlan) -> np.ndarray:
    """[pp] compute seconds per stage in our engine: every action's pure compute plus the optimizer step."""
    x = plan.inputs
    return x.m * (x.f_compute.sum(axis=1) + x.b_compute.sum(axis=1)) + np.asarray(x.optimizer_s, float)


def export_ranks(case: Case, per_class: bool) -> list[int]:
    """Every rank, or one rank per pipeline stage (all ranks of a stage run the same trace up to peers)."""
    p = case.parallelism
    cost = CommCost(case)
    if not per_class:
        return list(range(cost.mapping.world))
    return [cost.mapping.rank({"pp": s}) for s in range(p.pp)]


def _pb():
    try:
        from chakra.schema.protobuf import et_def_pb2 as pb
        from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage
    except ImportError as e:        # pragma: no cover - exercised only without the extra
        raise SpecError("Chakra export needs the optional extra: pip install --no-deps mlc-chakra "
                        "'protobuf>=6.31.1'") from e
    return pb, encodeMessage, decodeMessage


def _encode(pb, node_id: int, n: TraceNode):
    node = pb.Node(id=node_id, name=n.name, type=getattr(pb, n.type))
    node.data_deps.extend(n.deps)
    node.duration_micros = int(round(n.duration_us))
    node.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
    if n.comm_type:
        node.attr.append(pb.AttributeProto(name="comm_type", int64_val=getattr(pb, n.comm_type)))
    if n.type != "COMP_NODE":
        node.attr.append(pb.AttributeProto(name="comm_size", int64_val=n.comm_size))
    if n.pg_name:
        node.attr.append(pb.AttributeProto(name="pg_name", string_val=n.pg_name))
    for key in ("comm_src", "comm_dst", "comm_tag"):
        if getattr(n, key) >= 0:
            node.attr.append(pb.AttributeProto(name=key, int64_val=getattr(n, key)))
    return node


README = """# Chakra traces of one training step (written by rapidllm)

Case {case_id}: {model} on {world} x {hardware} ({network}); tp {tp}, cp {cp}, ep {ep}, dp {dp}, pp {pp}.
Files: `{stem}.{{rank}}.et` (one per NPU{classes}) and `comm_groups.json` (communicator groups).
{prediction}

Replay with ASTRA-sim 2.x (checked against the congestion-aware analytical backend):

    AstraSim_Analytical_Congestion_Aware \\
      --workload-configuration={dir}/{stem} \\
      --comm-group-configuration={dir}/comm_groups.json \\
      --system-configuration=system.json \\
      --network-configuration=network.yml \\
      --remote-memory-configuration=no_memory_expansion.json

Compute durations are rapidllm's priced operator times (`duration_micros`), so leave roofline mode off.
"""


def write_chakra(case: Case, ops: pd.DataFrame, directory: str | Path, per_class: bool = False,
                 stem: str = "trace") -> list[Path]:
    """Write `{stem}.{rank}.et` per rank, `comm_groups.json` and a README into `directory`."""
    pb, encode, _ = _pb()
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = training_plan(case, ops, CommCost(case))
    groups = group_ids(case)
    table = groups[0]
    paths = []
    for r in export_ranks(case, per_class):
        path = out_dir / f"{stem}.{r}.et"
        with open(path, "wb") as fh:
            encode(fh, pb.GlobalMetadata(version="0.0.4"))
            for k, n in enumerate(rank_trace(case, ops, r, plan, groups)):
                encode(fh, _encode(pb, k, n))
        paths.append(path)
    (out_dir / "comm_groups.json").write_text(json.dumps(table, indent=1) + "\n")
    return paths


def write_readme(case: Case, directory: str | Path, record: dict, per_class: bool, stem: str = "trace") -> Path:
    """The README naming the ASTRA-sim options, with our prediction beside it for comparison."""
    p = case.parallelism
    path = Path(directory) / "README.md"
    path.write_text(README.format(case_id=case.case_id, model=case.model.name, world=p.world,
                                  hardware=case.hardware.name, network=case.network.name, tp=p.tp, cp=p.cp,
                                  ep=p.ep, dp=p.dp, pp=p.pp, stem=stem, dir=Path(directory),
                                  classes=": here one per pipeline stage" if per_class else "",
                                  prediction=_prediction_line(case, record)))
    return path


def _prediction_line(case: Case, record: dict) -> str:
    """Our number beside the replay's: an infeasible case has none (the README said 'nan s'), and a case
    with faults was predicted on its degraded links, which the ASTRA-sim network file does not carry."""
    if record.get("status") != "ok":
        return f"rapidllm predicts no step time: the case does not fit in memory ({record.get('reason')})."
    line = (f"rapidllm predicts {record['step_time_s']:.6g} s for this step, {record['compute_time_s']:.6g} s of "
            "it compute on the critical stage.")
    if case.network.faults:
        line += (f"\nThat prediction has the case's {len(case.network.faults)} degraded or failed link(s) "
                 "(`faults`); the traces and the command below do not.")
    return line


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
