"""Closed-loop in-flight-batching simulator: C clients against one serving engine (TensorRT-LLM / vLLM).

Clients (genai-perf concurrency mode): C clients start at t = 0; each sends a request of P prompt and O output
tokens and sends the next one as soon as the last token of the previous one arrives (no think time).

Engine (TensorRT-LLM's in-flight batching scheduler, GUARANTEED_NO_EVICT, FCFS chunked context): every
iteration runs one decode token for each request past its prefill, then prefill tokens of the waiting
requests in arrival order until `max_num_tokens` tokens are scheduled; a request's prompt may be split across
iterations (chunked prefill). The first output token is produced by the iteration that finishes the prefill;
each later iteration adds one token. At most N requests are in the engine (decoding, or admitted to
prefill: the head of the FCFS queue), N from the memory model's admission (memory/kv_pool.py: the requests
whose KV blocks for prompt + output fit the pool, capped by max_batch_size); the others wait in the queue,
and their TTFT counts the wait. N = C when every client's cache fits.

Iteration time comes from `IterationCost`, a piecewise-linear table over anchor forward passes priced by the
engine (see `engine/inference.py`). Everything runs on two clocks at once: the iteration span (the schedule)
and its pure compute time (for the compute / exposed-communication split).

Measurement (perf_analyzer, the load generator under genai-perf, documents it): consecutive windows, here of C
completed requests, until the last three agree within 10 % on throughput and mean request latency (at most 10
windows); the result averages those three: mean TTFT, ITL ((e2e - TTFT) / (O - 1) per request), e2e latency,
and output tokens per second over the windows.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from rapidllm.jit import njit

SPAN, COMPUTE = 0, 1


@dataclasses.dataclass(frozen=True)
class IterationCost:
    """Time of one iteration from prefill tokens k, decode batch b and total decode context S.

    Decode-only iterations are interpolated between priced anchors over b (anchors at batch n) and linearly in
    the mean context S / b (decode attention reads the KV cache once per token, at the cache's element size:
    an FP8 cache halves the slope, `Case.kv_precision`).

    An iteration with prompt tokens runs them through the same GEMMs as its decodes (TensorRT-LLM's in-flight
    batching packs context and generation tokens into one forward pass, vLLM's chunked prefill likewise): each
    weight is read once for all b + k rows, and the rows' compute adds. Per operator the fused cost is
    max(W, F_d + F_p) where the two passes apart cost max(W, F_d) + max(W, F_p) (W the weight read, F the
    rows' compute), so what fusing saves is the weight read where every GEMM is weight-bound and nothing where
    they are compute-bound. The table prices that with G(r), a step of r one-token rows at an empty cache
    (`rows`, `row_time`: the GEMMs, their launches and collectives, the expert weights those rows activate):

        t(k, b, S) = decode(b, S) + G(b + k) - G(b) + own(k),

    own(k) the prompts' own part (their attention, their rows' LM head) = prefill anchor - G at its tokens,
    interpolated linearly in k from 0 at no prompt. A prefill-only iteration is G(k) + own(k) (the prefill
    anchors themselves at their tokens); a fraction of a prompt reads the weights, and the experts, that its
    rows do. Where G is one weight read plus a cost per row the step is prefill(k) + decode(b, S) - G(0), the
    two passes less the read they share; where G is all row compute it is the two passes summed.
    With pp micro-batches in flight G is the busiest stage's work (the prompts ride in the round's
    micro-batches, engine/inference.py `_iteration_cost`) and decode the round.
    Columns of the time arrays are (span, compute)."""
    pf_tokens: np.ndarray   # (n,) float64, increasing, 0 first
    pf_own: np.ndarray      # (n, 2) prefill anchor less G at its tokens; row 0 (no prompt) is 0
    dec_batch: np.ndarray   # (m,) float64, increasing, 1 first
    dec_time: np.ndarray    # (m, 2) decode-only iteration with ctx0 tokens of context per sequence
    dec_slope: np.ndarray   # (m, 2) d time / d context per sequence
    ctx0: float
    rows: np.ndarray        # (r,) float64, increasing, 1 first: token rows of G's anchors
    row_time: np.ndarray    # (r, 2) G: a step of that many one-token rows at an empty cache

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, np.ndarray,
                              np.ndarray]:
        """The table as the kernels take it, in their argument order."""
        return (self.pf_tokens, self.pf_own, self.dec_batch, self.dec_time, self.dec_slope, self.ctx0, self.rows,
                self.row_time)

    def time(self, k: float, b: float, s: float) -> np.ndarray:
        """(span, compute) of one iteration (plain-Python entry to the kernel's cost, for tests and docs)."""
        return np.array([_iteration_time(k, b, s, *self.arrays(), j) for j in (SPAN, COMPUTE)])


def one_token(first: np.ndarray, last: np.ndarray, ctx0: int, ctx1: int) -> np.ndarray:
    """A decode step at an empty cache: first / last at ctx0 / ctx1 tokens of context, extrapolated to none."""
    return first - (last - first) / max(ctx1 - ctx0, 1) * ctx0


def build_cost(prefill: list[tuple[int, np.ndarray]], decode: list[tuple[int, np.ndarray, np.ndarray]],
               rows: list[tuple[int, np.ndarray]], ctx0: int, ctx1: int) -> IterationCost:
    """Cost table from anchors: prefill (tokens, (span, compute)), decode (batch, first, last), where first /
    last are decode steps with ctx0 / ctx1 tokens of context per sequence, and G (rows, (span, compute)), whose
    anchors cover every prefill anchor's tokens (its own part is the anchor less G there)."""
    dec_batch = np.array([b for b, _, _ in decode], dtype=np.float64)
    first = np.array([f for _, f, _ in decode], dtype=np.float64)
    slope = np.array([(la - f) / max(ctx1 - ctx0, 1) for _, f, la in decode], dtype=np.float64)
    row_n = np.array([r for r, _ in rows], dtype=np.float64)
    row_time = np.array([g for _, g in rows], dtype=np.float64)
    pf_tokens = np.array([0.0] + [float(k) for k, _ in prefill])
    assert row_n[-1] >= pf_tokens[-1], "G's anchors must cover the prefill anchors' tokens"
    own = [t - [np.interp(k, row_n, row_time[:, j]) for j in (SPAN, COMPUTE)] for k, t in prefill]
    pf_own = np.vstack([np.zeros(2)] + own).astype(np.float64)
    return IterationCost(pf_tokens, pf_own, dec_batch, first, slope, float(ctx0), row_n, row_time)


@njit(cache=True)
def _iteration_time(k: float, b: float, s: float, pf_tokens: np.ndarray, pf_own: np.ndarray,
                    dec_batch: np.ndarray, dec_time: np.ndarray, dec_slope: np.ndarray, ctx0: float,
                    rows: np.ndarray, row_time: np.ndarray, col: int) -> float:
    t = 0.0
    if b > 0:
        t += np.interp(b, dec_batch, dec_time[:, col]) + np.interp(b, dec_batch, dec_slope[:, col]) * (s / b - ctx0)
    if k > 0:
        t += np.interp(b + k, rows, row_time[:, col]) + np.interp(k, pf_tokens, pf_own[:, col])
        if b > 0:
            t -= np.interp(b, rows, row_time[:, col])
    return t


@njit(cache=True, work=lambda clients, prompt, output, budget, limit, n_done, *rest: n_done * (prompt + output))
def _simulate(clients: int, prompt: int, output: int, budget: int, limit: int, n_done: int,
              pf_tokens: np.ndarray, pf_own: np.ndarray, dec_batch: np.ndarray, dec_time: np.ndarray,
              dec_slope: np.ndarray, ctx0: float, rows: np.ndarray,
              row_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run until n_done requests complete, at most `limit` of them in the engine (decoding or admitted to
    prefill: the head of the FCFS queue; the others wait). Returns per completed request (completion order)
    the (start, first token, end) times on both clocks, (n_done, 3, 2), and the output tokens produced up to
    its completion, (n_done,). An iteration touches only the requests in the engine (`dec`, the decoding
    ones, unordered, and the queue's admitted head), so a long queue costs nothing per iteration; the
    requests finishing in one iteration complete in client order, as a scan over all clients would."""
    rec = np.zeros((n_done, 3, 2))
    produced = np.zeros(n_done)
    left = np.full(clients, prompt, dtype=np.int64)   # prompt tokens still to prefill
    gen = np.zeros(clients, dtype=np.int64)            # output tokens produced
    start = np.zeros((clients, 2))
    first = np.zeros((clients, 2))
    chunk = np.zeros(clients, dtype=np.int64)
    dec = np.zeros(clients, dtype=np.int64)             # the decoding requests, dec[:nd]
    fin = np.zeros(clients, dtype=np.int64)             # those finishing this iteration, fin[:nf]
    queue = np.arange(clients)                          # FCFS ring of requests waiting for prefill
    head, waiting, nd = 0, clients, 0
    clock = np.zeros(2)
    tokens, done = 0, 0
    while done < n_done:
        b, s = nd, 0.0                                   # decoding at the iteration's start
        for q in range(b):
            s += prompt + gen[dec[q]] - 1               # integers: exact in any order
        room, k = max(budget - b, 0), 0
        admitted = min(waiting, limit - b)             # every client is decoding or waiting: b + waiting = C
        for q in range(admitted):
            i = queue[(head + q) % clients]
            chunk[i] = min(left[i], room)
            room -= chunk[i]
            k += chunk[i]
        for j in range(2):
            clock[j] += _iteration_time(k, b, s, pf_tokens, pf_own, dec_batch, dec_time, dec_slope, ctx0, rows,
                                        row_time, j)
        for q in range(admitted):
            i = queue[(head + q) % clients]
            left[i] -= chunk[i]
            chunk[i] = 0
        while waiting > 0 and left[queue[head]] == 0:
            i = queue[head]
            head, waiting = (head + 1) % clients, waiting - 1
            first[i, :] = clock
            gen[i] = 1
            tokens += 1
            dec[nd] = i
            nd += 1
        for q in range(b):
            gen[dec[q]] += 1
            tokens += 1
        nf, kept = 0, 0
        for q in range(nd):
            i = dec[q]
            if gen[i] >= output:
                fin[nf] = i
                nf += 1
            else:
                dec[kept] = i
                kept += 1
        nd = kept
        for i in np.sort(fin[:nf]):
            if done < n_done:
                rec[done, 0, :] = start[i, :]
                rec[done, 1, :] = first[i, :]
                rec[done, 2, :] = clock
                produced[done] = tokens
                done += 1
                start[i, :] = clock
                left[i], gen[i] = prompt, 0
                queue[(head + waiting) % clients] = i
                waiting += 1
    return rec, produced


@dataclasses.dataclass(frozen=True)
class ServingResult:
    """Means over the measurement window; (span, compute) pairs where a compute split is meaningful."""
    ttft_s: np.ndarray
    itl_s: np.ndarray
    e2e_latency_s: np.ndarray
    tokens_per_s: float
    windows: int            # windows run until the last three were stable


def simulate(cost: IterationCost, clients: int, prompt: int, output: int, max_num_tokens: int,
             inflight: int | None = None, stability: float = 0.10, max_trials: int = 10) -> ServingResult:
    """Closed-loop serving run measured like perf_analyzer (genai-perf's load generator): consecutive windows
    of C completed requests, until the last three agree within `stability` (max / min - 1) on both throughput
    and mean request latency, or `max_trials` windows; the result averages those three windows. At most
    `inflight` requests (default: all C) are in the engine at once (the admission of memory/kv_pool.py); a
    request's TTFT includes its wait in the queue."""
    limit = clients if inflight is None else min(inflight, clients)
    most = min(limit * prompt, max_num_tokens)          # prompt tokens one iteration can carry
    assert cost.pf_tokens[-1] >= most and cost.dec_batch[-1] >= limit and cost.rows[-1] >= limit + most
    rec, produced = _simulate(clients, prompt, output, max_num_tokens, limit, max_trials * clients, *cost.arrays())
    ends = np.concatenate(([0.0], rec[clients - 1::clients, 2, SPAN]))
    made = np.concatenate(([0.0], produced[clients - 1::clients]))
    rate = np.diff(made) / np.diff(ends)
    latency = (rec[:, 2, SPAN] - rec[:, 0, SPAN]).reshape(max_trials, clients).mean(axis=1)
    last = next((j for j in range(3, max_trials + 1) if _stable(rate[j - 3:j], stability)
                 and _stable(latency[j - 3:j], stability)), max_trials)
    win = rec[(last - 3) * clients:last * clients]
    ttft = (win[:, 1] - win[:, 0]).mean(axis=0)
    e2e = (win[:, 2] - win[:, 0]).mean(axis=0)
    itl = (win[:, 2] - win[:, 1]).mean(axis=0) / max(output - 1, 1)
    tokens = (made[last] - made[last - 3]) / (ends[last] - ends[last - 3])
    return ServingResult(ttft, itl, e2e, float(tokens), last)


def _stable(values: np.ndarray, tolerance: float) -> bool:
    return bool(values.max() <= (1.0 + tolerance) * values.min())
