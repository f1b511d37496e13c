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
communicator. Groups over the same ranks are one process group, hence one communicator, where the framework
shares them (nanotron's `ParallelContext.create_new_group` and `create_pg_for_tied_weights` keep one group per
rank set in `world_ranks_to_pg`: mp = tp x pp is the tp group at pp 1 and the pp group at tp 1, the tied
embedding's first/last-stage pair is the pp group at pp 2); torch's default group and nanotron's `world_pg`
are groups of their own. The device's `framework_memory` already budgets one communicator's buffers
(config/hardware), so a rank pays for the others: the sum less its largest one.
"""
from __future__ import annotations

import math

from rapidllm.spec.case import Case

# the parallel axes each rank-set group spans (a group over the same ranks as another is that group)
SPANS = {"tp": ("tp",), "dp": ("dp",), "pp": ("pp",), "mp": ("tp", "pp")}


def communicator_sizes(case: Case, stage: int, groups: tuple[str, ...]) -> list[int]:
    """Sizes of the distinct communicators of more than one rank that a rank of `stage` holds: `default`
    (torch's) and `world` (a group of its own) span every rank; `tp`, `dp`, `pp` and `mp` (tp x pp) are
    process groups shared by rank set (`SPANS`, axes of size 1 left out); `pp_p2p` is one 2-rank
    communicator per neighbouring stage; `tied_embedding` the group of the first and last stage that sums a
    tied embedding's gradients (the pp group itself at pp 2)."""
    p = case.parallelism
    size = {"tp": p.tp, "dp": p.dp, "pp": p.pp}
    seen: set[tuple[str, ...]] = set()
    out: list[int] = []
    for group in groups:
        if group == "pp_p2p":
            out += [2] * (int(stage > 0) + int(stage < p.pp - 1))
            continue
        if group == "tied_embedding":
            if not (case.model.tied_embeddings and p.pp > 1 and stage in (0, p.pp - 1)):
                continue
            key = ("pp",) if p.pp == 2 else ("tied_embedding",)
        else:
            key = (group,) if group in ("default", "world") else tuple(a for a in SPANS[group] if size[a] > 1)
        if key in seen or not key:
            continue
        seen.add(key)
        out.append(p.world if group in ("default", "world") else 2 if group == "tied_embedding"
                   else math.prod(size[a] for a in key))
    return [s for s in out if s > 1]


def communicator_memory(case: Case, stage: int, groups: tuple[str, ...], per_size: tuple[float, float]) -> float:
    """Device bytes of a `stage` rank's communicators beyond the one `framework_memory` budgets: each 2-rank
    communicator costs `per_size[0]`, each larger one `per_size[1]`; the largest is left out."""
    if not groups:
        return 0.0
    costs = [per_size[0] if s == 2 else per_size[1] for s in communicator_sizes(case, stage, groups)]
    return sum(costs) - max(costs, default=0.0)
