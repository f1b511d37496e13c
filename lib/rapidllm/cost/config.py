"""Cost inputs from config: the `cost:` section of a hardware spec and the process files it names.

Every number in them is `{value, source}`; here they become the dataclasses of silicon.py, package.py and
operating.py. The section is read from the hardware mapping (named file or inline), never from
`HardwareSpec`, so cost inputs do not enter the case id (they change no timing).
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rapidllm.cost.operating import Operating
from rapidllm.cost.package import Die, Hbm, PackageSpec
from rapidllm.cost.silicon import Process
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import inline_spec_files, resolve_named
from rapidllm.spec.paths import display, known_names
from rapidllm.spec.schema import load_yaml, validate

PROCESS_KEYS = ("wafer_diameter_mm", "edge_exclusion_mm", "scribe_mm", "wafer_cost_usd", "defect_density_per_cm2",
                "clustering_alpha", "test_cost_usd", "test_coverage", "design_nre_usd")


@dataclass(frozen=True)
class HardwareCost:
    """A device's cost inputs: the package (None when the spec gives only operating cost) and operating."""
    hardware: str
    package: PackageSpec | None
    operating: Operating


def _v(m: Mapping[str, Any], key: str) -> float:
    return float(m[key]["value"])


def load_process(name: str, source: str = "cost", key: str = "process") -> Process:
    """config/process/{name}.yaml as a Process (validated against workflow/schemas/process.schema.yaml)."""
    mapping, _ = resolve_named("process", name, source, key, copy_named=False)
    return process_from_mapping(mapping)


def process_from_mapping(m: Mapping[str, Any]) -> Process:
    return Process(name=m["name"], **{k: _v(m, k) for k in PROCESS_KEYS})


def package_from_mapping(p: Mapping[str, Any], processes: Mapping[str, Process], where: str = "cost") -> PackageSpec:
    """The `cost.package` mapping with its process names looked up in `processes`."""
    hbm, asm, sub = p["hbm"], p["assembly"], p["substrate"]
    if hbm["stacks"] > hbm["sites"]:
        raise SpecError.at(where, "package.hbm.stacks", f"{hbm['stacks']} stacks on {hbm['sites']} sites; "
                           "allowed: stacks <= sites")
    return PackageSpec(
        dies=tuple(Die(name=d["name"], area_mm2=_v(d, "area_mm2"), process=processes[d["process"]],
                       count=int(d.get("count", 1))) for d in p["dies"]),
        hbm=Hbm(sites=int(hbm["sites"]), stacks=int(hbm["stacks"]), price_per_stack_usd=_v(hbm, "price_per_stack_usd"),
                dummy_price_usd=_v(hbm, "dummy_price_usd"), footprint_mm2=_v(hbm, "footprint_mm2")),
        interposer_process=processes[p["interposer"]["process"]],
        interposer_area_overhead=_v(p["interposer"], "area_overhead"),
        substrate_area_scale=_v(sub, "area_scale"), substrate_usd_per_mm2=_v(sub, "usd_per_mm2"),
        attach_usd=_v(asm, "attach_usd"), attach_yield=_v(asm, "attach_yield"),
        substrate_attach_yield=_v(asm, "substrate_attach_yield"), package_test_usd=_v(asm, "package_test_usd"),
        package_nre_usd=_v(p, "package_nre_usd"), volume_units=_v(p, "volume_units"))


def operating_from_mapping(o: Mapping[str, Any]) -> Operating:
    return Operating(board_power_w=_v(o, "board_power_w"), power_utilization=_v(o, "power_utilization"),
                     pue=_v(o, "pue"), energy_usd_per_kwh=_v(o, "energy_usd_per_kwh"),
                     capital_usd=_v(o, "capital_usd"), lifetime_years=_v(o, "lifetime_years"),
                     capital_basis=str(o.get("capital_basis", "")))


def process_names(cost: Mapping[str, Any]) -> list[str]:
    """The config/process names a cost section refers to, in first-use order."""
    pkg = cost.get("package")
    if not pkg:
        return []
    return list(dict.fromkeys([d["process"] for d in pkg["dies"]] + [pkg["interposer"]["process"]]))


