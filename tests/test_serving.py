"""Serving simulator (engine/serving.py): plain-Python reference, closed forms, Little's law, determinism."""
import numpy as np
import pytest
from rapidllm.engine.inference import anchor_batches
from rapidllm.engine.serving import COMPUTE, SPAN, IterationCost, _simulate, build_cost, simulate


def _linear_cost(clients: int, prompt: int, output: int, floor: float = 0.02, per_token: float = 1e-4,
                 per_seq: float = 1e-4, per_ctx: float = 1e-7) -> IterationCost:
    """Anchors of a linear machine: floor + per_token x prefill tokens; floor + per_seq x b + per_ctx x S
    (G(r) = floor + per_seq x r: one weight read and a cost per row). The compute column is 80 % of the span."""
    pf_batches = anchor_batches(clients)
    prefill = [(n * prompt, np.array([floor + per_token * n * prompt] * 2) * [1.0, 0.8]) for n in pf_batches]
    rows = sorted({*pf_batches, *(n * prompt for n in pf_batches), clients * (prompt + 1)})
    decode = [(n, np.array([floor + per_seq * n + per_ctx * n * ctx for ctx in (prompt, prompt + output - 1)]))
              for n in rows]
    decode = [(n, np.array([t[0]] * 2) * [1.0, 0.8], np.array([t[1]] * 2) * [1.0, 0.8]) for n, t in decode]
    gemm = [(n, np.array([floor + per_seq * n] * 2) * [1.0, 0.8]) for n in rows]
    return build_cost(prefill, decode, gemm, prompt, prompt + output - 1)


def _reference(clients: int, prompt: int, output: int, budget: int, n_done: int, cost: IterationCost,
               limit: int | None = None):
    """Plain-Python closed loop: FCFS chunked prefill after the decode tokens, first token at the end of
    the iteration that finishes the prefill, a new request as soon as one completes; at most `limit`
    requests in the engine (decoding, or at the head of the queue), the rest waiting."""
    limit = clients if limit is None else limit
    left, gen = [prompt] * clients, [0] * clients
    start, first = [np.zeros(2) for _ in range(clients)], [np.zeros(2) for _ in range(clients)]
    queue, clock, tokens, rec, produced = list(range(clients)), np.zeros(2), 0, [], []
    while len(rec) < n_done:
        decoding = [left[i] == 0 for i in range(clients)]
        b = sum(decoding)
        s = float(sum(prompt + gen[i] - 1 for i in range(clients) if decoding[i]))
        room, chunks = max(budget - b, 0), {}
        for i in queue[:limit - b]:
            chunks[i] = min(left[i], room)
            room -= chunks[i]
        clock = clock + cost.time(sum(chunks.values()), b, s)
        for i, c in chunks.items():
            left[i] -= c
        while queue and left[queue[0]] == 0:
            i = queue.pop(0)
            first[i], gen[i], tokens = clock.copy(), 1, tokens + 1
        for i in range(clients):
            if decoding[i]:
                gen[i], tokens = gen[i] + 1, tokens + 1
        for i in range(clients):
            if left[i] == 0 and gen[i] >= output and len(rec) < n_done:
                rec.append(np.stack([start[i], first[i], clock]))
                produced.append(tokens)
                start[i], left[i], gen[i] = clock.copy(), prompt, 0
                queue.append(i)
    return np.array(rec), np.array(produced, dtype=float)


def _run(cost: IterationCost, clients: int, prompt: int, output: int, budget: int, n_done: int,
         limit: int | None = None):
    return _simulate(clients, prompt, output, budget, clients if limit is None else limit, n_done, *cost.arrays())


@pytest.mark.parametrize("clients,prompt,output,budget,limit", [
    (1, 50, 7, 64, 1), (3, 40, 5, 64, 3), (5, 100, 9, 128, 5), (4, 300, 6, 256, 4), (6, 30, 1, 64, 6),
    (6, 40, 5, 64, 2), (7, 100, 9, 128, 3), (5, 300, 6, 256, 1)])      # the last three queue clients
