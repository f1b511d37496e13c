"""Experiments: a base case crossed with sweep lists and/or parallel-layout factorizations, optionally with
one fault placed on every cable of a network dimension in turn (`fault_sweep`).

Every combination becomes a row. A combination that is not a valid case (tp not dividing heads, batch
not divisible, ...) stays as a row with status 'invalid' and the reason, so sweeps never lose cases
silently. Names in the case are inlined from config/ so later stages need only the row.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.layout import InferenceWorkload, Parallelism, TrainingWorkload
from rapidllm.spec.named import NAMED_KINDS, inline_spec_files, resolve_named, spec_file_paths
from rapidllm.spec.network import NetworkSpec, faults_text, line_cables, rank_uplinks
from rapidllm.spec.paths import config_dir, display, pipeline_input, project_root, spec_path
from rapidllm.spec.schema import close_keys, json_safe, knows_key, load_yaml, validate

AXES = ("dp", "tp", "pp", "cp", "ep")


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str
    base: dict
    cross: dict[str, list]
    cases: list[dict]
    factorize: dict | None
    shard_size: int
    fault_sweep: dict | None = None
    # the spec files its base, cross and cases name by path (resolved), read into them by `load_experiment`
    spec_files: tuple[Path, ...] = ()


MAX_CASES = 2**20                  # combinations of one experiment (sweep-1000 has 1472)


def load_experiment(path: str | Path, default_shard_size: int = 64) -> Experiment:
    path = spec_path(path, "load_experiment")
    source = display(path)
    m = load_yaml(path)
    validate(m, "experiment", source)
    folder = path.parent                # spec files named by path: read relative to the experiment's folder
    cross = m.get("cross", {})
    named_cross = {k: v for k, v in cross.items() if k in NAMED_KINDS}
    files = {p for part in (m["base"], named_cross, *m.get("cases", [{}])) for p in spec_file_paths(part, folder)}
    exp = Experiment(name=m["name"], source=source, base=inline_spec_files(m["base"], folder, source),
                     cross={**cross, **inline_spec_files(named_cross, folder, source)},
                     cases=[inline_spec_files(c, folder, source) for c in m.get("cases", [{}])],
                     factorize=m.get("factorize"), shard_size=m.get("shard_size", default_shard_size),
                     fault_sweep=m.get("fault_sweep"), spec_files=tuple(sorted(files)))
    check_experiment(exp)
    return exp


def check_experiment(exp: Experiment) -> None:
    """File-level errors a row-by-row check would hide: a sweep key that names nothing in a case or a model,
    hardware or network name that names no file in config/ (every row using it would be invalid), more than
    MAX_CASES combinations, or none at all."""
    unknown = [k for k in sorted(exp.cross) if not knows_key("case", k)]
    unknown += [f"cases.{i}.{k}" for i, c in enumerate(exp.cases) for k in sorted(c)
                if k not in ("label", "meta") and not knows_key("case", k)]
    if unknown:
        key = unknown[0].split(".", 2)[2] if unknown[0].startswith("cases.") else unknown[0]
        meant = close_keys("case", key)
        hint = f" (did you mean {' or '.join(meant[:2])}?)" if meant else ""
        raise SpecError.at(exp.source, unknown[0],
                           f"matches no key of a case (workflow/schemas/case.schema.yaml){hint}")
    named = [(k, f"base.{k}", exp.base.get(k)) for k in NAMED_KINDS]
    named += [(k, f"cross.{k}.{i}", v) for k in NAMED_KINDS for i, v in enumerate(exp.cross.get(k, []))]
    named += [(k, f"cases.{i}.{k}", c.get(k)) for i, c in enumerate(exp.cases) for k in NAMED_KINDS]
    for kind, key, value in named:      # a misspelt name would make every row that uses it invalid
        if isinstance(value, str):
            resolve_named(kind, value, exp.source, key)
    per_layout = len(exp.cases) * math.prod(len(v) for v in exp.cross.values())
    layouts = sum(1 for _ in itertools.islice(_layouts(exp), MAX_CASES // max(per_layout, 1) + 1))
    total = per_layout * layouts        # stops counting past the bound, so a huge sweep costs nothing
    if total > MAX_CASES:
        raise SpecError.at(exp.source, "cross", f"more than {MAX_CASES} combinations; allowed: at most {MAX_CASES} "
                           "per experiment")
    if total == 0:
        raise SpecError.at(exp.source, "factorize", f"no parallel layout of {exp.factorize['gpus']} GPUs on "
                           "the axes satisfies the bounds, so the experiment has no case")


def set_dotted(mapping: dict, key: str, value: Any) -> None:
    """mapping[a][b][c] = value for key "a.b.c"; a numeric part indexes a list ("dimensions.0.latency")."""
    *parents, leaf = key.split(".")
    node: Any = mapping
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value


def override(case: dict, key: str, value: Any, source: str) -> None:
    """`set_dotted`, reaching into a named model, hardware or network: "hardware.hbm_bandwidth" on
    `hardware: h100-sxm5-80gb` first inlines that file's mapping, renamed h100-sxm5-80gb+hbm_bandwidth=VALUE
    so that rows tell the what-if variant from the real device (what-if studies, §6.4 of the paper)."""
    head, _, rest = key.partition(".")
    if rest and head in NAMED_KINDS and head in case:
        if isinstance(case[head], str):
            case[head], _ = resolve_named(head, case[head], source, head)
        if not isinstance(value, (dict, list)):
            case[head]["name"] = f"{case[head].get('name', head)}+{rest}={value}"
    try:
        set_dotted(case, key, value)
    except (IndexError, ValueError, TypeError, AttributeError):
        raise SpecError.at(source, key, "does not name a field of the case (list items by index: "
                           "network.dimensions.0.latency)") from None


def deep_merge(base: dict, over: dict) -> dict:
    out = tree_copy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else tree_copy(v)
    return out


_ATOMS = frozenset({str, int, float, bool, type(None)})


def tree_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """`copy.deepcopy` of parsed YAML (dicts, lists, scalars), without its per-object dispatch: every case of
    a sweep copies the experiment's base (a fifth of `raw_cases`). A dict or list met twice (a YAML alias) is
    copied once and shared, as deepcopy's memo does; any other type goes to deepcopy."""
    t = type(value)
    if t in _ATOMS:
        return value
    if t is not dict and t is not list:
        return copy.deepcopy(value, memo)
    memo = {} if memo is None else memo
    hit = memo.get(id(value))
    if hit is not None:
        return hit
    out: Any
    if t is dict:
        out = memo[id(value)] = {}
        for k, v in value.items():
            out[k if type(k) in _ATOMS else tree_copy(k, memo)] = v if type(v) in _ATOMS else tree_copy(v, memo)
    else:
        out = memo[id(value)] = []
        out.extend(v if type(v) in _ATOMS else tree_copy(v, memo) for v in value)
    return out


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order, in O(sqrt n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _products(target: int, slots: int) -> Iterator[tuple[int, ...]]:
    """Tuples of `slots` divisors whose product is `target`, in the lexicographic order of
    itertools.product over the sorted divisors (only the tuples that multiply out are generated)."""
    if slots == 0:
        if target == 1:
            yield ()
        return
    for d in divisors(target):
        for rest in _products(target // d, slots - 1):
            yield (d, *rest)


def factorizations(gpus: int, axes: tuple[str, ...], bounds: dict[str, list[int]]) -> Iterator[dict[str, int]]:
    """Every assignment of sizes to `axes` whose product is `gpus` (ep is not a factor: it lives in dp*tp*cp)."""
    factor_axes = [a for a in axes if a != "ep"]
    all_divisors = divisors(gpus)
    for combo in _products(gpus, len(factor_axes)):
        sizes = dict(zip(factor_axes, combo))
        if all(bounds.get(a, [1, gpus])[0] <= v <= bounds.get(a, [1, gpus])[1] for a, v in sizes.items()):
            if "ep" in axes:
                lo, hi = bounds.get("ep", [1, gpus])
                for ep in all_divisors:
                    if lo <= ep <= hi:
                        yield {**sizes, "ep": ep}
            else:
                yield sizes


def raw_cases(exp: Experiment) -> Iterator[tuple[str, dict]]:
    """(label, partial case mapping) for every combination, in a deterministic order."""
    keys = sorted(exp.cross)
    layouts = list(_layouts(exp))
    for ci, extra in enumerate(exp.cases):
        for values in itertools.product(*(exp.cross[k] for k in keys)):
            for layout in layouts:
                plain = {k: v for k, v in extra.items() if k not in ("label", "meta") and "." not in k}
                case = deep_merge(exp.base, plain)
                for k, v in [*((k, v) for k, v in extra.items() if "." in k), *zip(keys, values)]:
                    override(case, k, v, exp.source)
                for axis, size in layout.items():
                    set_dotted(case, f"parallelism.{axis}", size)
                for key in (exp.factorize or {}).get("per_replica", []):
                    split_over_replicas(case, key, layout.get("dp", 1))
                parts = [str(extra.get("label", ci if len(exp.cases) > 1 else ""))] + \
                        [f"{k.split('.')[-1]}={v}" for k, v in zip(keys, values) if not isinstance(v, dict)] + \
                        [f"{a}{s}" for a, s in layout.items()]
                label = " ".join(p for p in parts if p)
                meta = extra.get("meta", {})
                if not exp.fault_sweep:
                    yield label, {"case": case, "meta": meta}
                    continue
                for tag, fault_meta, fault in fault_placements(case, exp.fault_sweep, exp.source):
                    placed = {**case, "faults": list(case.get("faults", [])) + ([fault] if fault else [])}
                    yield f"{label} {tag}", {"case": placed, "meta": {**meta, **fault_meta}}


def split_over_replicas(case: dict, key: str, dp: int) -> None:
    """A total (workload.batch: all requests in flight) -> its share per data-parallel replica, so every layout
    of a GPU count serves the same load. A total dp does not divide is left as a fraction, which the case
    schema then rejects: the row stays, invalid, with the reason."""
    *parents, leaf = key.split(".")
    node = case
    for p in parents:
        node = node.get(p, {})
    if leaf in node:
        total = node[leaf]
        node[leaf] = total // dp if total % dp == 0 else total / dp


def fault_placements(case: dict, sweep: dict, source: str) -> list[tuple[str, dict, dict | None]]:
    """(label part, meta columns, fault or None) for the fault-free case (when `baseline`, the default) and
    every fault kind on every cable of the first line of the swept dimension (its copy holding rank 0).

    A direct-connect dimension's cables come from its own topology (`line_cables`), as global rank ids:
    position k of the line holding rank 0 in dimension d is rank k x (product of the inner dimensions'
    sizes). A switch or fat-tree dimension has no rank-to-rank cables: there each rank of that line has one
    cable into its switch or leaf (`rank_uplinks`, node ids of the fabric sized for the case's world, so an
    'auto' dimension sweeps as many ranks as the layout needs); a fat tree's leaf-spine cables are not swept
    (a fault there reroutes over the other spines; docs/network.md)."""
    network, where = resolve_named("network", case.get("network"), source, "network", copy_named=False)
    dims = network["dimensions"]
    d = sweep.get("dimension", 0)
    if d >= len(dims):
        raise SpecError.at(source, "fault_sweep.dimension", f"{d} is not a dimension of {where} (it has {len(dims)})")
    dim = dims[d]
    sized = _sized(network, where, case, source)
    if sized is None:                   # a layout that gives no fabric: its row is invalid (resolve_case's why)
        cables = []
    elif dim["topology"] in ("switch", "fat_tree"):
        cables = rank_uplinks(sized, d)
    else:
        stride = math.prod(int(x["size"]) for x in dims[:d])
        cables = [(i * stride, j * stride) for i, j in line_cables(dim["topology"], sized.dimensions[d].size,
                                                                  tuple(dim.get("shape", ())))]
    out: list[tuple[str, dict, dict | None]] = []
    if sweep.get("baseline", True):
        out.append(("fault=none", {"fault_kind": "none", "fault_link": ""}, None))
    for kind, fault in sweep["kinds"].items():
        for a, b in cables:
            out.append((f"fault={kind} link={a}-{b}", {"fault_kind": kind, "fault_link": f"{a}-{b}"},
                        {**fault, "link": [a, b], "dimension": d}))
    return out


def _sized(network: dict, where: str, case: dict, source: str) -> NetworkSpec | None:
    """The network of a raw case, its 'auto' dimension sized for the case's world (dp x tp x pp x cp) as
    `resolve_case` sizes it: the node ids a fault names are those of that fabric (switch ids follow the
    ranks). None where the case's layout gives no world or one the network cannot hold: that row is
    invalid, and `resolve_case` says why."""
    net = NetworkSpec.from_mapping(network, where)
    if all(dim.size for dim in net.dimensions):
        return net
    par = case.get("parallelism")
    try:
        return net.sized_for(math.prod(int(par.get(a, 1)) for a in ("dp", "tp", "pp", "cp")), source)
    except (AttributeError, TypeError, ValueError, SpecError):
        return None


def _layouts(exp: Experiment) -> Iterator[dict[str, int]]:
    """The factorize layouts of an experiment ({} alone without factorize)."""
    if not exp.factorize:
        return iter([{}])
    f = exp.factorize
    counts = f["gpus"] if isinstance(f["gpus"], list) else [f["gpus"]]
    return (layout for gpus in counts for layout in factorizations(gpus, tuple(f.get("axes", AXES)), f.get("bounds", {})))


def count_cases(exp: Experiment) -> int:
    return sum(1 for _ in raw_cases(exp))


def inline_names(case: dict, source: str) -> dict:
    """Replace model/hardware/network names by their validated mappings (so rows are self-contained).
    The mappings are shared with the named-spec cache: callers only serialize them, never mutate."""
    out = dict(case)
    for kind in NAMED_KINDS:
        if kind in out:
            mapping, _ = resolve_named(kind, out[kind], source, kind, copy_named=False)
            out[kind] = mapping
    return out


def referenced_spec_files(exp: Experiment) -> list[str]:
    """Spec files an experiment reads, so the pipeline reruns it only when one of them changes: the config/
    files it names, and the files it names by path (`Experiment.spec_files`), each relative to the project
    root when inside it, else absolute."""
    files = {pipeline_input(p) for p in exp.spec_files}
    for _, raw in raw_cases(exp):
        for kind in NAMED_KINDS:
            value = raw["case"].get(kind)
            if isinstance(value, dict) and "+" in str(value.get("name", "")):    # a what-if variant (`override`)
                value = str(value["name"]).split("+")[0]
                value = value if (config_dir(kind) / f"{value}.yaml").exists() else None
            if isinstance(value, str):
                files.add(str((config_dir(kind) / f"{value}.yaml").relative_to(project_root())))
    return sorted(files)


def expand_with_cases(exp: Experiment, case_json: bool = True) -> list[tuple[dict, Case | None]]:
    """One record per combination (case_id, status, reason, the inlined case JSON and flat columns), each
    with the Case it resolved to (None for invalid rows), so a sweep resolves every case once.
    case_json=False leaves out the "case_json" column (an in-process sweep does not keep it; inlining and
    serializing the named specs of every row were a fifth of expansion)."""
    return [expand_row(exp, index, label, raw, case_json) for index, (label, raw) in enumerate(raw_cases(exp))]


def expand_row(exp: Experiment, index: int, label: str, raw: dict,
               case_json: bool = True) -> tuple[dict, Case | None]:
    """The record of combination `index` of `raw_cases` and its Case (None when invalid): a pure function
    of the combination, so a parallel sweep's workers can each expand their own share."""
    row: dict[str, Any] = {"experiment": exp.name, "index": index, "label": label,
                           "shard": index // exp.shard_size}
    row.update({f"meta_{k}": v for k, v in raw["meta"].items()})
    case = None
    try:
        case = resolve_case(raw["case"], f"{exp.source} case {index} ({label})")
        row.update(case_id=case.case_id, status="ok", reason="")
        if case_json:
            row["case_json"] = json.dumps(inline_names(raw["case"], exp.source), sort_keys=True)
        row.update(flat_columns(case))
    except SpecError as err:
        case = None
        row.update(case_id="", status="invalid", reason=str(err))
        if case_json:
            row["case_json"] = json.dumps(json_safe(raw["case"]), sort_keys=True, default=str)
    return row, case


def expand(exp: Experiment) -> list[dict]:
    """The rows of `expand_with_cases`, without the resolved cases."""
    return [row for row, _ in expand_with_cases(exp)]


def flat_columns(case: Any) -> dict[str, Any]:
    """A row's case as columns (`case_columns`): names, the layout axes first, then every other parallelism
    option (so rows that differ only in, say, `tp_comm_overlap` tell apart in the table), then the workload,
    then the case's kernel and software options (`attention_impl`, `decode_attention`, ...), then the
    network's faults (`faults_text`: the network file's and the case's; '' for none), so a faulted row
    reads apart from a healthy one without its case JSON."""
    p, w = case.parallelism, case.workload
    cols = dict(zip(_NAMES, (case.model.name, case.hardware.name, case.network.name, case.precision, w.mode,
                             p.world), strict=True))
    for name in _layout_columns():
        v = getattr(p, name)
        cols[name] = ",".join(v) if isinstance(v, tuple) else v
    for name in _workload_columns(type(w)):
        cols[name] = getattr(w, name)
    for name in CASE_OPTIONS:
        cols[name] = getattr(case, name)
    cols["faults"] = faults_text(case.network.faults)
    return cols


_NAMES = ("model", "hardware", "network", "precision", "mode", "world")
# the Case fields a sweep may cross besides the specs, the workload and the layout
CASE_OPTIONS = ("attention_impl", "decode_attention", "framework", "fp8_recipe", "moe_hot_expert_factor",
                "kv_cache_precision")
WORKLOADS = {cls.mode: cls for cls in (TrainingWorkload, InferenceWorkload)}     # by `workload.mode`


def case_columns(mode: Any) -> tuple[str, ...]:
    """The keys of `flat_columns` of a case of workload mode `mode`, in order: what a sweep has whatever
    its rows' validity. () for a mode that is none (a row whose workload is what is invalid)."""
    workload = WORKLOADS.get(mode) if isinstance(mode, str) else None
    return (*_NAMES, *_layout_columns(), *_workload_columns(workload), *CASE_OPTIONS, "faults") if workload else ()


@functools.lru_cache(maxsize=1)
def _layout_columns() -> tuple[str, ...]:
    """The parallelism's columns: the layout axes, the usual options, then every other field."""
    first = (*AXES, "sp", "zero", "fsdp", "recompute", "schedule", "virtual_stages")
    return (*first, *(n for n in _field_names(Parallelism) if n not in first and n not in _NAMES))


@functools.lru_cache(maxsize=4)
def _workload_columns(cls: type) -> tuple[str, ...]:
    return tuple(n for n in _field_names(cls) if n != "mode")


@functools.lru_cache(maxsize=16)
def _field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names in order (`dataclasses.fields` builds its tuple on every call)."""
    return tuple(f.name for f in dataclasses.fields(cls))
