"""Inference on the engine: prefill, decode steps with a growing KV cache, static or in-flight batching.

A forward pass walks every pipeline stage in turn: layers x replayed template span, the LM head, and pp-1
activation sends. Decode attention grows linearly with the context, so the mean decode step is the mean of
the first and last step (exact for a linear cost). Static batching runs its one batch that way, stage after
stage (TensorRT-LLM's former static path: one request batch, nothing to overlap). A serving engine with
pp > 1 keeps pp micro-batches in flight instead, one per stage (`serving_pass`, `pipelined`: vLLM,
TensorRT-LLM, SGLang; docs/engine.md "Serving"): its N sequences run as pp micro-batches of ~N/pp, and each
sequence's token step is one round, the longer of the last stage's work for all micro-batches and one
micro-batch's trip through the stages and sends. Every serving model below prices its steps so.

Static batching (concurrency <= batch): TTFT = prefill(batch), ITL = decode step(batch),
e2e = TTFT + (output_tokens - 1) x ITL, throughput = batch x output_tokens / e2e. An encoder (causal: false,
output_tokens 0) runs the prefill pass alone: e2e = TTFT, ITL 0, throughput = batch x prompt_tokens / e2e
(tokens encoded per second).
In-flight batching (concurrency C > batch, a serving engine such as vLLM/TensorRT-LLM): the engine keeps
N = min(C, max_batch_size, requests whose KV reservation fits its pool) sequences in flight and queues the
other C - N clients (memory/kv_pool.py, docs/serving-capacity.md); N = C when everything fits. Three models
(`workload.serving`, docs/engine.md "Serving"):
- "steady_state" (default): decode steps run with N sequences; every step also absorbs the prefills of the
  requests that replace finished ones, share = N / (batch x steps) requests per step on average (a request
  holds its slot for steps = 1 + (output_tokens - 1) / tokens_per_step steps, its prompt's and its decodes'),
  whose tokens ride in the step's fused GEMMs (TensorRT-LLM's in-flight batching packs context and
  generation tokens into one forward pass; vLLM's chunked prefill likewise). The step is priced by the
  simulator's iteration rule (`serving.IterationCost`) at the mean iteration: share x batch x prompt_tokens
  prefill tokens beside N decoding sequences at the mean context, so ITL = that step (per emitted token);
  a new request waits on average half a step, then its first token comes at the end of the step that runs
  its prefill: TTFT = step / 2 + the step with max(share, 1) requests' prompts, plus the queue's wait
  (`queue_wait`, 0 when N = C); throughput = N x output_tokens / steps per step (N / ITL without drafts);
  ITL is 0 for one output token (there is no second). A mean over desynchronized clients.
- "disaggregated": the decode instances of a prefill-decode disaggregated deployment (DeepSeek's serving,
  DistServe, SGLang PD): the same without the prefill share, which runs on separate prefill instances;
  TTFT = prefill(batch) there + ITL / 2 (+ the queue's wait); memory holds the KV cache of the N sequences.
- "simulated": C closed-loop clients, one sequence per request, run through the iteration-level simulator
  of `engine/serving.py` with at most N in the engine; its iteration cost is interpolated between forward
  passes priced here at running batches 1, 2, 4, ... and N (prefill of n whole prompts, decode of n sequences
  at the first and last context, and decode steps of as many rows as those prompts' tokens, the GEMM rows a
  fused step's prompts add: `_iteration_cost`).
Speculative decoding (`workload.draft_tokens`, MTP drafts): a decode step verifies 1 + d queries per
sequence and runs the MTP modules, and emits `tokens_per_step` = 1 + p + ... + p^d tokens per sequence on
average, so ITL = step / tokens_per_step and a steady-state step absorbs the prefills of
N / (batch x (1 + (output_tokens - 1) / tokens_per_step)) requests (docs/mla.md, "MTP speculative decoding").
With `parallelism.microbatch_overlap: 2` every forward pass runs as two overlapped micro-batches
(engine/microbatch.py, docs/microbatch-overlap.md); a static-batching trace then has no timeline.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import Replayed, replay_all
from rapidllm.engine.microbatch import Adjust, Ops, at_batch, overlap_active, overlapped_pass, split_batch
from rapidllm.engine.serving import COMPUTE, SPAN, IterationCost, build_cost, one_token, simulate
from rapidllm.graph.templates import Template, extra_templates, layer_counts, layer_templates, layer_tokens, ops_view
from rapidllm.memory.kv_pool import Admission
from rapidllm.spec.case import MAX_SERVING_ITERATIONS, Case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload

SECTIONS = ("prefill_", "decode_first_", "decode_last_")


@dataclass(frozen=True)
class PassParts:
    """One forward pass through all stages, piece by piece: what `forward_pass` sums and a timeline draws.
    Every stage runs the same layers (`layers`: section, layers per stage, span and compute of one layer);
    the last stage adds the LM head; pp - 1 activation sends link the stages (`sends`, boundary by boundary:
    they differ where stages do not fill whole nodes)."""
    pp: int
    layers: tuple[tuple[str, float, float, float], ...]
    head_span: float
    head_compute: float
    sends: tuple[float, ...]
    send_bytes: float
    replayed: Replayed
    templates: tuple[Template, ...]

    def stage(self) -> tuple[float, float]:
        """(time, compute time) of one stage's layers, without the head the last stage adds."""
        span = compute = 0.0
        for _section, n, layer_span, layer_compute in self.layers:
            span += n * layer_span
            compute += n * layer_compute
        return span, compute

    def totals(self) -> tuple[float, float]:
        """(time, compute time) of the pass."""
        span = compute = 0.0
        for _section, n, layer_span, layer_compute in self.layers:
            span += n * self.pp * layer_span
            compute += n * self.pp * layer_compute
        span += self.head_span
        compute += self.head_compute
        span += sum(self.sends)
        return span, compute