def test_kernel_matches_reference(clients, prompt, output, budget, limit) -> None:
    cost = _linear_cost(clients, prompt, output)
    rec, produced = _run(cost, clients, prompt, output, budget, 6 * clients, limit)
    ref_rec, ref_produced = _reference(clients, prompt, output, budget, 6 * clients, cost, limit)
    np.testing.assert_allclose(rec, ref_rec, rtol=1e-12)
    np.testing.assert_array_equal(produced, ref_produced)


def test_iteration_cost_composition() -> None:
    """On a linear machine (G = one weight read + a cost per row) a fused step is the two passes less the
    read they share, G(0) = the constant: prefill(k) + decode(b, S) - 0.02."""
    cost = _linear_cost(8, 200, 100)
    pf, dec = cost.time(600, 0, 0.0), cost.time(0, 4, 4 * 250.0)
    assert pf[SPAN] == pytest.approx(0.02 + 1e-4 * 600)
    assert dec[SPAN] == pytest.approx(0.02 + 4e-4 + 1e-7 * 1000)
    np.testing.assert_allclose(cost.time(600, 4, 1000.0), pf + dec - np.array([0.02, 0.016]), rtol=1e-12)
    assert cost.time(600, 4, 1000.0)[COMPUTE] == pytest.approx(0.8 * cost.time(600, 4, 1000.0)[SPAN])


def test_single_client_gives_prefill_and_decode_step() -> None:
    prompt, output = 300, 50
    cost = _linear_cost(1, prompt, output)
    r = simulate(cost, 1, prompt, output, 8192)
    assert r.ttft_s[SPAN] == pytest.approx(cost.time(prompt, 0, 0.0)[SPAN])
    mean_context = prompt + (output - 2) / 2                         # decode step g sees P + g - 1 tokens
    assert r.itl_s[SPAN] == pytest.approx(cost.time(0, 1, mean_context)[SPAN])
    assert r.tokens_per_s * r.e2e_latency_s[SPAN] == pytest.approx(output)


def test_lockstep_burst_ttft_is_burst_prefill() -> None:
    clients, prompt, output = 6, 200, 20
    cost = _linear_cost(clients, prompt, output, floor=0.0, per_seq=0.0, per_ctx=0.0)
    r = simulate(cost, clients, prompt, output, clients * prompt)
    assert r.ttft_s[SPAN] == pytest.approx(1e-4 * clients * prompt)
    assert r.itl_s[SPAN] == 0.0 and r.windows == 3


def test_chunked_prefill_splits_at_the_token_budget() -> None:
    """One client, prompt 2.5 budgets: three iterations, each paying the weight read once."""
    prompt, budget = 500, 200
    cost = _linear_cost(1, prompt, 2)
    r = simulate(cost, 1, prompt, 2, budget)
    floor, whole = 0.02, cost.time(prompt, 0, 0.0)[SPAN]
    assert r.ttft_s[SPAN] == pytest.approx(3 * floor + (whole - floor))


@pytest.mark.parametrize("clients,prompt,output,budget", [(4, 200, 50, 8192), (8, 1000, 30, 2048),
                                                          (16, 500, 40, 1024)])
def test_littles_law(clients, prompt, output, budget) -> None:
    r = simulate(_linear_cost(clients, prompt, output), clients, prompt, output, budget)
    assert r.tokens_per_s * r.e2e_latency_s[SPAN] == pytest.approx(clients * output, rel=0.03)
    assert r.e2e_latency_s[SPAN] == pytest.approx(r.ttft_s[SPAN] + (output - 1) * r.itl_s[SPAN])


def test_throughput_grows_with_concurrency_on_a_linear_machine() -> None:
    prompt, output, budget = 400, 30, 1024
    rates = [simulate(_linear_cost(c, prompt, output), c, prompt, output, budget).tokens_per_s
             for c in (1, 2, 3, 4, 6, 8, 12)]
    assert all(b >= a for a, b in zip(rates, rates[1:]))


def test_deterministic() -> None:
    cost = _linear_cost(7, 900, 25)
    a, b = _run(cost, 7, 900, 25, 1000, 70), _run(cost, 7, 900, 25, 1000, 70)
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()


def test_anchor_batches() -> None:
    assert anchor_batches(1) == [1]
    assert anchor_batches(5) == [1, 2, 4, 5]
    assert anchor_batches(25) == [1, 2, 4, 8, 16, 25]
    assert anchor_batches(16) == [1, 2, 4, 8, 16]
