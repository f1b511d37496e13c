"""Serving admission (memory/kv_pool.py, docs/serving-capacity.md): a serving engine keeps in flight the
requests whose KV reservation fits its pool, at most max_batch_size, and queues the other clients. Closed
forms (the pool and the reservation by hand, Little's law on the queue), identity where everything fits,
invariants over memory and output length, the simulator's queue, and search over such layouts."""
from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from rapidllm import predict, search
from rapidllm.engine.inference import queue_wait
from rapidllm.memory.kv_pool import KV_BLOCK_TOKENS, admit, reserved_tokens
from rapidllm.memory.model import memory_for_case
from rapidllm.spec.case import resolve_case
from rapidllm.spec.layout import InferenceWorkload

# Llama-3.1-70B FP8 on 4 x H100, 3000 closed-loop clients (issue 22 item 5's case; examples/)
SERVE = {"model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "fp8",
         "attention_impl": "flash3", "parallelism": {"tp": 4},
         "workload": {"mode": "inference", "batch": 1, "concurrency": 3000, "prompt_tokens": 128,
                      "output_tokens": 2048}}
# Llama-2-7B on one H100, small enough for the simulator
SMALL = {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
         "attention_impl": "flash", "parallelism": {"tp": 1},
         "workload": {"mode": "inference", "batch": 1, "concurrency": 8, "prompt_tokens": 1000,
                      "output_tokens": 1000}}


def _case(base: dict, **workload):
    m = copy.deepcopy(base)
    m["workload"].update(workload)
    return m


def test_admission_by_hand() -> None:
    """Llama-2-7B (32 layers, 32 KV heads of 128, BF16) on one H100 with 1000 + 1000 tokens: a request
    reserves ceil(2000 / 32) = 63 blocks of 32 tokens, 2016 tokens x 2 (K, V) x 32 heads x 128 x 2 B x 32
    layers = 1008 MiB; the pool is 0.9 of what weights, activations and the framework leave, and holds
    floor(pool / 1008 MiB) requests."""
    assert reserved_tokens(1000, 1000) == 2016 == 63 * KV_BLOCK_TOKENS
    mem = memory_for_case(resolve_case(_case(SMALL, concurrency=200), "test"))
    a = mem.admission
    assert a.request_bytes == 2016 * 2 * 32 * 128 * 2 * 32 == 1008 * 2**20
    pool = 0.9 * (mem.capacity - mem.weights - mem.activations - mem.framework)
    assert a.pool_bytes == pytest.approx(pool, rel=1e-12)
    assert a.kv_sequences == math.floor(pool / (1008 * 2**20)) == a.sequences < 200 and a.limit == "kv_cache"
    # the memory holds the admitted sequences' cache at its last token (unrounded), within the HBM
    assert mem.kv_cache == 2 * 32 * 128 * 2 * 32 * a.sequences * 2000 and mem.feasible


def test_admit_limits() -> None:
    """The smallest of concurrency, max_batch_size and the pool's count binds, over every stage; a stage
    with nothing left holds nothing."""
    w = InferenceWorkload(prompt_tokens=100, output_tokens=100, concurrency=50, max_batch_size=20)
    a = admit(w, [(10.0, 1.0), (40.0, 2.0)])                  # 0.9 x 10 / 1 = 9, 0.9 x 40 / 2 = 18
    assert (a.sequences, a.limit, a.kv_sequences, a.pool_bytes, a.request_bytes) == (9, "kv_cache", 9, 9.0, 1.0)
    roomy = admit(w, [(100.0, 1.0)])
    assert (roomy.sequences, roomy.limit, roomy.kv_sequences) == (20, "max_batch_size", 90)
    few = admit(InferenceWorkload(prompt_tokens=100, output_tokens=100, concurrency=5), [(100.0, 1.0)])
    assert (few.sequences, few.limit) == (5, "concurrency")
    assert admit(w, [(-3.0, 1.0)]).kv_sequences == 0


def test_everything_fits_is_unchanged() -> None:
    """When every client's reservation fits, the limits change nothing: the same record with a pool that
    barely holds them, with max_batch_size = concurrency, and with the whole free memory as pool."""
    base = _case(SMALL, concurrency=16, serving="steady_state")
    ref = predict(base)
    assert ref.in_flight_limit == "concurrency" and ref.sequences_in_flight == 16
    for extra in ({"max_batch_size": 16}, {"kv_cache_fraction": 1.0}):
        other = predict(_case(base, **extra))
        assert other.to_dict() | {"case_id": ""} == ref.to_dict() | {"case_id": ""}


@pytest.mark.parametrize("serving", ["steady_state", "disaggregated"])
def test_steady_state_queue_is_littles_law(serving) -> None:
    """3000 clients where the pool holds N: the engine runs exactly as N clients would (ITL, throughput),
    and TTFT adds the queue's wait W = (C - N) x O x ITL / N (Little's law: C - N requests wait, N / (O x
    ITL) leave the queue per second)."""
    full = predict(_case(SERVE, serving=serving))
    n = int(full.sequences_in_flight)
    assert full.in_flight_limit == "kv_cache" and 1 < n < 3000
    alone = predict(_case(SERVE, concurrency=n, serving=serving))
    assert alone.in_flight_limit == "concurrency"
    assert full.itl_s == alone.itl_s and full.tokens_per_s == alone.tokens_per_s
    wait = (3000 - n) * 2048 * full.itl_s / n
    assert full.ttft_s == pytest.approx(alone.ttft_s + wait, rel=1e-12)
    assert full.ttft_s >= alone.ttft_s
    assert full.e2e_latency_s == pytest.approx(full.ttft_s + 2047 * full.itl_s, rel=1e-12)
    assert queue_wait(10, 10, 5, 1.0) == 0.0 and queue_wait(30, 10, 5, 1.0) == 10.0


