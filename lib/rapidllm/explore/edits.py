"""What the explorer's form controls do to a case, kept apart from the page so it is testable without a browser.

A case is a mapping with the keys of a case file (`resolve_case` reads it; the prediction goes through the
public `rapidllm.predict`). An edit overrides keys of the model, hardware or network spec, of one network
dimension, of the workload or the layout, or adds degraded links. A spec given by name stays a name until
one of its values is changed (then it becomes the named file's mapping with that value replaced, inline),
so an unedited case has the case id `rapidllm predict` prints for the same file.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rapidllm.prediction import MEMORY_FIELDS, Prediction
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import known_names, project_root
from rapidllm.units import parse_quantity

KINDS = ("model", "hardware", "network")
# hardware keys the page edits, with the unit the control shows
HARDWARE_KNOBS = {"hbm_bandwidth": ("bandwidth", 1e12, "TB/s"), "hbm_capacity": ("bytes", 2**30, "GiB")}
DIMENSION_KNOBS = {"link_bandwidth": ("bandwidth", 1e9, "GB/s"), "latency": ("time", 1e-6, "us")}
MODEL_KNOBS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")


DEFAULT_EXAMPLE = "gpt175b-tp8-pp8.yaml"


def schedule_of(par: dict[str, Any]) -> str:
    """The pipeline schedule a case's `parallelism` mapping runs: its `schedule`, else `interleaved` when it
    sets virtual_stages >= 2 (resolve_case infers it, as Megatron-LM does), else the default 1f1b."""
    return par.get("schedule", "interleaved" if par.get("virtual_stages", 1) > 1 else "1f1b")


def schedule_edits(par: dict[str, Any], schedule: str, virtual_stages: int) -> dict[str, Any]:
    """The `parallelism` edits for the schedule (and model chunks per stage) chosen on the page. A schedule
    other than interleaved runs one chunk per stage, so chunks the case set go back to 1: the case rules
    refuse virtual_stages >= 2 with 1f1b or gpipe, and without `schedule` those chunks mean interleaved."""
    out: dict[str, Any] = {}
    if schedule != schedule_of(par):
        out["schedule"] = schedule
    chunks = virtual_stages if schedule == "interleaved" else 1
    if chunks != par.get("virtual_stages", 1):
        out["virtual_stages"] = chunks
    return out


def examples() -> dict[str, Path]:
    """Example case files shipped with the project (examples/*.yaml, search specs excluded), by file name,
    the training example the docs use first."""
    files = sorted((project_root() / "examples").glob("*.yaml"), key=lambda p: (p.name != DEFAULT_EXAMPLE, p.name))
    return {p.name: p for p in files if not p.name.startswith("search")}


def names(kind: str) -> list[str]:
    """Names of the specs of a kind in config/ (the page's select boxes)."""
    return known_names(kind)


def parse_case_text(text: str) -> dict[str, Any]:
    """A pasted case YAML as a mapping; SpecError with one line when it is not a YAML mapping."""
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpecError(f"pasted case: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(mapping, dict):
        raise SpecError("pasted case: (top level): expected a mapping with model, hardware, network, workload")
    return mapping


def spec_mapping(case: dict[str, Any], kind: str) -> dict[str, Any]:
    """The model / hardware / network mapping of a case, named or inline (a copy)."""
    mapping, _ = resolve_named(kind, copy.deepcopy(case[kind]), "case", kind)
    return mapping


def spec_value(case: dict[str, Any], kind: str, key: str, quantity: str | None = None) -> Any:
    """One value of a case's spec, in SI units when `quantity` names its kind (for a control's default)."""
    value = spec_mapping(case, kind)[key]
    return parse_quantity(value, quantity) if quantity else value


def dimension_value(case: dict[str, Any], index: int, key: str) -> float:
    """A network dimension's link bandwidth or latency in SI units."""
    value = spec_mapping(case, "network")["dimensions"][index].get(key, 0.0)
    return parse_quantity(value, DIMENSION_KNOBS[key][0])


def _differs(old: Any, new: Any, quantity: str | None) -> bool:
    if quantity:
        return not math.isclose(parse_quantity(old, quantity), float(new), rel_tol=1e-9)
    return old != new


def apply_edits(case: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """A new case mapping: `case` with the edits applied (the input is not changed).

    edits keys (all optional): "model", "hardware", "network" ({spec key: value}); "dimensions"
    ({dimension index: {"link_bandwidth" | "latency": SI value}}); "workload", "parallelism"
    ({key: value}); "faults" (list of fault mappings, replacing the case's); "precision", "framework",
    "clock" (a locked SM clock, e.g. "1.2 GHz").
    Values equal to the spec's own (within 1e-9) are not edits.
    """
    out = copy.deepcopy(case)
    for kind in KINDS:
        changes = dict(edits.get(kind, {}))
        dims = edits.get("dimensions", {}) if kind == "network" else {}
        spec = spec_mapping(case, kind)
        quantities = {k: q for k, (q, _, _) in HARDWARE_KNOBS.items()} if kind == "hardware" else {}
        changed = {k: v for k, v in changes.items() if k not in spec or _differs(spec[k], v, quantities.get(k))}
        dim_changes = {int(i): {k: v for k, v in kv.items()
                                if _differs(spec["dimensions"][int(i)].get(k, 0.0), v, DIMENSION_KNOBS[k][0])}
                       for i, kv in dims.items()}
        dim_changes = {i: kv for i, kv in dim_changes.items() if kv}
        if not changed and not dim_changes:
            continue
        spec.update(changed)
        for i, kv in dim_changes.items():
            spec["dimensions"][i].update(kv)
        spec["name"] = f"{spec.get('name', kind)}-edited"
        out[kind] = spec
    for key in ("workload", "parallelism"):
        if edits.get(key):
            out[key] = {**out.get(key, {}), **edits[key]}
    if "faults" in edits:
        if edits["faults"]:
            out["faults"] = list(edits["faults"])
        else:
            out.pop("faults", None)
    for key in ("precision", "framework", "clock"):
        if edits.get(key):
            out[key] = edits[key]
    return out


def case_yaml(case: dict[str, Any]) -> str:
    """The case as YAML a user can save and pass to `rapidllm predict` (keys in the case-file order)."""
    return yaml.safe_dump(case, sort_keys=False, default_flow_style=None, width=110)


def headline(p: Prediction) -> dict[str, float | None]:
    """The numbers the page shows first: step time for training, TTFT / ITL / latency for inference."""
    if p.mode == "training":
        return {"step time (s)": p.step_time_s, "MFU": p.mfu, "tokens/s": p.tokens_per_s}
    return {"TTFT (ms)": _scaled(p.ttft_s, 1e3), "ITL (ms)": _scaled(p.itl_s, 1e3),
            "latency (s)": p.e2e_latency_s, "tokens/s": p.tokens_per_s}


def _scaled(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def breakdown(p: Prediction) -> pd.DataFrame:
    """Step (or request) time split into compute, exposed communication and bubble, seconds and share."""
    parts = {"compute": p.compute_time_s, "exposed communication": p.exposed_comm_s, "bubble": p.bubble_s}
    total = p.step_time_s or 0.0
    rows = [{"part": k, "seconds": v or 0.0, "share": (v or 0.0) / total if total else 0.0} for k, v in parts.items()]
    return pd.DataFrame(rows)


def memory_table(p: Prediction) -> pd.DataFrame:
    """Per-GPU GiB by component of the worst stage, against the device's capacity."""
    m = p.memory
    rows = [{"component": f, "GiB": getattr(m, f) / 2**30} for f in MEMORY_FIELDS if f != "capacity"]
    rows.append({"component": "peak", "GiB": m.peak / 2**30})
    rows.append({"component": "capacity", "GiB": m.capacity / 2**30})
    return pd.DataFrame(rows)


def compare(a: Prediction, b: Prediction) -> pd.DataFrame:
    """Two predictions side by side: every number of `Prediction.to_dict`, and B / A."""
    ra, rb = a.to_dict(), b.to_dict()
    rows = []
    for key, va in ra.items():
        vb = rb.get(key)
        if isinstance(va, bool) or isinstance(vb, bool) or not isinstance(va, (int, float)) \
                or not isinstance(vb, (int, float)):
            continue
        rows.append({"quantity": key, "A": va, "B": vb, "B / A": vb / va if va else float("nan")})
    return pd.DataFrame(rows)


def cables(case: dict[str, Any], rank: int) -> list[tuple[str, list[int]]]:
    """(label, [a, b]) of every cable at `rank` in the case's network, sized for its layout: what a
    degraded-link control offers (`faults: [{link: [a, b], ...}]`, docs/network.md "Faults")."""
    from rapidllm.network.topology import build_topology, cables_of
    from rapidllm.spec.case import resolve_case

    net = resolve_case({k: v for k, v in case.items() if k != "faults"}, "case").network
    topo = build_topology(net)
    if not 0 <= rank < topo.n_ranks:        # ids past the ranks are switches: not a rank's cables
        return []
    return [(f"{net.dimensions[d].name}: rank {rank} - {topo.switch_labels.get(b, f'rank {b}')} (node {b})",
             [rank, b]) for b, d in cables_of(topo, rank)]
