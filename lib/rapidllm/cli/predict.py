"""`rapidllm predict`: one case, as a readable breakdown or as stable JSON.

The table shows where the step (or request) time goes, compute / exposed communication / pipeline bubble
as shares of it, and the worst stage's memory by component against the device's capacity. `--json` prints
the README's keys in a fixed order (`serving`: the inference model used); a key that does not apply to
the case (TTFT of a training step, MFU of an inference run, any timing of a case that does not fit) is null,
never 0.0.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from rapidllm.cli.common import output_dir, output_path, plain_number, print_json, write_output
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import faults_text
from rapidllm.spec.paths import display

JSON_KEYS = ("case_id", "status", "reason", "step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s",
             "mfu", "hfu", "tokens_per_s", "ttft_s", "itl_s", "e2e_latency_s", "sequences_in_flight",
             "in_flight_limit", "peak_memory_bytes",
             "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
             "framework_bytes", "capacity_bytes", "feasible", "device_validated", "serving", "faults")

# What each serving model assumes about the scheduler, under the TTFT / ITL lines (docs/engine.md, "Serving").
SERVING_NOTES = {
    "steady_state": "serving steady_state: the mean of desynchronized clients, a new prompt's prefill rides in "
                    "the next step (`serving: simulated` runs closed-loop clients, which can stay in lockstep and "
                    "queue their prefills: TTFTs differ up to 10x); docs/engine.md \"Serving\"",
    "simulated": "serving simulated: closed-loop clients, prefills queued FCFS up to max_num_tokens per "
                 "iteration; docs/engine.md \"Serving\"",
    "disaggregated": "serving disaggregated: decode instances only, prefills run on other GPUs; docs/engine.md "
                     "\"Serving\""}

# Why a fault can turn the bubble into exposed communication (docs/engine.md, "Breakdown"): the split is the
# critical stage's, and the stage a fault slows is that stage and waits for no other.
FAULT_SPLIT_NOTE = ("the split is the critical stage's; a stage whose collectives a fault slows becomes it and "
                    "waits for no other stage, so its bubble can fall to 0 (its slowed collectives count as "
                    "exposed communication) while the other stages idle for it; docs/engine.md \"Breakdown\"")

MEMORY_ROWS = (("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer state"),
               ("activations", "activations"), ("kv_cache", "KV cache"), ("framework", "framework reserve"))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict one case")
    p.add_argument("case", help="case YAML")
    p.add_argument("--json", action="store_true", help="stable JSON output")
    p.add_argument("--engine", choices=("event", "baseline"), default="event",
                   help="event: graph replay on the network simulator; baseline: alpha-beta ablation")
    p.add_argument("--measured", metavar="FILE", help="CSV name,time_s[,section,phase] of measured operator times")
    p.add_argument("--what-if", action="append", metavar="NAME=xF|/F|TIME",
                   help="scale (x0.5), speed up (/2) or set (1 ms) one operator's time, or every operator "
                        "of a kind (gemm, attention, pointwise; a time sets each of them to it); repeatable")
    p.add_argument("--timeline", metavar="FILE", help="also write the simulated step as Chrome trace-event JSON")
    p.add_argument("--chakra", metavar="DIR", help="also write the training step as Chakra traces for ASTRA-sim")
    p.add_argument("--chakra-per-class", action="store_true",
                   help="with --chakra: one trace per pipeline stage instead of one per rank")
    p.add_argument("--cost", action="store_true",
                   help="add $/GPU-hour, $/step, $/M tokens, tokens per $ and per watt (docs/cost.md)")
    p.add_argument("--usd-per-gpu-hour", type=float, metavar="RATE",
                   help="with --cost: price at this rental rate (e.g. a cloud price) instead of the device's "
                        "energy + capital; also prices a device without cost inputs (docs/cost.md)")
    p.set_defaults(func=run)


# Kernel work (loop iterations) run as plain Python before numba is loaded (rapidllm/jit.py): ~0.1-0.2 s at
# most, against ~0.6 s to import numba and load its cache; GPT-175B on 64 GPUs needs ~30,000.
INTERPRET_BUDGET = 100_000


def run(args: argparse.Namespace) -> int:
    from rapidllm.jit import interpret_budget

    with interpret_budget(INTERPRET_BUDGET):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from rapidllm.engine.measured import adjuster
    from rapidllm.prediction import CHAKRA_TRAINING_ONLY, predict
    from rapidllm.spec.case import load_case

    case = load_case(args.case)
    adjust = adjuster(args.measured, args.what_if or ())
    if args.chakra and not case.training:       # refused before any work or any file
        raise SpecError(f"{display(args.case)}: --chakra: {CHAKRA_TRAINING_ONLY}")
    timeline = output_path(args.timeline, "--timeline") if args.timeline else None
    chakra = output_dir(args.chakra, "--chakra folder") if args.chakra else None
    rate = args.usd_per_gpu_hour
    if rate is not None and not (args.cost and math.isfinite(rate) and rate > 0):
        raise SpecError(f"rapidllm predict: --usd-per-gpu-hour: {rate:g}" + (
            " without --cost; allowed: with --cost" if args.cost is False and math.isfinite(rate) and rate > 0
            else "; allowed: a finite rate > 0, in USD per GPU-hour"))
    hw_cost = _device_cost(args.case, case, rate) if args.cost else None   # refused before any prediction
    try:
        pred = predict(case, args.engine, adjust, trace=bool(args.timeline))
    except SpecError as err:            # a limit met while predicting (e.g. a collective too large to simulate)
        raise SpecError([f"{display(args.case)}: {line}" for line in err.lines]) from None
    record = pred.to_dict()
    if timeline is not None:
        from rapidllm.explore.timeline import TimelineError, write_timeline
        try:
            write_output(lambda path: write_timeline(pred, path), timeline, "timeline")
        except TimelineError as err:
            raise SpecError(f"{display(args.case)}: --timeline: {err}") from None
    if chakra is not None:
        from rapidllm.prediction import export_chakra
        paths: list = []
        write_output(lambda path: paths.extend(export_chakra(case, path, args.chakra_per_class)), chakra,
                     "Chakra traces")
        print(f"{len(paths)} Chakra traces -> {args.chakra}", file=sys.stderr)
    record["serving"] = serving_model(case, pred)
    record["faults"] = [dataclasses.asdict(f) for f in case.network.faults]
    out = {k: record[k] for k in JSON_KEYS}
    costs: dict = {}
    note = None
    if hw_cost is not None:             # an infeasible case keeps its $/hour; what needs a time is null
        from rapidllm.cost import price_prediction
        # $/GPU-hours of two devices compare only on one basis: the output says which (docs/cost.md), and,
        # without a rate, what that basis leaves out
        costs = {**price_prediction(case, pred, hw_cost), "cost_basis": hw_cost.operating.basis}
        note = hw_cost.operating.basis_note("--usd-per-gpu-hour RATE")
    if args.json:
        print_json({**out, **costs, **({"cost_note": note} if hw_cost is not None else {})}, indent=2)
        return 0
    print("\n".join(table(case, pred, _variant(args)) + [f"  {k:28s} {_number(v)}" for k, v in costs.items()]
                    + ([f"  note: {note}"] if note else [])))
    return 0


def _device_cost(path: str, case, rate: float | None):
    """The cost inputs `--cost` prices the case with (`cost.config.device_cost`: the case file's inline
    device's own, or a device file's it names by path, else the config device's, at `rate` when given)."""
    from rapidllm.cost.config import case_file_device, device_cost

    return device_cost(case_file_device(path), case.hardware.name, rate, f"{display(path)}: hardware")


def _seconds(t: float) -> str:
    """A duration in s, ms or us, whichever keeps the number >= 1 (0 as '0 s')."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale or unit == "us":
            return f"{t / scale:10.4g} {unit:2s}" if t else f"{0:10.4g} s "
    return ""


def _hint(case, pred) -> str:
    """One line on what would make an infeasible case fit: the lever of its largest memory component (the
    memory model's: sharding, recompute, splitting) and the search that finds a layout that fits."""
    par, mem = case.parallelism, pred.memory
    if mem.feasible:                    # within the HBM: the serving engine's KV pool holds no prefill batch
        return ("raise workload.kv_cache_fraction, shorten the requests, or more tp or pp (fewer weights and KV "
                "heads per GPU); `rapidllm search` finds layouts that fit")
    shards = par.dp * par.cp > 1 and par.fsdp == "none"
    levers = {
        "weights": "more tp or pp (ep for a MoE model) splits the weights",
        "gradients": ("ZeRO 2-3 (parallelism.zero) shards the gradients over dp" if shards and par.zero < 2
                      else "more tp or pp (or dp with ZeRO 2-3) splits the gradients"),
        "optimizer state": ("ZeRO 1-3 (parallelism.zero) shards it over dp" if shards and par.zero < 1
                            else "more tp or pp (or dp with ZeRO 1-3) splits it")
                           + ("; parallelism.optimizer_state: bf16 halves it (16-bit Adam state)"
                              if par.optimizer_state == "fp32" and case.weight_precision not in ("fp32", "tf32")
                              else ""),
        "activations": "parallelism.recompute: full, a smaller workload.micro_batch, or more tp (with sp), cp or "
                       "pp shrink them",
        "KV cache": "a smaller batch or more tp or pp shrinks it"}
    sizes = {"weights": mem.weights, "gradients": mem.gradients, "optimizer state": mem.optimizer,
             "activations": mem.activations, "KV cache": mem.kv_cache}
    largest = max(sizes, key=sizes.__getitem__)
    return f"the largest part is the {largest}: {levers[largest]}; `rapidllm search` finds layouts that fit"


def _in_flight(case, pred) -> str:
    """Why that many sequences run at once (memory/kv_pool.py): the static batch, every client, or the
    serving engine's admission, which queues the other clients."""
    w, n = case.workload, int(pred.sequences_in_flight)
    if pred.in_flight_limit == "batch":
        return "(static batch)"
    if pred.in_flight_limit == "concurrency":
        return f"(all {w.concurrency} clients)"
    why = (f"the KV-cache pool holds {n} requests of {w.prompt_tokens} + {w.output_tokens} tokens"
           if pred.in_flight_limit == "kv_cache" else f"max_batch_size {w.max_batch_size}")
    each = f" of each of the {case.parallelism.dp} replicas" if case.parallelism.dp > 1 else ""
    return f"({why}; {w.concurrency - n} of the {w.concurrency} clients{each} queue)"


def _number(value: float | str) -> str:
    """A cost column for the table: 'n/a' where it does not apply (NaN: no $/step for inference, nothing
    rate-based for a case that does not fit), never 'nan'; a plain number (`plain_number`); the basis with
    its explanation."""
    from rapidllm.cost.operating import BASES

    if isinstance(value, str):
        return f"{value} ({BASES[value]})"
    return "n/a" if math.isnan(value) else plain_number(value)


def _variant(args: argparse.Namespace) -> str:
    """What the flags changed, for the header: the case id names the case only, so a what-if or baseline
    run would otherwise read like the plain prediction of the same id."""
    parts = [f"engine {args.engine}"] if args.engine != "event" else []
    parts += [f"measured {args.measured}"] if args.measured else []
    parts += [f"what-if {w}" for w in args.what_if or ()]
    return ", ".join(parts)


def _layout(case, pred) -> str:
    """'dp 2 x tp 8 x pp 4, sp, selective recompute, 1f1b, attention flash': the case id names the layout only
    as a hash, so the outputs of several layouts of one model and cluster read alike."""
    par = case.parallelism
    axes = " x ".join(f"{a} {getattr(par, a)}" for a in ("dp", "tp", "pp", "cp") if getattr(par, a) > 1 or a != "cp")
    parts = [axes] + ([f"ep {par.ep}"] if par.ep > 1 else []) + ([f"zero {par.zero}"] if par.zero else [])
    if case.training:
        schedule = par.schedule + (f" v{par.virtual_stages}" if par.virtual_stages > 1 else "")
        recompute = f"{par.recompute} recompute" if par.recompute != "none" else "no recompute"
        parts += (["sp"] if par.sp else []) + [recompute, schedule]
    else:
        parts.append(_serving(case, pred))
    return ", ".join([*parts, f"attention {case.attention_impl}"])


def serving_model(case, pred) -> str | None:
    """Which inference model priced the case ("static" batching, or the `workload.serving` model when
    concurrency exceeds the batch); None for training. The serving models' TTFTs differ up to 10x at high
    concurrency (docs/engine.md, "Serving"), so the output names the one a number came from. The baseline
    engine prices a static batch whatever the case asks (it reports no sequences in flight)."""
    if case.training:
        return None
    w = case.workload
    baseline = pred.status == "ok" and pred.sequences_in_flight is None
    return w.serving if w.concurrency > w.batch and not baseline else "static"


def _serving(case, pred) -> str:
    w = case.workload
    if serving_model(case, pred) == "static":
        return f"static batch {w.batch}"
    return f"serving {w.serving}, concurrency {w.concurrency}, batch {w.batch}"


def table(case, pred, variant: str = "") -> list[str]:
    """The human-readable breakdown of one Prediction, one line per row."""
    head = (f"case {pred.case_id}: {case.model.name} on {case.parallelism.world} x {case.hardware.name} "
            f"({case.network.name}), {pred.mode}" + (f" [{variant}]" if variant else ""))
    lines = [head, f"  layout: {_layout(case, pred)}"]
    if case.network.faults:
        lines.append(f"  faults: {faults_text(case.network.faults)}")
    if pred.status != "ok":
        lines += [f"  infeasible: {pred.reason}", f"  hint: {_hint(case, pred)}"]
    else:
        total = pred.step_time_s
        name = "step time" if pred.mode == "training" else "request (end to end)"
        lines += [f"  {'time':28s} {'':>13s} {'share':>7s}", f"  {name:28s} {_seconds(total)} {100.0:6.1f}%"]
        for label, value in (("compute", pred.compute_time_s), ("exposed communication", pred.exposed_comm_s),
                             ("pipeline bubble", pred.bubble_s)):
            value = value if abs(value) > 1e-9 * total else 0.0   # float residue of the split: "2.292e-07 us"
            share = 100.0 * value / total if total else 0.0
            lines.append(f"    {label:26s} {_seconds(value)} {share:6.1f}%")
        if case.network.faults and pred.mode == "training" and case.parallelism.pp > 1:
            lines.append(f"  note: {FAULT_SPLIT_NOTE}")
        if pred.mode == "inference":
            lines += [f"  {'time to first token':28s} {_seconds(pred.ttft_s)}",
                      f"  {'inter-token latency':28s} {_seconds(pred.itl_s)}"]
            if pred.sequences_in_flight is not None:          # not from the baseline engine
                lines.append(f"  {'sequences in flight':28s} {pred.sequences_in_flight:10.0f}    "
                             f"{_in_flight(case, pred)}")
            if serving_model(case, pred) != "static":
                lines.append(f"  note: {SERVING_NOTES[case.workload.serving]}")
        rate = plain_number(pred.tokens_per_s)
        dp = case.parallelism.dp        # an inference rate is one replica's; the header counts every replica's GPUs
        label = "throughput" if pred.mode == "training" or dp == 1 else f"throughput, each of {dp} replicas"
        lines.append(f"  {label:28s} {rate:>10s} tokens/s")   # 10,164 rather than 1.016e+04
        if pred.mfu is not None:
            lines.append(f"  {'MFU / HFU':28s} {100 * pred.mfu:9.1f}% / {100 * pred.hfu:.1f}%")
    mem = pred.memory
    lines.append(f"  {'memory per GPU (worst stage)':28s} {'GiB':>13s} {'of capacity':>12s}")
    for key, label in MEMORY_ROWS:
        value = getattr(mem, key)
        if value:
            lines.append(f"    {label:26s} {value / 2**30:13.2f} {100 * value / mem.capacity:11.1f}%")
    lines.append(f"    {'peak':26s} {mem.peak / 2**30:13.2f} {100 * mem.peak / mem.capacity:11.1f}%")
    lines.append(f"    {'capacity':26s} {mem.capacity / 2**30:13.2f}")
    return lines