PREDICT_RATE = "rapidllm predict --cost --usd-per-gpu-hour RATE"


def cost_from_mapping(hardware: Mapping[str, Any], where: str,
                      processes: Mapping[str, Mapping[str, Any]] | None = None,
                      rate_hint: str = PREDICT_RATE) -> HardwareCost:
    """A hardware mapping's cost inputs. `processes` overrides config/process files by name (the
    sensitivity study perturbs them); otherwise they are read and validated from config/. `rate_hint`: how
    the caller's user gives a rental rate instead, named when the mapping has no cost inputs."""
    cost = hardware.get("cost")
    if cost is None:
        raise SpecError(f"{where}: cost: missing; hardware {hardware.get('name')!r} has no cost section "
                        "(see docs/cost.md); allowed: a `cost:` section, or a rental rate of your own "
                        f"(`{rate_hint}`)")
    validate(cost, "cost", f"{where}: cost")
    procs = {}
    for name in process_names(cost):
        if processes is not None and name in processes:
            procs[name] = process_from_mapping(processes[name])
        else:
            procs[name] = load_process(name, f"{where}: cost", "process")
    pkg = package_from_mapping(cost["package"], procs, f"{where}: cost") if cost.get("package") else None
    return HardwareCost(hardware=str(hardware.get("name", "")), package=pkg,
                        operating=operating_from_mapping(cost["operating"]))


def hardware_mapping(name: str) -> tuple[dict, str]:
    """The validated mapping of config/hardware/{name}.yaml and its display path."""
    if name not in known_names("hardware"):
        raise SpecError.at("cost", "hardware", f"{name!r} is not in config/hardware/ (an inline device); pass "
                           "its cost inputs, hardware_cost(mapping); known: " + ", ".join(known_names("hardware")))
    return resolve_named("hardware", name, "cost", "hardware")


def device_cost(entry: str | Mapping[str, Any], name: str, rate: float | None, where: str,
                rate_hint: str = PREDICT_RATE) -> HardwareCost:
    """The cost inputs a case's or search's device `entry` (a config name or an inline mapping) is priced
    with: an inline device's own `cost:` section (one without it that keeps a config device's `name`, a copy
    with a tweak, is priced as that device), else the config device's; at `rate` $/GPU-hour when given,
    which also prices a device that has no cost inputs (cost_basis rental)."""
    own = isinstance(entry, Mapping) and ("cost" in entry or name not in known_names("hardware"))
    mapping, where = (entry, where) if own else hardware_mapping(name)
    if rate is not None and "cost" not in mapping:
        return HardwareCost(name, None, Operating.rental_only(rate))
    hc = cost_from_mapping(mapping, where, rate_hint=rate_hint)
    return hc if rate is None else dataclasses.replace(hc, operating=hc.operating.rented(rate))


def case_file_device(path: str | Path) -> Any:
    """A case file's `hardware` entry as `device_cost` takes it: a config name, or the inline mapping (a device
    file it names by path read relative to its folder), which keeps the `cost:` section the Case drops."""
    return inline_spec_files(load_yaml(Path(path)), Path(path).parent, display(path)).get("hardware")


def hardware_cost(hardware: str | Mapping[str, Any]) -> HardwareCost:
    """Cost inputs of a named device (config/hardware/NAME.yaml) or of an inline hardware mapping."""
    if isinstance(hardware, str):
        mapping, where = hardware_mapping(hardware)
        return cost_from_mapping(mapping, where)
    return cost_from_mapping(hardware, f"hardware {hardware.get('name', '<inline>')}")


def scaled(mapping: Mapping[str, Any], path: str, factor: float) -> dict:
    """A deep copy of `mapping` with the `value` at dotted `path` (list indices as numbers) times factor:
    the one-at-a-time perturbation of the sensitivity (tornado) study."""
    out = copy.deepcopy(dict(mapping))
    node: Any = out
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    node["value"] = node["value"] * factor
    return out
