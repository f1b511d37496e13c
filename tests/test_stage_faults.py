"""A fault prices the data-parallel reduction of the stage it hits, not stage 0's for every stage."""
from __future__ import annotations

import numpy as np

import rapidllm


def plan_inputs(fault: list):
    p = rapidllm.predict(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                              faults=fault, precision="bf16",
                              workload=dict(mode="training", seq_len=4096, global_batch=32, micro_batch=1),
                              parallelism=dict(tp=8, pp=2, dp=4, sp=True, zero=1)), trace=True)
    return p, p.schedule.plan.inputs


def test_fault_slows_its_own_stages_gradient_reduction() -> None:
    """64 GPUs: stage 1 is nodes 4-7; rank 32 (node 4, GPU 0) loses 95% of its NIC's bandwidth. Its stage's
    buckets and parameter gather cross that NIC and slow down; stage 0's do not move."""
    healthy, h = plan_inputs([])
    faulty, f = plan_inputs([{"link": [32, 72], "bandwidth_factor": 0.05}])     # 72: rail-0 leaf
    b, g = np.broadcast_to(f.bucket_s, (2,)), np.broadcast_to(f.param_gather_s, (2,))
    assert b[0] == h.bucket_s and g[0] == h.param_gather_s
    assert b[1] > 5 * b[0] and g[1] > 5 * g[0]
    assert faulty.step_time_s > healthy.step_time_s
