"""Numba kernels that had no plain-Python restatement: the DAG longest path of the engine and the dense
route numbering of the router, each against its reference in tests/reference_impls.py on random inputs
(equal arrays, bit for bit). The other kernels are checked beside their own tests (test_gemm_kernel,
test_network_simulator / test_network_kernels, test_serving, test_engine_fast, test_sweep_speed_equivalence).
"""
from __future__ import annotations

import numpy as np
import pytest
from reference_impls import dense_route_ids_reference, longest_path_reference

from rapidllm.engine.replay import longest_path
from rapidllm.network.routing import _dense_route_ids


def random_dag(rng: np.random.Generator, n: int, p_edge: float, ties: bool):
    """CSR dependencies on earlier nodes only, shuffled labels; integer durations make ties common."""
    perm = rng.permutation(n)
    deps: list[list[int]] = [[] for _ in range(n)]
    for a in range(n):
        for b in range(a):
            if rng.random() < p_edge:
                deps[perm[a]].append(int(perm[b]))
    dur = rng.integers(0, 4, n).astype(float) if ties else rng.random(n)
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([d for ds in deps for d in ds], np.int64)
    return dur, ptr, idx


@pytest.mark.parametrize("seed", range(12))
def test_longest_path_matches_reference(seed):
    rng = np.random.default_rng(seed)
    dur, ptr, idx = random_dag(rng, int(rng.integers(1, 40)), float(rng.uniform(0.02, 0.4)), seed % 2 == 0)
    for got, want in zip(longest_path(dur, ptr, idx), longest_path_reference(dur, ptr, idx)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(8))
def test_longest_path_with_repeated_dependencies_matches_reference(seed):
    """A dependency listed more than once (the pipeline builder names a channel's last node once per
    network dimension), side by side or not: `kahn_order` keeps one successor entry for copies in a row,
    and gives the same order and the same start, finish and binding dependency as the reference, which
    walks every copy."""
    rng = np.random.default_rng(100 + seed)
    dur, ptr, idx = random_dag(rng, int(rng.integers(2, 40)), float(rng.uniform(0.05, 0.4)), seed % 2 == 0)
    deps = [list(idx[ptr[i]:ptr[i + 1]]) for i in range(len(dur))]
    for ds in deps:
        for d in list(ds):
            if rng.random() < 0.5:
                ds.insert(int(rng.integers(0, len(ds) + 1)), d)
    ptr = np.zeros(len(dur) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([d for ds in deps for d in ds], np.int64)
    for got, want in zip(longest_path(dur, ptr, idx), longest_path_reference(dur, ptr, idx)):
        assert np.array_equal(got, want)


def test_longest_path_of_a_cycle_is_nan():
    dur, ptr, idx = np.ones(3), np.array([0, 1, 2, 3]), np.array([2, 0, 1])
    assert np.isnan(longest_path(dur, ptr, idx)[1]).all()
    assert np.isnan(longest_path_reference(dur, ptr, idx)[1]).all()


@pytest.mark.parametrize("seed", range(6))
def test_dense_route_ids_match_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    for got, want in zip(_dense_route_ids(src, dst, n), dense_route_ids_reference(src, dst, n)):
        assert np.array_equal(got, want) and got.dtype == want.dtype
