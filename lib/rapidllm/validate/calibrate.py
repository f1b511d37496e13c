"""Calibration: three constants per device (compute, HBM and network utilization), nothing else.

The constants are fitted on the rows each suite declares in `calibration_rows` (a stratified subset of at
most 25% of its rows), minimising the MAPE over every scored entry of those rows, and written into the
`utilization:` line of config/hardware/<device>.yaml, where every later prediction reads them.
A device's rows fit at most one constant per ENTRIES_PER_CONSTANT entries, in the order compute, HBM,
network (`fitted_count`); the constants its rows cannot pin down come from its transfer donor
(validate/transfer.py), as for a device without rows (`fit_all`).

The optimizer is deterministic and needs no scipy: a coarse grid over the box [lo, hi]^3, then a bounded
Nelder-Mead simplex from the best grid point (standard coefficients, fixed iteration budget, points
clipped into the box). Same inputs, same constants.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rapidllm.validate.nccl import MIN_BYTES, TABLES, nccl_rows
from rapidllm.prediction import evaluate
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.experiment import expand
from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import Utilization
from rapidllm.spec.paths import project_root
from rapidllm.validate.suites import Suite, load_suite

CONSTANTS = ("compute", "hbm", "network")
# Devices with a measured collective table (nccl-tests, validate/nccl.py: TABLES) have their network
# constant fitted on it instead of the end-to-end rows: that table isolates the network, where end-to-end
# rows mix it with everything else (the H100's end-to-end objective is flat in it).
BOUNDS = (0.3, 1.0)        # a utilization is a fraction of a datasheet peak
# Calibration entries per fitted constant: fewer, and a device's rows fit fewer constants (fitted_count).
ENTRIES_PER_CONSTANT = 3


@dataclass(frozen=True)
class Entry:
    suite: str
    row: int
    metric: str
    measured: float
    case: Case


def calibration_entries(suites: list[Suite]) -> dict[str, list[Entry]]:
    """Scored entries of every declared calibration row, grouped by the device (hardware name) they run on."""
    out: dict[str, list[Entry]] = {}
    for suite in suites:
        for rec in expand(suite.experiment):
            if not rec["meta_calibration"] or rec["status"] != "ok":
                continue
            case = resolve_case(json.loads(rec["case_json"]), rec["label"])
            for m in (m for m in suite.metrics if m.full_basis):
                metric = m.inverse_of[0] if m.inverse_of else m.metric   # a work rate is fitted on its time
                measured = rec.get(f"meta_measured_{metric}")
                if measured is not None and np.isfinite(measured):
                    out.setdefault(case.hardware.name, []).append(
                        Entry(suite.name, int(rec["meta_row"]), metric, float(measured), case))
    return out


def with_utilization(case: Case, u: np.ndarray) -> Case:
    util = Utilization(**{k: float(v) for k, v in zip(CONSTANTS, u)})
    return dataclasses.replace(case, hardware=dataclasses.replace(case.hardware, utilization=util))


def predict_entries(entries: list[Entry], u: np.ndarray) -> np.ndarray:
    """Each entry's prediction with the device's utilizations set to u (one evaluation per distinct case)."""
    cache: dict[str, dict] = {}
    out = np.full(len(entries), np.nan)
    for i, e in enumerate(entries):
        key = e.case.case_id
        if key not in cache:
            cache[key] = evaluate(with_utilization(e.case, u))
        rec = cache[key]
        if rec.get("status") == "ok" and e.metric in rec:
            out[i] = float(rec[e.metric])
    return out


MISS_CAP = 1.0      # an entry's error counts at most 100% (predicted at more than twice its measurement)


def mape_objective(predict: Callable[[np.ndarray], np.ndarray], measured: np.ndarray) -> Callable[[np.ndarray], float]:
    """Mean absolute percentage error of the entries at utilizations u, each entry's error capped at
    MISS_CAP. Why the cap: an entry the model predicts at more than twice its measurement is missing a
    mechanism (the serving clients of NIM's H100 runs at concurrency > 1, predicted up to 4x slow, are the
    case in point: docs/serving-cohorts.md); a utilization cannot explain it, and uncapped it steers the
    constants of every other entry of the device towards whatever shrinks it. Capped, it costs the same at
    any u near the fit and so has no say. An under-prediction is below 100% anyway. A failed case costs
    1000%, so the fit never trades one away."""
    def objective(u: np.ndarray) -> float:
        p = predict(u)
        err = np.abs(p - measured) / measured
        return float(np.mean(np.where(np.isfinite(err), np.minimum(err, MISS_CAP), 10.0)) * 100.0)
    return objective


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, lo: float, hi: float, step: float = 0.08,
                iters: int = 120, tol: float = 1e-6) -> tuple[np.ndarray, float]:
    """Bounded Nelder-Mead (reflection 1, expansion 2, contraction 0.5, shrink 0.5), points clipped to [lo, hi]."""
    n = len(x0)
    clip = lambda x: np.clip(x, lo, hi)   # noqa: E731
    simplex = [clip(np.asarray(x0, float))]
    for k in range(n):
        x = simplex[0].copy()
        x[k] = x[k] - step if x[k] + step > hi else x[k] + step
        simplex.append(clip(x))
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values, kind="stable")
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol and np.max(np.abs(np.array(simplex) - simplex[0])) < 1e-4:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = clip(centroid + (centroid - simplex[-1]))
        fr = f(xr)
        if fr < values[0]:
            xe = clip(centroid + 2.0 * (centroid - simplex[-1]))
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = clip(centroid + 0.5 * (simplex[-1] - centroid))
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                simplex = [simplex[0]] + [clip(simplex[0] + 0.5 * (x - simplex[0])) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], float(values[best])


def fit_constants(objective: Callable[[np.ndarray], float], grid: int = 5, bounds: tuple[float, float] = BOUNDS,
                  iters: int = 120, dims: int = len(CONSTANTS)) -> tuple[np.ndarray, float]:
    """Coarse grid (grid^dims points over the box), then Nelder-Mead from the best point. Deterministic."""
    lo, hi = bounds
    axis = np.linspace(lo, hi, grid)
    best_x, best_f = None, np.inf
    for point in itertools.product(axis, repeat=dims):
        value = objective(np.array(point))
        if value < best_f - 1e-12:
            best_x, best_f = np.array(point), value
    step = (hi - lo) / max(grid - 1, 1) / 2
    x, value = nelder_mead(objective, best_x, lo, hi, step=step, iters=iters)
    return (x, value) if value <= best_f else (best_x, best_f)


def collective_calibration_rows(rows: list) -> list:
    """Declared calibration subset of a collective table: every 4th scored size (>= 1 MiB), i.e. 25 %."""
    scored = [r for r in rows if r.nbytes >= MIN_BYTES]
    return scored[::4]


def fit_network_on_collectives(device: str, grid: int = 71) -> float | None:
    """The network constant of a device with a measured collective table, fitted on that table's declared
    calibration rows (the measurement that isolates it); None for devices without one."""
    if device not in TABLES:
        return None
    axis = np.linspace(BOUNDS[0], BOUNDS[1], grid)
    errors = []
    for u in axis:
        rows = collective_calibration_rows(nccl_rows(device, utilization=float(u)))
        errors.append(float(np.mean([abs(r.error) for r in rows])))
    return float(axis[int(np.argmin(errors))])


def hardware_file(device: str) -> Path:
    return project_root() / "config" / "hardware" / f"{device}.yaml"


def write_constants(device: str, u: np.ndarray, path: Path | None = None) -> Path:
    """Rewrite only the values of the `utilization:` line of the device's hardware file."""
    path = path or hardware_file(device)
    text = path.read_text()
    line = "utilization: {" + ", ".join(f"{k}: {v:.3f}" for k, v in zip(CONSTANTS, u)) + "}"
    new, n = re.subn(r"(?m)^utilization:.*$", line, text)
    if n != 1:
        raise ValueError(f"{path}: expected exactly one 'utilization:' line, found {n}")
    path.write_text(new)
    return path


