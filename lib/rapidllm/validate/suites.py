"""Validation suites: how each row of a published reference table becomes a case.

A suite YAML names its reference CSV, the predicted metric and the measured column, a base case, and
how columns map onto case keys (`columns`: reference column -> dotted case key, optional value map),
`derived` keys computed from columns with + - * / // arithmetic, and `rules` that set keys on rows
matching given column values. Rows that cannot be expressed are listed with the reason, never dropped.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import Experiment, set_dotted
from rapidllm.spec.paths import display, project_root
from rapidllm.spec.schema import load_yaml, validate

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv}


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    reference: Path
    metric: str
    measured: str
    measured_scale: float
    experiment: Experiment
    skipped: list[tuple[int, str]]


def evaluate(expr: str, row: dict[str, Any], where: str) -> Any:
    """Arithmetic over reference columns (names, numbers, + - * / //), nothing else."""
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in row:
            return row[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise SpecError(f"{where}: {expr!r}: only column names, numbers and + - * / // are allowed")
    value = ev(ast.parse(expr, mode="eval"))
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _native(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def row_to_case(spec: dict, row: dict[str, Any], where: str) -> dict:
    case: dict = {}
    for column, rule in spec.get("columns", {}).items():
        value = row[column]
        mapping = rule.get("map")
        if mapping is not None:
            if str(value) not in mapping:
                raise SpecError(f"{where}: column {column}: value {value!r} has no entry in the suite's map")
            value = mapping[str(value)]
        set_dotted(case, rule["to"], _native(value))
    for key, expr in spec.get("derived", {}).items():
        set_dotted(case, key, evaluate(expr, row, where))
    for rule in spec.get("rules", []):
        if all(str(row.get(c)) == str(v) for c, v in rule["when"].items()):
            for key, value in rule["set"].items():
                set_dotted(case, key, value)
    return case


def load_suite(path: str | Path) -> Suite:
    source = display(path)
    spec = load_yaml(Path(path))
    validate(spec, "suite", source)
    reference = project_root() / spec["reference"]
    table = pd.read_csv(reference, encoding="utf-8-sig")
    cases, skipped = [], []
    calibration = set(spec.get("calibration_rows", []))
    for i, row in enumerate(table.to_dict("records")):
        where = f"{source} row {i}"
        measured = row.get(spec["measured"])
        if pd.isna(measured):
            skipped.append((i, f"no measured {spec['measured']}"))
            continue
        try:
            case = row_to_case(spec, row, where)
        except (SpecError, KeyError) as err:
            skipped.append((i, str(err)))
            continue
        label = " ".join(str(row[c]) for c in spec.get("label_columns", [])) or f"row {i}"
        meta = {"row": i, "measured": float(measured) * spec.get("measured_scale", 1.0),
                "calibration": i in calibration}
        cases.append({**case, "label": label, "meta": meta})
    exp = Experiment(name=spec["name"], source=source, base=spec["base"], cross={}, cases=cases,
                     factorize=None, shard_size=spec.get("shard_size", 64))
    return Suite(name=spec["name"], source=source, reference=reference, metric=spec["metric"],
                 measured=spec["measured"], measured_scale=spec.get("measured_scale", 1.0), experiment=exp,
                 skipped=skipped)


def compare(suite: Suite, summary: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured per reference row (invalid or infeasible rows keep their reason)."""
    df = summary.copy()
    out = pd.DataFrame({
        "suite": suite.name, "row": df["meta_row"].astype(int), "label": df["label"],
        "calibration": df["meta_calibration"].astype(bool), "measured": df["meta_measured"].astype(float),
        "predicted": df[suite.metric].astype(float) if suite.metric in df else float("nan"),
        "status": df["status"], "reason": df["reason"],
    })
    out["error_pct"] = 100.0 * (out.predicted - out.measured) / out.measured
    skipped = pd.DataFrame([{"suite": suite.name, "row": r, "label": f"row {r}", "calibration": False,
                             "measured": float("nan"), "predicted": float("nan"), "status": "skipped",
                             "reason": why, "error_pct": float("nan")} for r, why in suite.skipped])
    return pd.concat([out, skipped], ignore_index=True).sort_values("row").reset_index(drop=True) if len(skipped) else out.sort_values("row").reset_index(drop=True)
