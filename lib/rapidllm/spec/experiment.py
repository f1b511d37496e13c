"""Experiments: a base case crossed with sweep lists and/or parallel-layout factorizations.

Every combination becomes a row. A combination that is not a valid case (tp not dividing heads, batch
not divisible, ...) stays as a row with status 'invalid' and the reason, so sweeps never lose cases
silently. Names in the case are inlined from config/ so later stages need only the row.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import config_dir, display, project_root
from rapidllm.spec.schema import json_safe, knows_key, load_yaml, validate

AXES = ("dp", "tp", "pp", "cp", "ep")
NAMED_KINDS = ("model", "hardware", "network")


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str
    base: dict
    cross: dict[str, list]
    cases: list[dict]
    factorize: dict | None
    shard_size: int


MAX_CASES = 2**20                  # combinations of one experiment (sweep-1000 has 1472)


def load_experiment(path: str | Path, default_shard_size: int = 64) -> Experiment:
    source = display(path)
    m = load_yaml(Path(path))
    validate(m, "experiment", source)
    exp = Experiment(name=m["name"], source=source, base=m["base"], cross=m.get("cross", {}),
                     cases=m.get("cases", [{}]), factorize=m.get("factorize"),
                     shard_size=m.get("shard_size", default_shard_size))
    check_experiment(exp)
    return exp


def check_experiment(exp: Experiment) -> None:
    """File-level errors a row-by-row check would hide: a sweep key that names nothing in a case (every
    row would be invalid), more than MAX_CASES combinations, or none at all."""
    unknown = [k for k in sorted(exp.cross) if not knows_key("case", k)]
    unknown += [f"cases.{i}.{k}" for i, c in enumerate(exp.cases) for k in sorted(c)
                if k not in ("label", "meta") and not knows_key("case", k)]
    if unknown:
        raise SpecError.at(exp.source, unknown[0], "matches no key of a case (workflow/schemas/case.schema.yaml)")
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
    *parents, leaf = key.split(".")
    for p in parents:
        mapping = mapping.setdefault(p, {})
    mapping[leaf] = value


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
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
                case = deep_merge(exp.base, {k: v for k, v in extra.items() if k not in ("label", "meta")})
                for k, v in zip(keys, values):
                    set_dotted(case, k, v)
                for axis, size in layout.items():
                    set_dotted(case, f"parallelism.{axis}", size)
                parts = [str(extra.get("label", ci if len(exp.cases) > 1 else ""))] + \
                        [f"{k.split('.')[-1]}={v}" for k, v in zip(keys, values) if not isinstance(v, dict)] + \
                        [f"{a}{s}" for a, s in layout.items()]
                yield " ".join(p for p in parts if p), {"case": case, "meta": extra.get("meta", {})}


def _layouts(exp: Experiment) -> Iterator[dict[str, int]]:
    """The factorize layouts of an experiment ({} alone without factorize)."""
    if not exp.factorize:
        return iter([{}])
    f = exp.factorize
    return factorizations(f["gpus"], tuple(f.get("axes", AXES)), f.get("bounds", {}))


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
    """config/ files an experiment reads (relative to the project root), so the pipeline reruns it only
    when one of them changes."""
    files = set()
    for _, raw in raw_cases(exp):
        for kind in NAMED_KINDS:
            value = raw["case"].get(kind)
            if isinstance(value, str):
                files.add(str((config_dir(kind) / f"{value}.yaml").relative_to(project_root())))
    return sorted(files)


def expand_with_cases(exp: Experiment) -> list[tuple[dict, Case | None]]:
    """One record per combination (case_id, status, reason, the inlined case JSON and flat columns), each
    with the Case it resolved to (None for invalid rows), so a sweep resolves every case once."""
    out: list[tuple[dict, Case | None]] = []
    for index, (label, raw) in enumerate(raw_cases(exp)):
        row: dict[str, Any] = {"experiment": exp.name, "index": index, "label": label,
                               "shard": index // exp.shard_size}
        row.update({f"meta_{k}": v for k, v in raw["meta"].items()})
        case = None
        try:
            case = resolve_case(raw["case"], f"{exp.source} case {index} ({label})")
            inlined = inline_names(raw["case"], exp.source)
            row.update(case_id=case.case_id, status="ok", reason="", case_json=json.dumps(inlined, sort_keys=True))
            row.update(flat_columns(case))
        except SpecError as err:
            case = None
            row.update(case_id="", status="invalid", reason=str(err),
                       case_json=json.dumps(json_safe(raw["case"]), sort_keys=True, default=str))
        out.append((row, case))
    return out


def expand(exp: Experiment) -> list[dict]:
    """The rows of `expand_with_cases`, without the resolved cases."""
    return [row for row, _ in expand_with_cases(exp)]


def flat_columns(case: Any) -> dict[str, Any]:
    p, w = case.parallelism, case.workload
    cols = {"model": case.model.name, "hardware": case.hardware.name, "network": case.network.name,
            "precision": case.precision, "mode": w.mode, "world": p.world}
    cols.update({a: getattr(p, a) for a in AXES})
    cols.update(sp=p.sp, zero=p.zero, fsdp=p.fsdp, recompute=p.recompute, schedule=p.schedule,
                virtual_stages=p.virtual_stages)
    cols.update({k: v for k, v in w.__dict__.items() if k != "mode"})
    return cols