def pass_parts(case: Case, ops: Ops, prefix: str, cost: CommCost, overlap: bool) -> PassParts:
    """Replay the templates of one forward pass (section prefix) and keep its pieces."""
    w, p = case.workload, case.parallelism
    assert isinstance(w, InferenceWorkload)
    ops = ops_view(ops)
    heads = [t for t in extra_templates(case, ops) if t.section == f"{prefix}head"]
    templates = layer_templates(case, ops, prefix) + heads
    r = replay_all(case, ops, templates, cost, -1, overlap)
    layers = tuple((section, n, r.span(section, "fwd"), r.compute(section, "fwd"))
                   for section, n in layer_counts(case, prefix).items())
    nbytes = layer_tokens(case, prefix) * case.model.hidden * DTYPE_BYTES[case.activation_precision]
    return PassParts(p.pp, layers, r.span(f"{prefix}head", "extra_fwd"), r.compute(f"{prefix}head", "extra_fwd"),
                     tuple(cost.time("pp", "send_recv", nbytes, s) for s in range(p.pp - 1)), float(nbytes), r,
                     tuple(templates))


def forward_pass(case: Case, ops: Ops, prefix: str, cost: CommCost, overlap: bool,
                 adjust: Adjust | None = None) -> tuple[float, float]:
    """(time, compute time) of one forward pass through all stages for a section prefix; as overlapped
    micro-batches when the case sets `parallelism.microbatch_overlap` (engine/microbatch.py)."""
    if overlap_active(case):
        return overlapped_pass(case, ops, prefix, cost, overlap, adjust)
    return pass_parts(case, ops, prefix, cost, overlap).totals()


