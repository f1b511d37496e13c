"""Search spec: what to compare (model / hardware / network candidates), on how many GPUs, over which layouts,
ranked by what, under which limits (workflow/schemas/search.schema.yaml, docs/search.md).

A spec is validated once against its schema (unknown axes and values get one line naming the key and what
is allowed); the candidates' base cases are resolved through `resolve_case`, so a search sees exactly the
specs a case file would.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rapidllm.search.objectives import COST_OBJECTIVES, Objective, objective_from_spec, record_columns
from rapidllm.spec.case import OVERLAP_SWITCHES, SEARCH_CASE_KEYS, Case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec
from rapidllm.spec.paths import config_dir, display, project_root, spec_path
from rapidllm.spec.schema import load_yaml, schema_of, validate
from rapidllm.units import UnitError, parse_quantity

NAMED = ("model", "hardware", "network")
# the layout columns a filter may name before evaluation (search/space.py writes them)
LAYOUT_AXES = ("dp", "tp", "pp", "cp", "ep", "etp", "sp", "schedule", "virtual_stages", "micro_batch", "batch",
               "recompute", "recompute_modules", "zero", "fsdp", "attention_impl", *OVERLAP_SWITCHES)


@dataclass(frozen=True)
class Candidate:
    """One (model, hardware, network) combination: its base case (1 GPU, default layout) and the unsized
    network that each layout sizes for its own world."""
    label: str
    base: Case
    network: NetworkSpec
    hardware_index: int = 0                    # which of the spec's `hardware` entries it runs on


@dataclass(frozen=True)
class SearchSpec:
    name: str
    source: str
    candidates: tuple[Candidate, ...]
    gpus: tuple[int, ...]
    space: dict[str, list]                     # axis -> user values (absent axes take their defaults)
    options: dict[str, Any]                    # parallelism settings every layout keeps (`parallelism`)
    tp_across_nodes: bool
    objective: Objective
    slo: dict[str, float]                      # record column -> upper limit (seconds)
    filters: dict[str, tuple[float, float]]    # column -> (min, max)
    top: int


# GPU counts one search may compare: every count is a separate space of thousands of layouts
MAX_GPU_COUNTS = 1024


def gpu_counts(value: Any, max_gpus: int | None, source: str) -> tuple[int, ...]:
    """The GPU counts of `gpus` (one, a list, or a {min, max, factor | step} range), at most `max_gpus`."""
    if isinstance(value, int):
        counts = [value]
    elif isinstance(value, list):
        counts = list(value)
    else:
        lo, hi = value["min"], value["max"]
        if "factor" in value and "step" in value:
            raise SpecError.at(source, "gpus", "give either factor or step, not both")
        if hi < lo:
            raise SpecError.at(source, "gpus", f"max {hi} is below min {lo}")
        step = value.get("step")
        if step and (hi - lo) // step + 1 > MAX_GPU_COUNTS:
            raise SpecError.at(source, "gpus", f"the range gives {(hi - lo) // step + 1} GPU counts; at most "
                               f"{MAX_GPU_COUNTS} (docs/limits.md): raise step or narrow the range")
        counts, n = [], lo
        while n <= hi:
            counts.append(n)
            n = n + value["step"] if "step" in value else n * value.get("factor", 2)
    kept = sorted(c for c in set(counts) if max_gpus is None or c <= max_gpus)
    if not kept:
        raise SpecError.at(source, "constraints.max_gpus", f"max_gpus {max_gpus} removes every GPU count "
                           f"({', '.join(map(str, sorted(set(counts))))})")
    return tuple(kept)


def _labels(values: list[Any], kind: str) -> list[str]:
    return [v if isinstance(v, str) else str(v.get("name", f"inline-{kind}-{i}")) for i, v in enumerate(values)]


def _candidates(m: dict, source: str) -> tuple[Candidate, ...]:
    lists = {k: (m[k] if isinstance(m[k], list) else [m[k]]) for k in NAMED}
    out = []
    for mi, model in enumerate(lists["model"]):
        for hi, hw in enumerate(lists["hardware"]):
            for ni, net in enumerate(lists["network"]):
                where = (source if all(len(v) == 1 for v in lists.values())   # name the candidate when several
                         else f"{source} (model {mi}, hardware {hi}, network {ni})")
                case_m = {"model": model, "hardware": hw, "network": net, "workload": m["workload"],
                          "precision": m.get("precision", "bf16"), "framework": m.get("framework", "megatron"),
                          **{k: m[k] for k in SEARCH_CASE_KEYS if k in m}}
                base = resolve_case(case_m, where)
                net_m, net_src = resolve_named("network", net, where, "network", copy_named=False)
                label = " / ".join(x[i] for x, i in ((_labels(lists["model"], "model"), mi),
                                                      (_labels(lists["hardware"], "hardware"), hi),
                                                      (_labels(lists["network"], "network"), ni)))
                out.append(Candidate(label, base, NetworkSpec.from_mapping(net_m, net_src), hi))
    return tuple(out)


def device_costs(m: dict, candidates: tuple[Candidate, ...], source: str) -> dict[str, Any]:
    """The cost inputs (`cost.HardwareCost`) of each candidate device by name, for a cost objective: as
    `rapidllm predict --cost` prices a case's device (`cost.config.device_cost`), at the spec's
    `usd_per_gpu_hour` when it gives one (which also prices a device without cost inputs)."""
    from rapidllm.cost.config import device_cost

    entries = m["hardware"] if isinstance(m["hardware"], list) else [m["hardware"]]
    where = (lambda i: f"{source}: hardware") if len(entries) == 1 else (lambda i: f"{source}: hardware.{i}")
    return {c.base.hardware.name: device_cost(entries[c.hardware_index], c.base.hardware.name,
                                              m.get("usd_per_gpu_hour"), where(c.hardware_index),
                                              "usd_per_gpu_hour: RATE in the search spec")
            for c in candidates}


def referenced_spec_files(path: str | Path) -> list[str]:
    """config/ files a search spec names (relative to the project root), so the pipeline reruns it when one
    of them changes."""
    m = load_yaml(Path(path))
    files = set()
    for kind in NAMED:
        values = m.get(kind, []) if isinstance(m, dict) else []
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str):
                files.add(str((config_dir(kind) / f"{value}.yaml").relative_to(project_root())))
    return sorted(files)


# the units a filter bound on a column may carry, by the column's suffix (bytes, seconds; `tokens_per_s` is a
# rate, not a time); other columns are counts, ratios or rates without a unit kind of their own, and take
# plain numbers
FILTER_UNITS = {"_bytes": "bytes", "_s": "time"}


def _filter_bound(column: str, bound: str, value: float | str, source: str) -> float:
    """A filter's `min` or `max` in SI units: a number as it is, a quantity ('70 GiB', '50 ms') on a column
    whose suffix names its unit, as every other quantity of a spec may be written (P9 of user trial 3)."""
    if not isinstance(value, str):
        return float(value)
    where = f"constraints.filters.{column}.{bound}"
    kind = next((k for suffix, k in FILTER_UNITS.items() if column.endswith(suffix)
                 and not column.endswith("_per_s")), None)
    if kind is None:
        raise SpecError.at(source, where, f"{value!r}: {column} takes a plain number; units are read on *_bytes "
                           "and *_s columns only")
    try:
        return parse_quantity(value, kind)
    except UnitError as err:
        raise SpecError.at(source, where, str(err)) from None


def load_search(spec: str | Path | dict, source: str | None = None) -> SearchSpec:
    """Read (a path) or take (a mapping) a search spec, validate it and resolve its candidates."""
    if isinstance(spec, Mapping):
        m, source = dict(spec), source or "<search spec>"
    else:
        spec = spec_path(spec, source or "search spec", "a mapping with a search spec's keys or a path to a "
                         "search spec YAML file (str or pathlib.Path)")
        source = source or display(spec)
        m = load_yaml(spec)
    fixed = m.get("parallelism") if isinstance(m, dict) else None
    axes = schema_of("search")["properties"]["space"]["properties"]
    pinned = sorted(k for k in fixed if k in axes) if isinstance(fixed, dict) else []
    if pinned:                              # the schema alone said "unknown key 'tp' (did you mean tp_comm_overlap?)"
        key = pinned[0]
        said = ("a search-space switch, not a parallelism setting; give it as space." + key
                if axes[key].get("type") == "boolean"
                else f"a search axis, on only where it applies: space.{key}: [true] turns it on wherever it "
                f"applies, [false, true] searches both" if key in OVERLAP_SWITCHES
                else f"a search axis, not a fixed setting; give its values in space.{key} (one value pins it)")
        raise SpecError.at(source, f"parallelism.{key}", said)
    validate(m, "search", source)
    constraints = m.get("constraints", {})
    candidates = _candidates(m, source)
    objective = objective_from_spec(m.get("objective"), m["workload"]["mode"], m.get("train_tokens"), source,
                                    lambda: device_costs(m, candidates, source))
    if "usd_per_gpu_hour" in m and objective.name not in COST_OBJECTIVES:
        raise SpecError.at(source, "usd_per_gpu_hour", "prices a cost objective; allowed with objective: {column: "
                           f"NAME, direction: min|max}} where NAME is one of {', '.join(COST_OBJECTIVES)}")
    slo = {f"{k}_s": parse_quantity(v, "time") for k, v in m.get("slo", {}).items()}
    if slo and m["workload"]["mode"] != "inference":
        raise SpecError.at(source, "slo", "latency limits apply to inference workloads only")
    filters = {k: tuple(_filter_bound(k, b, v.get(b, default), source) for b, default in (("min", -math.inf),
                                                                                           ("max", math.inf)))
               for k, v in constraints.get("filters", {}).items()}
    allowed = {"gpus", *LAYOUT_AXES, *record_columns()}
    unknown = sorted(set(filters) - allowed)
    if unknown:
        raise SpecError.at(source, f"constraints.filters.{unknown[0]}",
                           f"unknown column; allowed: {', '.join(sorted(allowed))}")
    empty = [k for k, (lo, hi) in filters.items() if lo > hi]
    if empty:
        lo, hi = (constraints["filters"][empty[0]][b] for b in ("min", "max"))
        raise SpecError.at(source, f"constraints.filters.{empty[0]}", f"min {lo} is above max {hi}; no value passes")
    space = dict(m.get("space", {}))
    across = bool(space.pop("tp_across_nodes", False))
    given = m["workload"].get("micro_batch") if m["workload"]["mode"] == "training" else None
    if given is not None:               # the workload's micro-batch: the axis's value unless the space lists them
        if given not in space.setdefault("micro_batch", [given]):
            raise SpecError.at(source, "workload.micro_batch", f"{given} is not among space.micro_batch "
                               f"{space['micro_batch']}; list the micro-batches to search in space.micro_batch")
    training_only = {"micro_batch", "recompute", "recompute_modules", "zero", "fsdp", "virtual_stages",
                     *OVERLAP_SWITCHES}
    wrong = sorted(training_only & set(space)) if m["workload"]["mode"] == "inference" else \
        sorted({"batch"} & set(space))
    if wrong:
        raise SpecError.at(source, f"space.{wrong[0]}", f"not an axis of a {m['workload']['mode']} search")
    return SearchSpec(name=m.get("name", Path(source).stem if not isinstance(spec, Mapping) else "search"),
                      source=source, candidates=candidates,
                      gpus=gpu_counts(m["gpus"], constraints.get("max_gpus"), source), space=space,
                      options=dict(m.get("parallelism", {})), tp_across_nodes=across, objective=objective, slo=slo, filters=filters,
                      top=int(m.get("top", 10)))
