"""Search spec: what to compare (model / hardware / network candidates), on how many GPUs, over which layouts,
ranked by what, under which limits (workflow/schemas/search.schema.yaml, docs/search.md).

A spec is validated once against its schema (unknown axes and values get one line naming the key and what
is allowed); the candidates' base cases are resolved through `resolve_case`, so a search sees exactly the
specs a case file would.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rapidllm.search.objectives import COST_OBJECTIVES, Objective, objective_from_spec, record_columns
from rapidllm.spec.case import OVERLAP_SWITCHES, SEARCH_CASE_KEYS, Case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import inline_spec_files, is_spec_path, resolve_named, spec_file_paths
from rapidllm.spec.network import NetworkSpec
from rapidllm.spec.paths import config_dir, display, pipeline_input, project_root, spec_path
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
    system: int = 0                            # which of the spec's (hardware, network) pairs it runs on


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
    costs: dict[str, Any] = field(default_factory=dict)   # hardware name -> cost.HardwareCost (cost objective)

    def cost_note(self) -> str | None:
        """The caveat beside a cost objective priced without `usd_per_gpu_hour` (`Operating.basis_note`):
        what the devices' $/GPU-hour leaves out; per device when their bases differ. None for a rental rate
        or another objective."""
        notes = {hw: c.operating.basis_note("usd_per_gpu_hour: RATE in the spec") for hw, c in self.costs.items()}
        distinct = list(dict.fromkeys(n for n in notes.values() if n))
        if len(distinct) <= 1:
            return distinct[0] if distinct else None
        return "; ".join(f"{hw}: {n}" for hw, n in notes.items() if n)


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


@dataclass(frozen=True)
class _System:
    """One (hardware, network) pair the candidates run on, with what names it: its labels, where in the spec
    it sits (for error lines) and the key of its hardware entry (for cost errors)."""
    hardware: Any
    network: Any
    label: str
    where: str
    hardware_key: str


def _systems(m: dict) -> list[_System]:
    """The (hardware, network) pairs of a spec: its `systems` as listed (each device on its own fabric), else
    every `hardware` entry crossed with every `network` entry."""
    if "systems" in m:
        pairs = m["systems"]
        hw, net = _labels([p["hardware"] for p in pairs], "hardware"), _labels([p["network"] for p in pairs], "network")
        return [_System(p["hardware"], p["network"], f"{hw[i]} / {net[i]}", f"systems {i}", f"systems.{i}.hardware")
                for i, p in enumerate(pairs)]
    hws, nets = ([m[k]] if not isinstance(m[k], list) else m[k] for k in ("hardware", "network"))
    hw, net = _labels(hws, "hardware"), _labels(nets, "network")
    return [_System(h, n, f"{hw[hi]} / {net[ni]}", f"hardware {hi}, network {ni}",
                    "hardware" if len(hws) == 1 else f"hardware.{hi}")
            for hi, h in enumerate(hws) for ni, n in enumerate(nets)]


def _distinct_devices(m: dict, source: str) -> None:
    """Refuse two different hardware entries with one device name (in a `hardware` list or across `systems`;
    one device on several fabrics is one entry): a cost objective prices each device by its name
    (`device_costs`), so an inline variant that kept a config device's name (a copy with another capital
    cost) was priced like the other, and in a `hardware` list the two candidates' labels were the same
    (review 17, finding 5). An inline device without a name is named `inline-hardware` (`named.resolve_named`)."""
    first: dict[str, _System] = {}
    for system in _systems(m):
        hw = system.hardware
        name = hw if isinstance(hw, str) else str(hw.get("name", "inline-hardware"))
        seen = first.setdefault(name, system)
        if seen.hardware != hw:
            raise SpecError.at(source, system.hardware_key, f"device name {name!r} is {seen.hardware_key}'s too, "
                               f"for another device; give each device its own name (an inline variant: name: "
                               f"{name}-variant), so the ranked table and a cost objective tell them apart")


def _candidates(m: dict, source: str) -> tuple[Candidate, ...]:
    models = m["model"] if isinstance(m["model"], list) else [m["model"]]
    systems = _systems(m)
    out = []
    for mi, model in enumerate(models):
        for si, system in enumerate(systems):
            where = (source if len(models) == 1 and len(systems) == 1     # name the candidate when several
                     else f"{source} (model {mi}, {system.where})")
            case_m = {"model": model, "hardware": system.hardware, "network": system.network,
                      "workload": m["workload"], "precision": m.get("precision", "bf16"),
                      "framework": m.get("framework", "megatron"), **{k: m[k] for k in SEARCH_CASE_KEYS if k in m}}
            base = resolve_case(case_m, where)
            net_m, net_src = resolve_named("network", system.network, where, "network", copy_named=False)
            label = f"{_labels(models, 'model')[mi]} / {system.label}"
            out.append(Candidate(label, base, NetworkSpec.from_mapping(net_m, net_src), si))
    return tuple(out)


def device_costs(m: dict, candidates: tuple[Candidate, ...], source: str) -> dict[str, Any]:
    """The cost inputs (`cost.HardwareCost`) of each candidate device by name, for a cost objective: as
    `rapidllm predict --cost` prices a case's device (`cost.config.device_cost`), at the spec's
    `usd_per_gpu_hour` when it gives one (which also prices a device without cost inputs)."""
    from rapidllm.cost.config import device_cost

    systems = _systems(m)
    return {c.base.hardware.name: device_cost(systems[c.system].hardware, c.base.hardware.name,
                                              m.get("usd_per_gpu_hour"), f"{source}: {systems[c.system].hardware_key}",
                                              "usd_per_gpu_hour: RATE in the search spec")
            for c in candidates}


def referenced_spec_files(path: str | Path) -> list[str]:
    """Spec files a search spec reads, so the pipeline reruns it when one of them changes: the config/ files
    it names and the files it names by path (`named.spec_file_paths`, at the top level or in `systems`
    entries, relative to its folder), as `experiment.referenced_spec_files` lists an experiment's."""
    m = load_yaml(Path(path))
    if not isinstance(m, dict):
        return []
    parts = [m, *(p for p in m.get("systems") or [] if isinstance(p, dict))]     # systems: hardware, network
    values = [(kind, v) for part in parts for kind in NAMED
              for v in (part.get(kind) if isinstance(part.get(kind), list) else [part.get(kind)])]
    return sorted({str((config_dir(kind) / f"{v}.yaml").relative_to(project_root()))
                   for kind, v in values if isinstance(v, str) and not is_spec_path(v)}
                  | {pipeline_input(f) for part in parts for f in spec_file_paths(part, Path(path).parent)})


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