def pipelined(parts: list[PassParts], trip: bool = True) -> np.ndarray:
    """(span, compute) of one round of a serving engine's pipeline: micro-batch m (pass `parts[m]`) runs
    through every stage once per round, each stage working on a different micro-batch, and every sequence
    of every micro-batch gets one token per round. The round lasts the longer of
    - the busiest stage's work, the last one (its layers and the LM head for every micro-batch), the
      activation sends being asynchronous and off the compute stream (SGLang's `event_loop_pp`: "async
      send but sync recv"), and
    - one micro-batch's trip through all stages with its pp - 1 sends: its next token step cannot start
      before its last one has left the last stage.
    With pp equal stages of time t and no head or sends that is pp x t; one micro-batch is the plain pass.
    The compute column is the same schedule with communication free (no sends, layer compute only).
    trip=False gives the busiest stage's work alone: what prompt tokens riding in micro-batches that are in
    the pipeline anyway add to a round (`_iteration_cost`), their micro-batches making no trip of their own."""
    if len(parts) == 1 and trip:
        return np.array(parts[0].totals())
    out = []
    for col in (SPAN, COMPUTE):
        head = [p.head_span if col == SPAN else p.head_compute for p in parts]
        stage = [p.stage()[col] for p in parts]
        sends = [sum(p.sends) if col == SPAN else 0.0 for p in parts]
        busiest = sum(t + h for t, h in zip(stage, head))
        through = max(p.pp * t + h + s for p, t, h, s in zip(parts, stage, head, sends)) if trip else 0.0
        out.append(max(busiest, through))
    return np.array(out)


def serving_pass(case: Case, ops: Ops, prefixes: tuple[str, ...], batch: int, overlap: bool,
                 adjust: Adjust | None, trip: bool = True, parts: int = 0) -> tuple[list[np.ndarray], int]:
    """(span, compute) of a serving engine's step over `batch` sequences for each section prefix, and the
    link events simulated. With pp > 1 the engine keeps pp micro-batches in flight (`split_batch`: pp of
    ~batch / pp sequences, fewer when batch < pp), one per stage, and the step is their round
    (`pipelined`): vLLM's engine core queues `max_concurrent_batches` = pp scheduled batches
    (vllm/config/vllm.py, vllm/v1/engine/core.py `step_with_batch_queue`), TensorRT-LLM's PyTorch executor
    runs `num_micro_batches` = pp_size disjoint micro-batches (tensorrt_llm/_torch/pyexecutor/py_executor.py,
    `_executor_loop_pp`) and SGLang one running batch per micro-batch (`event_loop_pp`); docs/engine.md
    "Serving". With pp 1 it is the forward pass at `batch` (two overlapped micro-batches under
    `microbatch_overlap`, engine/microbatch.py). trip=False (pp > 1): the busiest stage's work alone
    (`pipelined`); `parts` (pp > 1): the sequences split over that many micro-batches instead of pp, those a
    step's prompts ride in (`_iteration_cost`)."""
    sizes = split_batch(batch, parts or case.parallelism.pp)
    if case.parallelism.pp == 1:
        ncase, nops = at_batch(case, ops, batch, adjust)
        cost = CommCost(ncase)
        return [np.array(forward_pass(ncase, nops, s, cost, overlap, adjust)) for s in prefixes], cost.simulated
    parts: dict[int, list[PassParts]] = {}
    events = 0
    for n in sorted(set(sizes)):
        ncase, nops = at_batch(case, ops, n, adjust)
        cost = CommCost(ncase)
        parts[n] = [pass_parts(ncase, nops, s, cost, overlap) for s in prefixes]
        events += cost.simulated
    return [pipelined([parts[n][k] for n in sizes], trip) for k in range(len(prefixes))], events


@dataclass(frozen=True)
class InferenceReplay:
    """A static-batching request as replayed: the prefill pass and the first and last decode passes
    (`predict(..., trace=True)`); decode step k of the O - 1 interpolates linearly between the two decode passes.
    An encoder's forward pass (output_tokens 0) has no decode passes (None)."""
    case: Case
    cost: CommCost
    prefill: PassParts
    decode_first: PassParts | None
    decode_last: PassParts | None


