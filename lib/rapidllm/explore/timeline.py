"""The simulated step as a Chrome trace-event timeline (the JSON that Perfetto and chrome://tracing open).

Built from the replay the prediction itself ran (`rapidllm.predict(case, trace=True)`), so the slices are
the engine's own task start and finish times, not a re-simulation:

- process 1, the step: per pipeline stage a compute track (forward / backward tasks named by direction,
  chunk and micro-batch; the optimizer; every idle gap as a `bubble` slice or an exposed-communication
  `wait: ...` slice, split by the engine's own rule, `engine.engine.exposed_part`), a track per send
  direction (p2p sends with bytes and links) and one for the data-parallel gradient buckets and the
  parameter gather. For inference (static batching): the prefill pass and the O - 1 decode steps, stage by
  stage, with the activation sends and a `request` track marking prefill and each decode step.
- process 2, one replayed instance of every layer template back to back: the operators on the compute
  stream and the collectives on one track per parallel axis (op, bytes, group size, network dimensions).

Timestamps are microseconds. On the critical stage the compute-track slices add up to the step exactly as
the breakdown does: task compute + optimizer = compute_time_s, task in-layer waits + `wait:` slices =
exposed_comm_s, `bubble` slices = bubble_s (tests/test_timeline.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rapidllm.engine.composer import Replayed
from rapidllm.engine.engine import TrainingReplay, attribute, exposed_part
from rapidllm.engine.inference import InferenceReplay, PassParts
from rapidllm.engine.schedule import GRAD, OPT, P2P, PARAM, TASK, node_labels
from rapidllm.graph.templates import COMPUTE, Template
from rapidllm.prediction import Prediction
from rapidllm.spec.case import Case

US = 1e6                        # trace-event timestamps are microseconds
WAIT_NAMES = {P2P: "wait: p2p receive", GRAD: "wait: gradient buckets", PARAM: "wait: parameter gather"}


class TimelineError(ValueError):
    """The prediction has no timeline (infeasible case, baseline engine, serving mode)."""


@dataclass
class TraceBuilder:
    """Trace events with processes and threads numbered in order of first use (deterministic ids)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    _pids: dict[str, int] = field(default_factory=dict)
    _tids: dict[tuple[int, str], int] = field(default_factory=dict)

    def track(self, process: str, thread: str, order: int) -> tuple[int, int]:
        """(pid, tid) of a named track, declared with metadata events on first use; `order` sorts it."""
        if process not in self._pids:
            pid = self._pids[process] = len(self._pids) + 1
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}})
            self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                "args": {"sort_index": pid}})
        pid = self._pids[process]
        if (pid, thread) not in self._tids:
            tid = self._tids[(pid, thread)] = len(self._tids) + 1
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
            self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                "args": {"sort_index": order}})
        return pid, self._tids[(pid, thread)]

    def slice(self, where: tuple[int, int], name: str, cat: str, start_s: float, dur_s: float,
              args: dict[str, Any] | None = None) -> None:
        """A complete ("X") event; empty slices are left out."""
        if dur_s <= 0:
            return
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": where[0], "tid": where[1],
                            "ts": start_s * US, "dur": dur_s * US, "args": args or {}})


def _links(case: Case, dims: tuple[int, ...]) -> str:
    return "+".join(case.network.dimensions[d].name for d in dims)


def _templates(tb: TraceBuilder, case: Case, dims_of, templates: tuple[Template, ...] | list[Template],
               replayed: Replayed, title: str) -> None:
    """One replayed instance of every template, back to back: operators and per-axis collectives."""
    process = f"{title}: one instance of each layer template, back to back"
    offset = 0.0
    for t in templates:
        res = replayed.results.get((t.section, t.part))
        if res is None or not t.nodes:
            continue
        t0 = float(res.start.min())
        tb.slice(tb.track(process, "template", 0), f"{t.section} {t.part}", "template", offset, res.span,
                 {"span_s": res.span, "compute_s": res.compute, "exposed_comm_s": res.exposed})
        for j, node in enumerate(t.nodes):
            s, d = offset + float(res.start[j]) - t0, float(res.finish[j] - res.start[j])
            if node.kind == COMPUTE:
                tb.slice(tb.track(process, "compute stream", 1), node.name, "operator", s, d,
                         {"phase": node.phase, "section": t.section, "time_s": d})
            else:
                dims = dims_of(node.axis)
                tb.slice(tb.track(process, f"{node.axis} collectives ({_links(case, dims) or 'local'})", 2),
                         node.name, "collective", s, d,
                         {"op": node.op, "bytes": node.nbytes, "group": node.axis,
                          "group_size": case.parallelism.size(node.axis), "link": _links(case, dims),
                          "time_s": d})
        offset += res.span