def _inline_files(m: Any, folder: Path, source: str) -> Any:
    """A search spec file's mapping with its model, hardware and network paths (`named.is_spec_path`, at the
    top level or in `systems` entries) replaced by their files' mappings, read relative to the spec's folder
    (`named.inline_spec_files`, as a case or experiment file's are): the candidates then see inline specs."""
    m = inline_spec_files(m, folder, source)
    if isinstance(m, dict) and isinstance(m.get("systems"), list):
        m = {**m, "systems": [inline_spec_files(p, folder, source, f"systems.{i}.")
                              for i, p in enumerate(m["systems"])]}
    return m


def load_search(spec: str | Path | dict, source: str | None = None) -> SearchSpec:
    """Read (a path) or take (a mapping) a search spec, validate it and resolve its candidates. A spec file
    may name a model, device or fabric by a path to its file, read relative to the spec's folder; a mapping
    has no folder, so there a path is refused (`named.read_spec_file`)."""
    if isinstance(spec, Mapping):
        m, source = dict(spec), source or "<search spec>"
    else:
        spec = spec_path(spec, source or "search spec", "a mapping with a search spec's keys or a path to a "
                         "search spec YAML file (str or pathlib.Path)")
        source = source or display(spec)
        m = _inline_files(load_yaml(spec), spec.parent, source)
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
    _distinct_devices(m, source)
    candidates = _candidates(m, source)
    costs: dict[str, Any] = {}          # filled only if the objective is a cost column
    objective = objective_from_spec(m.get("objective"), m["workload"]["mode"], m.get("train_tokens"), source,
                                    lambda: costs.update(device_costs(m, candidates, source)) or costs)
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
                      top=int(m.get("top", 10)), costs=costs)