def inference_record(case: Case, ops: Ops, overlap: bool = True, adjust: Adjust | None = None,
                      trace: bool = False, admission: Admission | None = None) -> dict:
    """The inference record; with trace=True also the replay under "schedule" (None when serving: a mean
    over desynchronized or simulated clients is not one request's timeline). `admission`: a serving
    case's sequences in flight, from its memory (`MemoryResult.admission`, memory/kv_pool.py)."""
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    if w.concurrency > w.batch:
        assert admission is not None, "a serving case's admission comes from its memory (memory/kv_pool.py)"
        serve = _replay_serving if w.serving == "simulated" else _replay_steady_state
        rec = serve(case, ops, overlap, adjust, admission)
        return {**rec, "schedule": None} if trace else rec
    cost = CommCost(case)
    if not w.output_tokens:      # an encoder: one forward pass over the batch, nothing decoded
        part = None if overlap_active(case) else pass_parts(case, ops, SECTIONS[0], cost, overlap)
        ttft = np.array(part.totals() if part else forward_pass(case, ops, SECTIONS[0], cost, overlap, adjust))
        rec = _record(ttft, 0.0 * ttft, ttft, w.rate_tokens / ttft[SPAN], cost.simulated, static_batch(w))
        if trace:
            rec["schedule"] = InferenceReplay(case, cost, part, None, None) if part else None
        return rec
    if overlap_active(case):            # no single-stream timeline of two interleaved micro-batches
        parts = None
        prefill, first, last = (np.array(forward_pass(case, ops, s, cost, overlap, adjust)) for s in SECTIONS)
    else:
        parts = [pass_parts(case, ops, s, cost, overlap) for s in SECTIONS]
        prefill, first, last = (np.array(p.totals()) for p in parts)
    ttft, itl = prefill, 0.5 * (first + last) / w.tokens_per_step
    e2e = ttft + (w.output_tokens - 1) * itl
    rec = _record(ttft, itl, e2e, w.rate_tokens / e2e[SPAN], cost.simulated, static_batch(w))
    if trace:
        rec["schedule"] = InferenceReplay(case, cost, *parts) if parts else None
    return rec


def static_batch(w: InferenceWorkload) -> Admission:
    """Static batching's sequences in flight: its batch, every request's cache held whole."""
    return Admission(w.batch, "batch", w.batch, 0.0, 0.0)


def _replay_steady_state(case: Case, ops: Ops, overlap: bool, adjust: Adjust | None, admission: Admission) -> dict:
    """Mean in-flight batching over desynchronized clients: decode at the N sequences in flight plus their
    share of prefills; the other C - N clients queue (`queue_wait`)."""
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    inflight = admission.sequences
    if w.serving == "disaggregated":          # the prefills run on the prefill instances
        cost = CommCost(case)
        prefill = np.array(forward_pass(case, ops, "prefill_", cost, overlap, adjust))
        (first, last), devents = serving_pass(case, ops, SECTIONS[1:], inflight, overlap, adjust)
        itl = 0.5 * (first + last) / w.tokens_per_step
        ttft = prefill + 0.5 * itl
        events = cost.simulated + devents
        slots, period, rate = w.output_tokens, itl, inflight / itl[SPAN]
    else:
        # a request's first token comes from the step that runs its prompt, the other O - 1 from decode steps
        # emitting tokens_per_step each: it holds a sequence slot for `steps` steps
        steps = 1 + (w.output_tokens - 1) / w.tokens_per_step
        share = inflight / (w.batch * steps)            # requests whose prompts a mean step carries
        prompts = share * w.batch
        own = max(share, 1.0) * w.batch                 # ... and the step that carries a new request's
        anchors = sorted({max(1, n) for m in (prompts, own) for n in (math.floor(m), math.ceil(m))})
        table, events = _iteration_cost(case, ops, overlap, adjust, anchors, sorted({1, inflight}))
        context = inflight * (w.prompt_tokens + 0.5 * (w.output_tokens - 1))     # mean decode context
        step = table.time(prompts * w.prompt_tokens, inflight, context)
        itl = step / w.tokens_per_step if w.output_tokens > 1 else 0.0 * step
        ttft = 0.5 * step + table.time(own * w.prompt_tokens, inflight, context)
        slots, period, rate = steps, step, inflight * (w.output_tokens / steps) / step[SPAN]
    if inflight < w.concurrency:
        ttft = ttft + queue_wait(w.concurrency, inflight, slots, period)
    e2e = ttft + (w.output_tokens - 1) * itl
    return _record(ttft, itl, e2e, rate, events, admission)


