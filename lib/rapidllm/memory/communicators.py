"""NCCL communicators a rank holds, and the device memory their buffers take outside PyTorch's allocator.

NCCL allocates each communicator's transport buffers on the device itself, not through PyTorch's caching
allocator: they are in neither `memory_allocated` nor `memory_reserved`, so a run can fail to allocate while
its reserved memory is well below the GPU's (fairscale PR 678, `get_process_group_cached`). More
communicators use more memory, linearly in the channel count, which NCCL raises to reach a faster link's
bandwidth (NCCL maintainers, NVIDIA/nccl issues 864 and 986). PyTorch's ProcessGroupNCCL creates one
communicator per process group on that group's first collective and a separate 2-rank communicator per
point-to-point peer. Measured with PyTorch on 4x A100 NVLink, one 4 MB all-reduce per group: 544 MB for a
2-rank group, 688 MB for a larger one (NVIDIA/nccl issue 964); an H100 NVLink node runs more channels, so
these are lower bounds there (with NVLink SHARP a communicator takes more still: about 1.3 GiB each on
2x H100, openxla/xla PR 9845).

`Conventions.process_groups` names the groups a framework's rank runs collectives on (nanotron:
memory/state.py NANOTRON), `Conventions.communicator_bytes` the bytes of a 2-rank and of a larger
communicator. The device's `framework_memory` already budgets one communicator's buffers (config/hardware),
so a rank pays for the others: the sum less its largest one.
"""
from __future__ import annotations

from rapidllm.spec.case import Case

def communicator_sizes(case: Case, stage: int, groups: tuple[str, ...]) -> list[int]:
    """Sizes of the communicators of more than one rank that a rank of `stage` holds: `world`, `tp`, `dp`,
    `pp` and `mp` (tp x pp) are process groups; `pp_p2p` is one 2-rank communicator per neighbouring stage;
    `tied_embedding` the 2-rank group of the first and last stage that sums a tied embedding's gradients."""
    p = case.parallelism
    size = {"world": p.world, "tp": p.tp, "dp": p.dp, "pp": p.pp, "mp": p.tp * p.pp}
    out: list[int] = []
    for group in groups:
        if group == "pp_p2p":
            out += [2] * (int(stage > 0) + int(stage < p.pp - 1))
        elif group == "tied_embedding":
            out += [2] if case.model.tied_embeddings and p.pp > 1 and stage in (0, p.pp - 1) else []
        else:
            out.append(size[group])
    return [s for s in out if s > 1]


def communicator_memory(case: Case, stage: int, groups: tuple[str, ...], per_size: tuple[float, float]) -> float:
    """Device bytes of a `stage` rank's communicators beyond the one `framework_memory` budgets: each 2-rank
    communicator costs `per_size[0]`, each larger one `per_size[1]`; the largest is left out."""
    if not groups:
        return 0.0
    costs = [per_size[0] if s == 2 else per_size[1] for s in communicator_sizes(case, stage, groups)]
    return sum(costs) - max(costs, default=0.0)