def _task_name(direction: str, chunk: int, micro: int, v: int, piece: int, pieces: int) -> str:
    name = f"{direction} mb{micro}" if v == 1 else f"{direction} c{chunk} mb{micro}"
    return name + (f" [{piece + 1}/{pieces}]" if pieces > 1 else "")


def training_trace(r: TrainingReplay) -> tuple[TraceBuilder, dict[str, float]]:
    """Tracks of a training step from its replay (see the module docstring), and the engine's attribution
    of the step (critical stage, compute, exposed communication, bubble) they add up to."""
    case, x, g = r.case, r.plan.inputs, r.graph
    start, finish, crit = np.asarray(r.start), np.asarray(r.finish), np.asarray(r.crit)
    labels = node_labels(x, g)
    split = attribute(g, start, finish, crit)
    critical = int(split["critical_stage"])
    p = case.parallelism
    process = f"{case.model.name} training step (tp {p.tp} pp {p.pp} dp {p.dp}; critical stage {critical})"
    tb = TraceBuilder()
    dp_links = _links(case, x.dp_dims)
    for s in range(x.pp):
        compute_track = tb.track(process, f"stage {s} compute" + (" (critical)" if s == critical else ""), 10 * s)
        prev_end = 0.0
        for n in np.flatnonzero(g.stage == s).tolist():
            lab, k = labels[n], int(g.kind[n])
            t0, dur = float(start[n]), float(finish[n] - start[n])
            args = {"stage": s, "chunk": lab.chunk, "micro_batch": lab.micro_batch}
            if k in (TASK, OPT):
                gap, c = t0 - prev_end, int(crit[n])
                part = exposed_part(int(g.kind[c]), gap, float(g.dur[c])) if c >= 0 and gap > 0 else 0.0
                tb.slice(compute_track, "bubble", "bubble", prev_end, gap - part, {"stage": s})
                if part > 0:
                    tb.slice(compute_track, WAIT_NAMES[int(g.kind[c])], "exposed_comm", t0 - part, part,
                             {"stage": s, "waits_for": f"node {c}"})
                prev_end = float(finish[n])
                comp = float(g.compute[n])
                name = "optimizer" if k == OPT else _task_name(lab.direction, lab.chunk, lab.micro_batch, x.v,
                                                                 lab.piece, lab.pieces)
                tb.slice(compute_track, name, "compute" if k == OPT else lab.direction, t0, dur,
                         {**args, "direction": lab.direction, "compute_s": comp, "exposed_comm_s": dur - comp})
            elif k == P2P:
                fwd = lab.direction == "F"
                peer = (s + 1) % x.pp if fwd else (s - 1) % x.pp
                pp_links = _links(case, r.cost.send_dims(s if fwd else peer))     # this boundary's sends
                tb.slice(tb.track(process, f"stage {s} pp send {'fwd' if fwd else 'bwd'}", 10 * s + 1 + (not fwd)),
                         f"send {'activations' if fwd else 'gradients'} {s}->{peer}", "p2p", t0, dur,
                         {**args, "bytes": r.plan.p2p_bytes, "group": f"pp {s}->{peer}", "link": pp_links,
                          "direction": lab.direction})
            else:
                bucket = k == GRAD
                tb.slice(tb.track(process, f"stage {s} dp gradients", 10 * s + 3),
                         f"dp.{r.plan.bucket_op} bucket" if bucket else "dp.all_gather parameters", "collective",
                         t0, dur, {**args, "bytes": r.plan.bucket_bytes if bucket else r.plan.gather_bytes,
                                   "group": "dp", "group_size": p.dp_cp, "link": dp_links})
        if s == critical:
            tail = float(split["step_time_s"]) - prev_end
            tb.slice(compute_track, WAIT_NAMES[PARAM], "exposed_comm", prev_end, tail, {"stage": s})
    replayed = r.plan.replayed[critical if len(r.plan.replayed) > 1 else 0]
    _templates(tb, case, r.cost.dims, r.plan.templates, replayed, process)
    return tb, split