def queue_wait(clients: int, inflight: int, slots: float, period: np.ndarray) -> np.ndarray:
    """Mean wait in the engine's queue of C closed-loop clients of which N are in flight (Little's law on the
    queue): C - N requests wait at all times and leave it at the engine's request rate, N sequences each
    holding its slot for `slots` periods (O ITLs without speculative drafts; 1 + (O - 1) / tokens_per_step
    steps with them), so W = (C - N) x slots x period / N."""
    return (clients - inflight) * slots * period / inflight


def _replay_serving(case: Case, ops: Ops, overlap: bool, adjust: Adjust | None, admission: Admission) -> dict:
    """The closed-loop simulator at the admitted sequences. Each of its iterations emits a token for each
    of them, so a long queue behind few sequences runs C x O / N iterations per window: bounded by
    MAX_SERVING_ITERATIONS (never met where every client is admitted: output_tokens <= 2^20)."""
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    steps = w.concurrency * w.output_tokens // admission.sequences
    if steps > MAX_SERVING_ITERATIONS:
        raise SpecError(f"workload.serving: simulated serving of {w.concurrency} clients with "
                        f"{admission.sequences} sequences in flight ({admission.limit}) runs concurrency x "
                        f"output_tokens / sequences = {steps} iterations per window; allowed: at most "
                        f"{MAX_SERVING_ITERATIONS} (fewer clients, or serving: steady_state)")
    anchors = anchor_batches(admission.sequences)
    table, events = _iteration_cost(case, ops, overlap, adjust, anchors, anchors)
    r = simulate(table, w.concurrency, w.prompt_tokens, w.output_tokens, w.max_num_tokens, admission.sequences)
    return _record(r.ttft_s, r.itl_s, r.e2e_latency_s, r.tokens_per_s, events, admission)


