"""One-at-a-time sensitivity of a cost result to every sourced cost input (the tornado chart).

Each `{value, source}` number of a hardware's `cost.package` section and of the process files it names is
moved by +-25% while the rest stay put. Fractions near 1 (yields, test coverage) cannot grow by 25%, so
their complement moves instead: a 0.99 attach yield becomes 1 - 0.01 x 1.25 or 1 - 0.01 x 0.75, i.e. 25%
more or fewer failures. The wafer diameter is a standard, not an assumption, and stays fixed.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rapidllm.cost.config import HardwareCost, cost_from_mapping, process_names
from rapidllm.spec.named import resolve_named

FIXED = ("wafer_diameter_mm",)
FRACTIONS = ("attach_yield", "substrate_attach_yield", "test_coverage")


def sourced_paths(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths (list items by index) of every {value, source} number under `node`."""
    if isinstance(node, Mapping):
        if "value" in node and "source" in node:
            yield prefix
            return
        for k, v in node.items():
            yield from sourced_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from sourced_paths(v, f"{prefix}.{i}")


def _perturb(node: dict, path: str, factor: float) -> None:
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    if path.split(".")[-1] in FRACTIONS:
        node["value"] = 1.0 - (1.0 - node["value"]) * factor
    else:
        node["value"] = node["value"] * factor


def inputs(hardware: Mapping[str, Any]) -> tuple[dict, dict[str, dict]]:
    """A hardware mapping (deep copy) and the mappings of the process files its cost section names."""
    hw = copy.deepcopy(dict(hardware))
    procs = {n: copy.deepcopy(resolve_named("process", n, "sensitivity", "process", copy_named=False)[0])
             for n in process_names(hw["cost"])}
    return hw, procs


def parameters(hardware: Mapping[str, Any]) -> list[str]:
    """Every perturbable input: `package.<path>` of the cost section and `process:<name>.<key>`."""
    hw, procs = inputs(hardware)
    out = [f"package.{p}" for p in sourced_paths(hw["cost"]["package"])]
    for name, m in procs.items():
        out += [f"process:{name}.{p}" for p in sourced_paths(m) if p not in FIXED]
    return out


def perturbed(hardware: Mapping[str, Any], parameter: str, factor: float) -> HardwareCost:
    """The cost inputs with one parameter (a name from `parameters`) scaled by `factor`."""
    hw, procs = inputs(hardware)
    if parameter.startswith("process:"):
        name, path = parameter[len("process:"):].split(".", 1)
        _perturb(procs[name], path, factor)
    else:
        _perturb(hw["cost"], parameter, factor)
    return cost_from_mapping(hw, f"hardware {hw.get('name')}", processes=procs)


def tornado(hardware: Mapping[str, Any], metric: Callable[[HardwareCost], float],
            delta: float = 0.25) -> list[dict[str, Any]]:
    """metric at -delta and +delta for every parameter, with the baseline, sorted by swing (largest first)."""
    base = metric(cost_from_mapping(hardware, f"hardware {hardware.get('name')}"))
    rows = []
    for p in parameters(hardware):
        lo, hi = metric(perturbed(hardware, p, 1 - delta)), metric(perturbed(hardware, p, 1 + delta))
        rows.append({"parameter": p, "baseline": base, "low": lo, "high": hi, "swing": abs(hi - lo)})
    return sorted(rows, key=lambda r: (-r["swing"], r["parameter"]))
