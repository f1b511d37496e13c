"""What a case's `framework` admits and implies for its parallel layout.

`framework` names the software stack a case runs. Its memory conventions are in memory/state.py
(FRAMEWORKS), its collectives in engine/comm_cost.py (tensorrt-llm's NVLink custom all-reduce) and, for
`deepspeed`, its pipeline in engine/deepspeed.py. This module checks the layout against what the stack can
run and writes out the settings it always runs, so a record's columns say what was priced.

`deepspeed` is Megatron-DeepSpeed's model on DeepSpeed's PipelineEngine (DeepSpeed v0.5.4-v0.6.x,
deepspeed/runtime/pipe/; docs/deepspeed.md):
- one schedule, TrainSchedule (pipe/schedule.py L182-289): 1F1B with one model chunk per stage;
- ZeRO stage 0 or 1 only: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" (pipe/engine.py L72);
- the data-parallel gradient reduction runs after the pipeline flush, at the schedule's last step
  (ReduceTiedGrads, ReduceGrads, OptimizerStep: schedule.py L233-237; engine.py L246-249), so
  `overlap_grad_reduce` is false;
- no sequence parallelism (Megatron-LM added it in 2022, after the Megatron-DeepSpeed fork modelled here);
- none of Megatron-Core's overlap options (overlap_p2p_comm, overlap_param_gather, tp_comm_overlap,
  moe_a2a_overlap): its pipeline sends are blocking `dist.send` / `dist.recv` (pipe/p2p.py L48-86).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rapidllm.spec.errors import SpecError

_MEGATRON_CORE_ONLY = ("overlap_p2p_comm", "overlap_param_gather", "tp_comm_overlap", "moe_a2a_overlap")


def runs_option(framework: str, key: str) -> bool:
    """Whether `framework` runs the parallelism option `key` at all (deepspeed runs none of Megatron-Core's
    overlap options)."""
    return framework != "deepspeed" or key not in _MEGATRON_CORE_ONLY


def framework_parallelism(mapping: Any, par: Any, source: str) -> Any:
    """`par` (a resolved `Parallelism`) as the case's framework runs it; SpecError for a setting it cannot
    run. `mapping` is the case mapping (to tell a setting the user wrote from a default)."""
    if mapping.get("framework") != "deepspeed":
        return par
    written = mapping.get("parallelism", {})

    def bad(key: str, message: str) -> SpecError:
        return SpecError.at(source, f"parallelism.{key}", f"framework deepspeed {message}")
    if par.schedule != "1f1b":
        raise bad("schedule", f"runs DeepSpeed's TrainSchedule (1F1B, one model chunk per stage), not "
                  f"{par.schedule!r}; allowed: 1f1b")
    if par.zero >= 2 or par.fsdp != "none":
        key = "zero" if par.zero >= 2 else "fsdp"
        raise bad(key, "is DeepSpeed's PipelineEngine, which refuses ZeRO-2 and ZeRO-3 (pipe/engine.py); allowed: "
                  "zero 0 or 1, fsdp none (ZeRO-3 without the pipeline engine: the default framework, zero: 3)")
    if par.sp:
        raise bad("sp", "is Megatron-DeepSpeed of 2021, before Megatron's sequence parallelism; allowed: false")
    for key in _MEGATRON_CORE_ONLY:
        if getattr(par, key):
            raise bad(key, "does not run this Megatron-Core option; allowed: false")
    if written.get("overlap_grad_reduce") is True:
        raise bad("overlap_grad_reduce", "reduces the gradients after the pipeline flush "
                  "(TrainSchedule's last step); allowed: false")
    return dataclasses.replace(par, overlap_grad_reduce=False)