def _iteration_cost(case: Case, ops: Ops, overlap: bool, adjust: Adjust | None, prefill_batches: list[int],
                    decode_batches: list[int]) -> tuple[IterationCost, int]:
    """Serving iteration cost from serving steps (`serving_pass`: with pp > 1 a round of pp micro-batches):
    the prefill of n whole prompts for n in `prefill_batches`, decode steps of n sequences for n in
    `decode_batches`, and G, a step of r one-token rows at an empty cache, whose anchors are the decode batches,
    every prefill anchor's tokens and the most rows a step carries (the largest decode batch and prefill anchor
    together): a fused step's GEMMs run the prompts' rows beside the decodes' (`serving.IterationCost`), so the
    prompt tokens are priced as GEMM rows as the decodes are, MoE experts included (`workload.expert_load`:
    the experts r routed rows activate). The decode table is priced at G's anchors too, so decode - G is the
    decode's KV reads at every batch. Also the link events simulated.
    With pp > 1 the prompts ride in the decode round's micro-batches: their anchors and G are the busiest
    stage's work alone, no trip (`pipelined`); G of fewer rows than pp is G at pp (the weights are read once
    per micro-batch of the round, as the decode round's are), so a step with prompts is never cheaper than one
    with fewer decodes. n prompts ride in min(n, pp) micro-batches, and their own part is their anchor less G
    of their rows in those micro-batches (not in pp of them): an MoE micro-batch reads the experts its own
    rows activate, so G over pp micro-batches would take off pp expert reads where the prompts paid for as
    many as they ride in (review 17: a DeepSeek-V2-Lite pp 2 step with prompts came out cheaper than its
    decodes)."""
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    pp, ctx0, ctx1 = case.parallelism.pp, w.prompt_tokens, w.prompt_tokens + w.output_tokens - 1
    floor_at = min(pp, max(decode_batches))     # pp one-token micro-batches, or batch 1
    carriers = {n: len(split_batch(n, pp)) for n in prefill_batches}     # micro-batches n prompts ride in
    top = max(decode_batches) + max(prefill_batches) * w.prompt_tokens
    rows = sorted({1, floor_at, *decode_batches,
                   *(n * w.prompt_tokens for n in prefill_batches), top})
    prefill, decode, gemm, events = {}, [], [], 0
    for n in sorted(set(prefill_batches) | set(rows)):
        # pp 1: one priced batch for both sections; pp > 1: the prompts' anchor without the trip
        riding = pp > 1 and n in prefill_batches
        if riding:
            (prefill[n],), simulated = serving_pass(case, ops, SECTIONS[:1], n, overlap, adjust, trip=False)
            events += simulated
        prefixes = (SECTIONS[:1] if n in prefill_batches and not riding else ()) + \
            (SECTIONS[1:] if n in rows else ())
        if not prefixes:
            continue
        times, simulated = serving_pass(case, ops, prefixes, n, overlap, adjust)
        events += simulated
        if n in prefill_batches and not riding:
            prefill[n] = times[0]
        if n in rows:
            first, last = times[-2], times[-1]
            decode.append((n, first, last))
            if pp > 1:      # the busiest stage's work of n rows, what they add to a round they ride in
                (first, last), simulated = serving_pass(case, ops, SECTIONS[1:], n, overlap, adjust, trip=False)
                events += simulated
            gemm.append((n, one_token(first, last, ctx0, ctx1)))
    if pp > 1:
        # a round carries pp micro-batches (fewer only when there are fewer sequences), and fewer rows than
        # micro-batches still read every stage's weights once per micro-batch: G at floor_at. The prompts' own
        # part is their anchor less G of their rows in the carriers[n] micro-batches they ride in; the anchor is
        # rebased so that build_cost, which takes G at their tokens off, leaves exactly that
        at = dict(gemm)
        gemm = [(n, at[max(n, floor_at)]) for n, _ in gemm]
        for n, t in list(prefill.items()):
            rows_n = n * w.prompt_tokens
            (first, last), simulated = serving_pass(case, ops, SECTIONS[1:], rows_n, overlap, adjust, trip=False,
                                                    parts=carriers[n])
            events += simulated
            prefill[n] = at[max(rows_n, floor_at)] + t - one_token(first, last, ctx0, ctx1)
    return build_cost([(n * w.prompt_tokens, prefill[n]) for n in sorted(prefill)], decode, gemm, ctx0, ctx1), events


def anchor_batches(concurrency: int) -> list[int]:
    """1, 2, 4, ... below C, then C: dense where small batches change the cost most, C for the full batch."""
    out = [1]
    while out[-1] * 2 < concurrency:
        out.append(out[-1] * 2)
    return out + [concurrency] if concurrency > 1 else out


@dataclass
class InferenceRecord:
    """An inference case's record (its fields are the keys, in order): a request's end-to-end span as the
    step, split into compute and exposed communication, the training utilizations at 0, throughput, the
    latencies and the link events simulated."""
    step_time_s: float
    compute_time_s: float
    exposed_comm_s: float
    bubble_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    ttft_s: float
    itl_s: float
    e2e_latency_s: float
    network_events_simulated: float
    sequences_in_flight: float      # static batching: the batch; serving: the sequences admitted
    in_flight_limit: str            # what bounds them: memory/kv_pool.LIMITS


def _record(ttft: np.ndarray, itl: np.ndarray, e2e: np.ndarray, rate: float, events: int,
            admission: Admission) -> dict:
    """Output keys from (span, compute) pairs of TTFT, ITL and e2e latency, and the sequences in flight."""
    return vars(InferenceRecord(step_time_s=float(e2e[SPAN]), compute_time_s=float(e2e[COMPUTE]),
                                exposed_comm_s=float(e2e[SPAN] - e2e[COMPUTE]), bubble_s=0.0, mfu=0.0, hfu=0.0,
                                tokens_per_s=float(rate), ttft_s=float(ttft[SPAN]), itl_s=float(itl[SPAN]),
                                e2e_latency_s=float(e2e[SPAN]), network_events_simulated=float(events),
                                sequences_in_flight=float(admission.sequences), in_flight_limit=admission.limit))
