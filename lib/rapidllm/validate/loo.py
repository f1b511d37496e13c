"""How the error transfers: in-sample, leave-one-suite-out and leave-one-device-out MAPE per suite.

In-sample scores every suite with the constants fitted on all declared calibration rows (what `rapidllm
validate` reports after `rapidllm calibrate`). Leave-one-suite-out refits, with `rapidllm calibrate`'s
machinery (validate/calibrate.py: fit_all), the device of a suite without that suite's calibration rows,
then predicts all of the suite's rows: a suite whose rows never enter the fit (MoE, the secondary Megatron
tabulation, nanotron) scores as in-sample. Leave-one-device-out removes every calibration row of a device
and gives it the constants the transfer rule (validate/transfer.py) picks from the remaining devices, then
predicts all of its suites: `leave_device_out` applies the device's own microbenchmark tables where
published (the rule: nccl-tests for the network constant, the GEMM tables' ratio for compute),
`leave_device_out_strict` transfers all three as they are, `leave_device_out_tables` takes all three from the
device's own microbenchmark tables alone (no donor: what the kernels reach, without the software's share).
A user with a device that has no rows gets the strict number.

Every scheme's rows go through the same errors table as the validation stage (validate/metrics.py), so the
per-suite, per-group and overall MAPEs are comparable line by line (split `all`: every scored row); scope
`device` pools the entries of the suites in the overall MAPE by the device they run on.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from rapidllm.prediction import evaluate
from rapidllm.spec.experiment import expand_with_cases
from rapidllm.validate.calibrate import CONSTANTS, Entry, calibration_entries, fit_all, with_utilization
from rapidllm.validate.metrics import errors_table
from rapidllm.validate.suites import Suite, compare
from rapidllm.validate.transfer import donor, own_table_constants, with_own_tables

SCHEMES = ("in_sample", "leave_suite_out", "leave_device_out", "leave_device_out_strict", "leave_device_out_tables")
REPORT_COLUMNS = ["scheme", "scope", "name", "basis", "rows", "entries", "mape_pct", "max_error_pct", "constants"]


def suite_rows(suite: Suite, constants: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """compare() of every row of a suite, each device's constants replaced by constants[device] (a device
    not in the mapping keeps its hardware file's)."""
    out = []
    for row, case in expand_with_cases(suite.experiment):
        if row["status"] == "ok" and case is not None:
            u = constants.get(case.hardware.name)
            row = {**row, **evaluate(case if u is None else with_utilization(case, u))}
        out.append(row)
    return compare(suite, pd.DataFrame(out).drop(columns=["case_json"]))


def suite_devices(suite: Suite) -> set[str]:
    return {case.hardware.name for row, case in expand_with_cases(suite.experiment) if case is not None}


def _fit_all(entries: dict[str, list[Entry]], grid: int, iters: int) -> dict[str, np.ndarray]:
    return {d: np.array([fit[k] for k in CONSTANTS]) for d, fit in fit_all(entries, grid=grid, iters=iters).items()}


def transferred(device: str, fitted: Mapping[str, np.ndarray], strict: bool) -> tuple[np.ndarray, str]:
    """Constants the rule gives `device` from the other fitted devices, with the device's own microbenchmark
    tables applied unless strict. Returns them with a note of their origin."""
    source = donor(device, [d for d in fitted if d != device])
    if source is None:
        raise ValueError(f"leave-one-device-out: no other fitted device to transfer from for {device}")
    u, notes = (fitted[source].copy(), []) if strict else with_own_tables(device, source, fitted[source])
    return u, ", ".join([f"from {source}"] + notes)


def _describe(u: np.ndarray, note: str) -> str:
    return " ".join(f"{k} {v:.3f}" for k, v in zip(CONSTANTS, u)) + (f" ({note})" if note else "")


def _summary(scheme: str, rows: pd.DataFrame, constants: dict[str, str], device_of: dict[str, str]) -> list[dict]:
    """The errors table's suite, group, overall and all-suites MAPEs, plus scope `device`: every entry of the
    suites in the overall MAPE that run on that device (the issue's target is per device)."""
    table = errors_table(rows)
    table = table[(table.split == "all") & table.scope.isin(["suite", "group", "overall", "all_suites"])]
    paper = rows[rows.in_overall.astype(bool)]
    per_device = errors_table(paper.assign(group=paper.suite.map(device_of)))
    per_device = per_device[(per_device.split == "all") & (per_device.scope == "group")].assign(scope="device")
    return [{"scheme": scheme, "scope": r.scope, "name": r.name, "basis": r.basis, "rows": int(r.rows),
             "entries": int(r.entries), "mape_pct": round(float(r.mape_pct), 2),
             "max_error_pct": round(float(r.max_error_pct), 2),
             "constants": constants.get(r.name, "") if r.scope == "suite" else ""}
            for r in pd.concat([table, per_device], ignore_index=True).itertuples()]


def transfer_report(suites: list[Suite], grid: int = 5, iters: int = 120,
                    log: Callable[[str], None] = print) -> pd.DataFrame:
    """MAPE per suite, group and overall under each scheme of SCHEMES (module doc); deterministic."""
    entries = calibration_entries(suites)
    fitted = _fit_all(entries, grid, iters)
    log("in-sample constants: " + "; ".join(f"{d}: {_describe(u, '')}" for d, u in fitted.items()))
    devices = {s.name: suite_devices(s) for s in suites}
    device_of = {name: "+".join(sorted(d)) for name, d in devices.items()}
    in_sample = {s.name: suite_rows(s, fitted) for s in suites}
    notes = {s.name: "; ".join(_describe(fitted[d], "") for d in sorted(devices[s.name]) if d in fitted)
             for s in suites}
    out = _summary("in_sample", pd.concat(in_sample.values(), ignore_index=True), notes, device_of)

    frames, notes = [], {}
    for s in suites:
        kept = {d: [e for e in es if e.suite != s.name] for d, es in entries.items()}
        if all(len(kept[d]) == len(entries[d]) for d in entries):
            frames.append(in_sample[s.name])
            notes[s.name] = "no calibration rows: as in-sample"
            continue
        refit = _fit_all(kept, grid, iters)
        constants = {}
        for d in devices[s.name]:
            if d in refit:
                constants[d], note = refit[d], "refit without the suite"
            elif d in fitted:
                constants[d], note = transferred(d, refit, strict=False)
            else:
                continue
            notes[s.name] = _describe(constants[d], note)
        log(f"leave-suite-out {s.name}: {notes.get(s.name, '')}")
        frames.append(suite_rows(s, constants))
    out += _summary("leave_suite_out", pd.concat(frames, ignore_index=True), notes, device_of)

    for scheme in SCHEMES[2:]:
        frames, notes = [], {}
        for device in sorted(fitted):
            if scheme == "leave_device_out_tables":
                u, note = own_table_constants(device), "own GEMM, STREAM and nccl-tests tables alone"
                if u is None:
                    continue
            else:
                u, note = transferred(device, {d: v for d, v in fitted.items() if d != device},
                                      scheme == "leave_device_out_strict")
            log(f"{scheme} {device}: {_describe(u, note)}")
            for s in suites:
                if device in devices[s.name]:
                    frames.append(suite_rows(s, {device: u}))
                    notes[s.name] = _describe(u, note)
        if frames:
            out += _summary(scheme, pd.concat(frames, ignore_index=True), notes, device_of)
    return pd.DataFrame(out, columns=REPORT_COLUMNS)