def _pass_pieces(parts: PassParts) -> list[tuple[int, str, str, float, float]]:
    """(stage, kind, name, seconds, compute seconds) of one forward pass in the order it runs."""
    out = []
    for s in range(parts.pp):
        for section, n, span, comp in parts.layers:
            out.append((s, "layers", f"{section} x{n:g}", n * span, n * comp))
        if s + 1 < parts.pp:
            out.append((s, "send", f"send activations {s}->{s + 1}", parts.sends[s], 0.0))
    out.append((parts.pp - 1, "head", "lm head", parts.head_span, parts.head_compute))
    return out


def inference_trace(r: InferenceReplay) -> TraceBuilder:
    """Prefill, then output_tokens - 1 decode steps whose pieces interpolate linearly between the first
    and the last decode pass (their mean is the ITL the prediction reports)."""
    case, w = r.case, r.case.workload
    p = case.parallelism
    process = f"{case.model.name} request (tp {p.tp} pp {p.pp}; batch {w.batch}, {w.prompt_tokens} in, " \
              f"{w.output_tokens} out)"
    tb = TraceBuilder()
    links = _links(case, r.cost.dims("pp"))
    request = tb.track(process, "request", 0)
    decodes = [d for d in (r.decode_first, r.decode_last) if d is not None]   # none: an encoder's pass
    first, last = (_pass_pieces(d) for d in decodes) if decodes else ([], [])
    steps = max(w.output_tokens - 1, 0)
    passes: list[tuple[str, list[tuple[int, str, str, float, float]]]] = [("prefill", _pass_pieces(r.prefill))]
    for k in range(steps):
        f = k / (steps - 1) if steps > 1 else 0.5
        passes.append((f"decode {k + 1}", [(s, kind, name, a + f * (b - a), ca + f * (cb - ca))
                                          for (s, kind, name, a, ca), (_, _, _, b, cb) in zip(first, last)]))
    t = 0.0
    for label, pieces in passes:
        t_pass = t
        for s, kind, name, dur, comp in pieces:
            if kind == "send":
                tb.slice(tb.track(process, f"stage {s} pp send", 10 * s + 1), name, "p2p", t, dur,
                         {"pass": label, "bytes": (r.prefill if label == "prefill" else r.decode_first).send_bytes,
                          "group": f"pp {s}->{s + 1}", "link": links})
            else:
                tb.slice(tb.track(process, f"stage {s} compute", 10 * s), name, label.split()[0], t, dur,
                         {"pass": label, "compute_s": comp, "exposed_comm_s": dur - comp})
            t += dur
        tb.slice(request, label, "request", t_pass, t - t_pass, {"time_s": t - t_pass})
    _templates(tb, case, r.cost.dims, r.prefill.templates + sum((d.templates for d in decodes[:1]), ()),
               _merged(r.prefill.replayed, *(d.replayed for d in decodes[:1])), process)
    return tb


def _merged(*parts: Replayed) -> Replayed:
    return Replayed({k: v for p in parts for k, v in p.results.items()})


def timeline(result: dict[str, Any] | Prediction) -> dict[str, Any]:
    """The trace-event document of a record made with `evaluate(..., trace=True)` or of a prediction made
    with `predict(..., trace=True)`."""
    rec = {**result.to_dict(), "schedule": result.schedule} if isinstance(result, Prediction) else dict(result)
    r = rec.get("schedule")
    if rec.get("status") != "ok":
        raise TimelineError(f"no timeline: the case is {rec.get('status')} ({rec.get('reason')})")
    if isinstance(r, TrainingReplay):
        tb, split = training_trace(r)
        rec["critical_stage"] = split["critical_stage"]
    elif isinstance(r, InferenceReplay):
        tb = inference_trace(r)
    else:
        raise TimelineError("no timeline: only the event engine's training steps and static-batching "
                            "requests (concurrency <= batch, without parallelism.microbatch_overlap) have one")
    keys = ("case_id", "step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s", "ttft_s", "itl_s",
            "e2e_latency_s", "critical_stage")
    title = next(e["args"]["name"] for e in tb.events if e["name"] == "process_name")
    return {"traceEvents": tb.events, "displayTimeUnit": "ms",
            "otherData": {"title": title, **{k: _plain(rec[k]) for k in keys if rec.get(k) is not None}}}


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def write_timeline(rec: dict[str, Any] | Prediction, path: str | Path) -> Path:
    """Write `timeline(rec)` as JSON (deterministic: same case, same bytes)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(timeline(rec), separators=(",", ":")) + "\n")
    return out
