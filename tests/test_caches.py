"""Memo tables cannot leak one prediction's state into another: validation suites run in one process, in
two orders, each order sharing one set of tables across all its suites (so later suites hit entries the
earlier ones made), give identical result tables, byte for byte. Keys are values (rapidllm/caches.py),
never object identities that a later object could reuse."""
from __future__ import annotations

import pandas as pd

from rapidllm.caches import Caches, Memo, current
from rapidllm.prediction import sweep
from rapidllm.spec.paths import project_root
from rapidllm.validate.suites import compare, load_suite

SUITES = ("megatron_gpt_a100", "megatron_gpt_a100_korthikanti_table", "llama2_latency_a100", "moe_qwen3_h100",
          "mpt_fsdp_h100", "llama2_latency_h100")


def run(order: tuple[str, ...], caches: Caches) -> dict[str, str]:
    out = {}
    for name in order:
        suite = load_suite(project_root() / "validation" / "suites" / f"{name}.yaml")
        out[name] = compare(suite, sweep(suite.experiment, caches=caches)).to_csv(index=False)
    return out


def test_suites_in_two_orders_with_shared_tables_give_identical_results():
    forward, backward = Caches(), Caches()
    a = run(SUITES, forward)
    b = run(SUITES[::-1], backward)
    assert a.keys() == b.keys()
    for name in SUITES:
        assert a[name] == b[name], name
    assert forward.collectives.keys() == backward.collectives.keys() and len(forward.collectives) > 10
    # a rerun served entirely from the shared tables simulates nothing new and gives the same rows
    simulated = len(forward.collectives)
    assert run(SUITES[:1], forward) == {SUITES[0]: a[SUITES[0]]}
    assert len(forward.collectives) == simulated


def test_a_scope_owns_its_tables_and_restores_the_outer_one():
    outer = current()
    mine = Caches()
    with mine.active():
        assert current() is mine
        with Caches().active() as inner:
            assert current() is inner
        assert current() is mine
    assert current() is outer


def test_memo_is_bounded():
    memo = Memo(3)
    for k in range(7):
        memo.put(k, k)
        assert len(memo) <= 3 and memo[k] == k
    memo.put(6, 60)                     # overwriting an existing key does not empty the table
    assert memo[6] == 60 and len(memo) == 1 + (6 % 3)
    weighed = Memo(100, budget=10)      # and a weighed one empties itself before passing its byte budget
    weighed.put("a", 1, 6)
    weighed.put("b", 2, 4)
    assert len(weighed) == 2 and weighed.nbytes == 10
    weighed.put("c", 3, 1)
    assert list(weighed) == ["c"] and weighed.nbytes == 1


def test_lru_memo_drops_only_the_least_recently_used():
    from rapidllm.caches import LruMemo

    memo = LruMemo(3, budget=10)
    for k in "abc":
        memo.put(k, k.upper(), 3)
    assert memo.get("a") == "A"                 # a is now the most recently used: b goes first
    memo.put("d", "D", 3)
    assert list(memo) == ["c", "a", "d"] and memo.nbytes == 9 and memo.get("b") is None
    memo.put("e", "E", 7)                       # over the byte budget: drops c and a, keeps d
    assert list(memo) == ["d", "e"] and memo.nbytes == 10
    memo.put("d", "D2", 1)                      # overwriting re-weighs the entry
    assert memo.get("d") == "D2" and memo.nbytes == 8 and memo.get("x", 0) == 0


def test_identity_memo_hits_only_the_very_objects():
    """`IdentityMemo` answers for the objects it holds, not for equal ones, and empties itself when full."""
    from rapidllm.caches import IdentityMemo

    memo, calls = IdentityMemo(2), []
    a, equal_to_a, b = [1], [1], [2]
    def compute(x):
        return lambda: calls.append(x) or len(calls)
    assert memo.of((a,), compute(a)) == 1 and memo.of((a,), compute(a)) == 1   # a hit: computed once
    assert memo.of((equal_to_a,), compute(equal_to_a)) == 2                    # equal but another object
    assert memo.of((a, b), compute(b)) == 3 and len(memo) == 1                 # full at 2: emptied first
    assert memo.of((a, b), compute(b)) == 3