def test_more_memory_never_lowers_throughput() -> None:
    """The 70B case on devices of 80 to 192 GiB (the H100 with only its capacity changed): the admitted
    batch and the output rate never fall, TTFT (mostly the queue) never rises."""
    hw = yaml.safe_load((ROOT / "config" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
    rows = []
    for gib in (80, 96, 128, 192):
        rows.append(predict({**_case(SERVE), "hardware": {**hw, "name": f"h100-{gib}", "hbm_capacity": f"{gib} GiB"}}))
    seqs = [r.sequences_in_flight for r in rows]
    assert seqs == sorted(seqs) and seqs[0] < seqs[-1]
    rates = [r.tokens_per_s for r in rows]
    assert rates == sorted(rates)
    ttfts = [r.ttft_s for r in rows]
    assert ttfts == sorted(ttfts, reverse=True)


def test_longer_outputs_admit_no_more() -> None:
    """At fixed memory a longer output reserves more blocks per request: the admitted batch never grows."""
    seqs = [memory_for_case(resolve_case(_case(SERVE, output_tokens=o), "t")).admission.kv_sequences
            for o in (128, 512, 2048, 4096, 8192)]
    assert seqs == sorted(seqs, reverse=True) and seqs[0] > seqs[-1]


def test_simulated_queue() -> None:
    """The simulator with 8 clients and max_batch_size 4 runs 4 at a time: the same output rate as 4
    clients (within the windows' noise), TTFT at least theirs and about the queue's wait longer."""
    limited = predict(_case(SMALL, serving="simulated", output_tokens=64, max_batch_size=4))
    alone = predict(_case(SMALL, serving="simulated", output_tokens=64, concurrency=4))
    assert (limited.sequences_in_flight, limited.in_flight_limit) == (4, "max_batch_size")
    assert limited.tokens_per_s == pytest.approx(alone.tokens_per_s, rel=0.05)
    assert limited.ttft_s >= alone.ttft_s
    assert limited.e2e_latency_s == pytest.approx(2 * alone.e2e_latency_s, rel=0.1)   # C / rate: twice the cycle


def test_one_request_must_fit() -> None:
    """A pool that cannot hold one request's blocks is infeasible, with the pool and the request in the
    reason; a prefill batch of B needs B of them."""
    p = predict(_case(SMALL, kv_cache_fraction=0.01))
    assert p.status == "infeasible" and p.tokens_per_s is None and p.sequences_in_flight is None
    assert "holds 0 requests of 0.984 GiB" in p.reason and "a prefill batch needs 1" in p.reason


def test_search_ranks_few_sequences_low() -> None:
    """A serving search of the 70B model at 3000 clients: tp 2 fits only a few sequences beside 35 GiB of
    weights per GPU; it is now feasible (it was out of memory) and ranks below the wider layouts by
    throughput per GPU; pruning returns what exhaustive search returns."""
    spec = {"name": "serve", "model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "precision": "fp8", "workload": SERVE["workload"], "gpus": [2, 4], "top": 3,
            "objective": "throughput_per_gpu", "space": {"attention_impl": ["flash3"], "pp": [1]}}
    df = search(spec)
    assert set(df.tp) == {2, 4} and (df.in_flight_limit == "kv_cache").all()
    assert df[df.tp == 2].sequences_in_flight.max() < df[df.tp == 4].sequences_in_flight.min()
    per_gpu = df.tokens_per_s / df.gpus
    assert per_gpu[df.tp == 2].max() < per_gpu[df.tp == 4].min()
    assert list(df.sort_values("rank").tp)[0] == 4
    pd.testing.assert_frame_equal(df, search(spec, prune=False))


def test_example_is_the_issue_case() -> None:
    """examples/llama70b-fp8-serving-3000.yaml is the case above; its pool holds 331 requests
    (docs/serving-capacity.md): 0.9 x (HBM - 16.9 GiB of weights - activations - 1.5 GiB) / 170 MiB."""
    example = yaml.safe_load((ROOT / "examples" / "llama70b-fp8-serving-3000.yaml").read_text())
    assert example == SERVE
    a = memory_for_case(resolve_case(example, "example")).admission
    assert (a.sequences, a.limit) == (331, "kv_cache") and a.request_bytes == 2176 * 80 * 2**10


def test_predict_says_why(capsys) -> None:
    """`rapidllm predict` prints how many sequences run and why; --json carries both keys."""
    from rapidllm.cli import main
    example = str(ROOT / "examples" / "llama70b-fp8-serving-3000.yaml")
    assert main(["predict", example]) == 0
    assert ("331    (the KV-cache pool holds 331 requests of 128 + 2048 tokens; 2669 of the 3000 clients queue)"
            in capsys.readouterr().out)
    assert main(["predict", example, "--json"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert (out["sequences_in_flight"], out["in_flight_limit"]) == (331, "kv_cache")


def test_search_counts_a_queue_too_long_to_simulate_as_invalid() -> None:
    """A simulated serving search where one GPU's pool holds a single 256-token request (16384 clients
    behind it: 2^21 iterations per window, over MAX_SERVING_ITERATIONS) counts that layout invalid under
    workload.serving and ranks the 8-GPU layouts, whose pools hold 14 requests."""
    spec = {"name": "queue", "model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "batch": 1, "concurrency": 16384, "prompt_tokens": 128,
                         "output_tokens": 128, "serving": "simulated", "kv_cache_fraction": 0.003},
            "gpus": [1, 8], "top": 2, "space": {"attention_impl": ["flash"]}}
    df = search(spec)
    assert df.attrs["counts"]["invalid_by_rule"] == {"workload.serving": 1}
    assert set(df.gpus) == {8} and (df.in_flight_limit == "kv_cache").all()