def fitted_count(device: str, entries: list[Entry]) -> int:
    """How many constants, in CONSTANTS order, a device's own calibration entries fit: every free one (all
    three, or compute and HBM where a collective table fixes the network), but at most one per
    ENTRIES_PER_CONSTANT entries. A device with few rows (B200: four) would otherwise trade one constant for
    another at will (fitted on all three, B200 came to compute 0.720 with HBM 0.380 and network 0.333: four
    entries, three unknowns); the constants it cannot pin down come from its transfer donor
    (validate/transfer.py), as they would with no rows at all."""
    return min(free_constants(device), len(entries) // ENTRIES_PER_CONSTANT)


def free_constants(device: str) -> int:
    """Constants a device's end-to-end rows can fit: all three, or compute and HBM where its collective table
    fixes the network (TABLES)."""
    return len(CONSTANTS) - (device in TABLES)


def fit_device(device: str, entries: list[Entry], grid: int = 5, iters: int = 120,
               prior: np.ndarray | None = None, prior_from: str = "") -> dict:
    """The three constants of one device fitted on its calibration entries (network from its collective
    table where it has one; constants past `fitted_count` from `prior`, its donor's), with the objective at
    1.0 and at the fit: the MAPE of those entries, each capped at MISS_CAP (below an entry's true error where
    it is over 100%)."""
    measured = np.array([e.measured for e in entries])
    objective = mape_objective(lambda u: predict_entries(entries, u), measured)
    before = objective(np.array([1.0, 1.0, 1.0]))
    network = fit_network_on_collectives(device)
    k, free = fitted_count(device, entries), free_constants(device)
    fixed = np.array([] if network is None else [network])
    if k < free:
        if prior is None:
            raise ValueError(f"{device}: {len(entries)} calibration entries fit {k} constant(s); the others need a donor")
        fixed = np.concatenate([prior[k:free], fixed])
    if k:
        head, _ = fit_constants(lambda x: objective(np.append(x, fixed)), grid=grid, iters=iters, dims=k)
        u = np.append(head, fixed)
    else:
        u = fixed
    u = np.round(u, 3)
    return {"device": device, "rows": len({(e.suite, e.row) for e in entries}), "entries": len(entries),
            "mape_before_pct": before, "mape_pct": objective(u), "fitted": k,
            "borrowed": CONSTANTS[k:free], "prior_from": prior_from if k < free else "",
            **dict(zip(CONSTANTS, map(float, u)))}


def fit_all(entries: dict[str, list[Entry]], grid: int = 5, iters: int = 120) -> dict[str, dict]:
    """`fit_device` for every device with entries: first those whose rows fit every free constant, then the
    others, each with its donor among those (the transfer rule) for the constants its rows cannot fit."""
    from rapidllm.validate.transfer import donor

    own = {d: es for d, es in sorted(entries.items()) if es}
    full = sorted(d for d, es in own.items() if fitted_count(d, es) == free_constants(d))
    donors = {d: donor(d, full) for d in own if d not in full}
    for d, source in sorted(donors.items()):
        if source is None:                     # checked before any entry is priced
            raise SpecError(f"rapidllm calibrate: {d} has {len(own[d])} calibration entries, too few to fit all its "
                            f"constants ({ENTRIES_PER_CONSTANT} per constant), and no device of the suites given "
                            "fits them all to take the rest from; add a suite with a fully fitted device's rows")
    fits = {d: fit_device(d, own[d], grid=grid, iters=iters) for d in full}
    for d, source in sorted(donors.items()):
        fits[d] = fit_device(d, own[d], grid=grid, iters=iters, prior=np.array([fits[source][c] for c in CONSTANTS]),
                             prior_from=source)
    return dict(sorted(fits.items()))


def borrowed_declaration_problem(device: str, fit: dict) -> str:
    """What is wrong with the `utilization_borrowed` line of a fitted device's hardware file, given its fit
    ("" if nothing): the file states which constants come from the donor, as `utilization_from` does for a
    device without rows, and the fit must agree with it."""
    from rapidllm.validate.transfer import device_spec

    hw = device_spec(device)
    want = (fit["prior_from"], fit["borrowed"])
    if (hw.borrowed_from, hw.borrowed) == want:
        return ""
    line = (f"utilization_borrowed: {{from: {want[0]}, constants: [{', '.join(want[1])}]}}" if want[0]
            else "no utilization_borrowed line")
    return (f"config/hardware/{device}.yaml: its {fit['entries']} calibration entries fit {fit['fitted']} constant(s) "
            f"(calibrate.fitted_count); the file must say so: {line}")


def calibrate(suite_paths: list[Path], grid: int = 5, iters: int = 120, write: bool = True,
              log: Callable[[str], None] = print) -> list[dict]:
    """Fit and (unless write=False) freeze the three constants of every device with calibration rows, then
    give every device without rows its donor's constants (validate/transfer.py)."""
    from rapidllm.validate.transfer import transferred_constants

    suites = [load_suite(p) for p in suite_paths]
    fits = fit_all(calibration_entries(suites), grid=grid, iters=iters)
    for device, fit in fits.items():           # before any file is written: all or nothing
        problem = borrowed_declaration_problem(device, fit)
        if problem:
            raise SpecError(problem)
    results = []
    for device, fit in fits.items():
        u = np.array([fit[k] for k in CONSTANTS])
        source = "" if device not in TABLES else \
            f" (network from the {TABLES[device].path.name} collective table)"
        if fit["prior_from"]:
            source += (f" ({', '.join(fit['borrowed'])} from {fit['prior_from']}: {fit['entries']} entries fit "
                       f"{fit['fitted']} constant(s))")
        log(f"{device}: {fit['rows']} calibration rows ({fit['entries']} entries): capped MAPE {fit['mape_before_pct']:.2f}% "
            f"at 1.0 -> {fit['mape_pct']:.2f}% at " + ", ".join(f"{k} {v:.3f}" for k, v in zip(CONSTANTS, u)) + source)
        if write:
            write_constants(device, u)
        results.append({**fit, "from": ""})
    fitted = {r["device"]: np.array([r[k] for k in CONSTANTS]) for r in results}
    for device, donor, u in transferred_constants(fitted):
        log(f"{device}: no calibration rows; constants transferred from {donor}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in zip(CONSTANTS, u)))
        if write:
            write_constants(device, u)
        results.append({"device": device, "rows": 0, "entries": 0, "mape_before_pct": np.nan, "mape_pct": np.nan,
                        **dict(zip(CONSTANTS, map(float, u))), "from": donor})
    return results
