"""Shared fixtures: inline specs small enough to reason about by hand, and the project root."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))


@pytest.fixture
def hw_mapping() -> dict:
    return dict(name="toy-gpu", sm_count=100, clock="1 GHz", tensor_flops={"bf16": "100 TFLOP/s"},
                vector_flops="10 TFLOP/s", hbm_capacity="80 GiB", hbm_bandwidth="2 TB/s", l2_size="40 MiB",
                kernel_launch_overhead="0 us", framework_memory="0 GiB",
                sm_limits=dict(max_threads=2048, max_registers=65536, max_shared_memory="164 KiB", max_blocks=32))


@pytest.fixture
def net_mapping() -> dict:
    return dict(dimensions=[dict(topology="switch", size=8, link_bandwidth="100 GB/s", latency="0 us"),
                            dict(topology="fat_tree", size="auto", link_bandwidth="25 GB/s", latency="0 us")])


@pytest.fixture
def gpt_case(hw_mapping: dict, net_mapping: dict) -> dict:
    """Megatron-style GPT-175B training case on the toy hardware."""
    return dict(model="gpt-175b", hardware=hw_mapping, network=net_mapping, precision="bf16",
                workload=dict(mode="training", seq_len=2048, global_batch=64, micro_batch=1),
                parallelism=dict(tp=8, pp=8, dp=1, sp=True, recompute="selective"))


# A held-out validation suite's test module names its suite file in SUITE; these fixtures load it, sweep its
# cases once per module and compare them with the references (tests/test_nemo_perf_summary.py,
# tests/test_mlperf_inference.py).
@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest):
    from rapidllm.validate.suites import load_suite
    return load_suite(request.module.SUITE)


@pytest.fixture(scope="module")
def summary(suite):
    from rapidllm.prediction import sweep
    return sweep(suite.experiment, progress=False)


@pytest.fixture(scope="module")
def rows(suite, summary):
    from rapidllm.validate.suites import compare
    return compare(suite, summary)
