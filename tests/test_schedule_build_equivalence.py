"""Schedule construction and engine outputs are frozen against a snapshot taken before the vectorized
hierarchical schedule builder (issue 7, item 7).

The fixture tests/data/schedule_build_snapshot.json holds, per case, the dtype, shape and SHA-256 of each
schedule array (src, dst, nbytes, chunk, dep_ptr, dep_idx) of hierarchical and auto collectives on 2- and
3-dimension fabrics, and the repr of every field of `rapidllm.prediction.evaluate` for the 11 Megatron suite cases.
Regenerate only on purpose: `python tests/test_schedule_build_equivalence.py --write`.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from rapidllm.network.api import build_schedule
from rapidllm.network.topology import build_topology
from rapidllm.spec.network import DimensionSpec, NetworkSpec

FIXTURE = Path(__file__).parent / "data" / "schedule_build_snapshot.json"
FIELDS = ("src", "dst", "nbytes", "chunk", "dep_ptr", "dep_idx")


def _net(*dims) -> NetworkSpec:
    return NetworkSpec("t", tuple(DimensionSpec(f"d{i}", kind, size, 100e9 / (i + 1), 1e-6 * (i + 1), **kw)
                                  for i, (kind, size, kw) in enumerate(dims)))


FABRICS = {
    "switch8_ring4": _net(("switch", 8, {}), ("ring", 4, {})),
    "fc4_switch6": _net(("fully_connected", 4, {}), ("switch", 6, {})),
    "switch4_ring3_ring2": _net(("switch", 4, {}), ("ring", 3, {}), ("ring", 2, {})),
    "ring2_fc3_switch4": _net(("ring", 2, {}), ("fully_connected", 3, {}), ("switch", 4, {})),
}


def _groups(world: int, sizes: tuple[int, ...]) -> dict[str, list[int]]:
    out = {"all": list(range(world)), "reversed": list(range(world))[::-1],
           "even": list(range(0, world, 2)), "first_two_lines": list(range(2 * sizes[0])),
           "outer_only": list(range(0, world, sizes[0])),
           "ragged": list(range(sizes[0] + 1)), "shuffled": [int(r) for r in np.random.default_rng(3).permutation(world)]}
    if len(sizes) > 2:
        out["skip_middle"] = [r for r in range(world) if (r // sizes[0]) % sizes[1] == 0]
        out["inner_outer_half"] = [r for r in range(world) if r % sizes[0] < 2 and r // (sizes[0] * sizes[1]) < 2]
    return out


def _digest(sched) -> str:
    """SHA-256 (first 24 hex digits) over dtype, shape and bytes of every schedule array, in FIELDS order."""
    h = hashlib.sha256()
    for f in FIELDS:
        a = np.asarray(getattr(sched, f))
        h.update(f"{f}:{a.dtype.str}:{a.shape};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:24]


def schedule_snapshot() -> dict[str, dict]:
    out = {}
    for fname, spec in FABRICS.items():
        topo = build_topology(spec)
        world = int(np.prod(topo.sizes))
        for gname, ranks in _groups(world, tuple(topo.sizes)).items():
            for op, algos in (("all_reduce", ("hierarchical", "auto")), ("reduce_scatter", ("hierarchical", "auto")),
                              ("all_gather", ("hierarchical", "auto")), ("all_to_all", ("auto",))):
                for algo in algos:
                    for nbytes in (1.0, 3e6, 1234567.0, 2.0 ** 30):
                        for chunks in (1, 4):
                            s, _, used = build_schedule(topo, op, nbytes, ranks, algo, chunks)
                            key = f"{fname}|{gname}|{op}|{algo}|{nbytes!r}|{chunks}"
                            out[key] = f"{used} {len(s)} {_digest(s)}"
    return out


def suite_snapshot() -> dict[str, dict]:
    from rapidllm.caches import Caches
    from rapidllm.prediction import evaluate
    from rapidllm.spec.experiment import expand_with_cases
    from rapidllm.spec.paths import project_root
    from rapidllm.validate.suites import load_suite
    suite = load_suite(project_root() / "validation" / "suites" / "megatron_gpt_a100.yaml")
    out = {}
    with Caches().active():
        for row, case in expand_with_cases(suite.experiment):
            if case is None:
                out[row["label"]] = {"status": repr(row["status"])}
                continue
            rec = evaluate(case)
            out[row["label"]] = {k: repr(v) for k, v in rec.items()}
    return out


@pytest.fixture(scope="module")
def frozen() -> dict:
    return json.loads(FIXTURE.read_text())


def test_schedule_arrays_equal_snapshot(frozen):
    now = schedule_snapshot()
    assert set(now) == set(frozen["schedules"])
    bad = [k for k in now if now[k] != frozen["schedules"][k]]
    assert not bad, bad[:5]


def test_megatron_suite_outputs_equal_snapshot(frozen):
    now = suite_snapshot()
    assert len(now) == 11
    assert now == frozen["suite"]


def test_vectorized_split_and_ring_groups_equal_definitions():
    from rapidllm.network.collectives import Schedule, concat, ring, ring_groups_schedule
    from rapidllm.network.hierarchical import _split, _split_reference, spanned
    for spec in FABRICS.values():
        topo = build_topology(spec)
        world = int(np.prod(topo.sizes))
        for ranks in _groups(world, tuple(topo.sizes)).values():
            ref_dims = [d for d in range(len(topo.sizes)) if len({topo.coords(r)[d] for r in ranks}) > 1]
            assert spanned(topo, ranks) == ref_dims
            for d in range(len(topo.sizes)):
                got, ref = _split(topo, ranks, d), _split_reference(topo, ranks, d)
                assert (got is None) == (ref is None)
                if got is not None:
                    assert got[0].tolist() == ref[0] and got[1].tolist() == ref[1]
    groups = np.random.default_rng(0).integers(0, 50, size=(5, 4)).astype(np.int32)
    for steps, chunks in ((1, 1), (3, 4), (6, 2)):
        fast = ring_groups_schedule(groups, steps, chunks, 0.75)
        parts = [ring(list(g), 0.75, steps, chunks) for g in groups]
        slow = concat([Schedule(*(np.array(getattr(p, f)) for f in FIELDS)) for p in parts])
        for f in FIELDS:
            a, b = getattr(fast, f), getattr(slow, f)
            assert a.dtype == b.dtype and np.array_equal(a, b), f


if __name__ == "__main__" and "--write" in sys.argv:
    FIXTURE.write_text(json.dumps({"schedules": schedule_snapshot(), "suite": suite_snapshot()}, indent=0, sort_keys=True) + "\n")
    print("wrote", FIXTURE)
