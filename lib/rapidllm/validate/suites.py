"""Validation suites: how each row of a published reference table becomes a case.

A suite YAML names its reference CSV, the scored metrics (each a predicted key and the measured column or
an arithmetic expression over columns, times a scale into SI), a base case, and how columns map onto case
keys (`columns`: reference column -> dotted case key, optional value map), `derived` keys computed from
columns with + - * / // arithmetic, and `rules` that set keys on rows matching given column values.
`skip` rules list rows that cannot be expressed, with the reason: rows are never dropped silently.

One reference row is one case; a row with several metrics (NIM: TTFT, ITL, throughput) gives one scored
entry per metric. `calibration_rows` (row indices) declare the calibration subset; every other row is
held out.

Each metric declares the basis it is scored on (`basis`): `full` (this project's accounting: every metric
a reference publishes), `paper` (the one quantity the RAPID-LLM paper scores per case, e.g. total request
latency for the NIM rows of its Fig. 6, so that group MAPEs compare with the paper's like for like) or
`both` (the default: a single-metric suite scores the same entry on both bases). Calibration fits the
full basis only.

A metric with `inverse_of` is a rate of the source's own work count, e.g. MFU = FLOPs per step / (step time
x GPUs x peak) with the FLOPs counted by the source's formula (Megatron's). Predicted as measured x measured
time / predicted time, both sides use the source's work count, so the error is the timing error alone and
not a difference between FLOP-counting conventions.
"""
from __future__ import annotations

import ast
import io
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import Experiment, set_dotted
from rapidllm.spec.named import NAMED_KINDS, is_spec_path
from rapidllm.spec.paths import display, project_root
from rapidllm.spec.schema import load_yaml, read_text, short, validate

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv}
ROW_COLUMNS = ["suite", "group", "in_overall", "row", "label", "metric", "basis", "calibration", "measured",
               "predicted", "status", "reason", "error_pct"]


@dataclass(frozen=True)
class MetricSpec:
    metric: str          # prediction key (step_time_s, ttft_s, ...)
    measured: str        # reference column, or an expression over columns
    scale: float = 1.0   # multiplies the measurement into the metric's SI unit
    basis: str = "both"  # scored on the full basis, the paper's basis, or both (see module doc)
    inverse_of: tuple[str, str] | None = None   # (time metric, its measured column/expression), see below

    @property
    def full_basis(self) -> bool:
        return self.basis != "paper"


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    reference: Path
    metrics: tuple[MetricSpec, ...]
    experiment: Experiment
    skipped: list[tuple[int, str]]
    rows: int = 0                               # rows in the reference table
    group: str = ""
    in_overall: bool = True
    calibration_rows: tuple[int, ...] = ()
    stratify_by: tuple[str, ...] = ()
    strata: dict[int, str] = field(default_factory=dict)   # row -> stratum label
    paper: dict = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.metrics[0].metric

    @property
    def measured(self) -> str:
        return self.metrics[0].measured


def evaluate(expr: str, row: dict[str, Any], where: str) -> Any:
    """Arithmetic over reference columns (names, col("any name"), numbers, + - * / //), nothing else."""
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in row:
            return row[node.id]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "col"
                and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value in row):
            return row[node.args[0].value]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise SpecError(f"{where}: {expr!r}: only column names, col(\"name\"), numbers and + - * / // are allowed")
    value = ev(ast.parse(expr, mode="eval"))
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _native(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def matches(when: dict, row: dict[str, Any]) -> bool:
    """A rule's `when`: every column equals the value (as text), or is one of a list of values."""
    def one(column: str, want: Any) -> bool:
        have = str(_native(row.get(column)))
        return have in {str(w) for w in want} if isinstance(want, list) else have == str(want)
    return all(one(c, v) for c, v in when.items())


def row_to_case(spec: dict, row: dict[str, Any], where: str) -> dict:
    case: dict = {}
    for column, rule in spec.get("columns", {}).items():
        value = _native(row[column])
        mapping = rule.get("map")
        if mapping is not None:
            if str(value) not in mapping:
                raise SpecError(f"{where}: column {column}: value {value!r} has no entry in the suite's map")
            value = mapping[str(value)]
        set_dotted(case, rule["to"], value)
    for key, expr in spec.get("derived", {}).items():
        set_dotted(case, key, evaluate(expr, row, where))
    for rule in spec.get("rules", []):
        if matches(rule["when"], row):
            for key, value in rule["set"].items():
                set_dotted(case, key, value)
    return case


def metric_specs(spec: dict) -> tuple[MetricSpec, ...]:
    if "metrics" in spec:
        return tuple(MetricSpec(m["metric"], m["measured"], float(m.get("scale", 1.0)), m.get("basis", "both"),
                                (m["inverse_of"]["metric"], m["inverse_of"]["measured"]) if "inverse_of" in m else None)
                     for m in spec["metrics"])
    return (MetricSpec(spec["metric"], spec["measured"], float(spec.get("measured_scale", 1.0))),)


def measurement(m: MetricSpec, row: dict[str, Any], where: str) -> float:
    value = row[m.measured] if m.measured in row else evaluate(m.measured, row, where)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value * m.scale


def read_reference(path: Path, source: str, name: str) -> pd.DataFrame:
    """The suite's reference CSV, or one SpecError line saying why it cannot be read."""
    root = project_root().resolve()
    if root not in path.resolve().parents:
        raise SpecError.at(source, "reference", f"{name!r} is outside the project; give a path under {root.name}/")
    text = read_text(path, "reference table", limit=64 * 2**20)
    try:
        table = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as err:   # EmptyDataError, ParserError
        raise SpecError.at(source, "reference", f"{name} is not a CSV table ({str(err).splitlines()[0]})") from None
    if table.empty:
        raise SpecError.at(source, "reference", f"{name} has no rows")
    return table


def _names(expr: str, where: str) -> set[str]:
    """Column names an expression reads (a plain column name is itself)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise SpecError(f"{where}: {short(expr)} does not parse; allowed: column names, col(\"name\"), numbers "
                        "and + - * / //") from None
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id != "col"}
    names |= {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
              and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}
    return names


def check_columns(spec: dict, table: pd.DataFrame, source: str) -> None:
    """Every column the suite reads exists in its reference table, and every expression parses: otherwise
    each row would fail on its own and the suite would score nothing."""
    have = set(table.columns)
    used: list[tuple[str, set[str]]] = [(f"columns.{c}", {c}) for c in spec.get("columns", {})]
    used += [(f"derived.{k}", _names(e, f"{source}: derived.{k}")) for k, e in spec.get("derived", {}).items()]
    metrics = spec.get("metrics", [{"measured": spec.get("measured", "")}] if "measured" in spec else [])
    for i, m in enumerate(metrics):
        key = f"metrics.{i}.measured" if "metrics" in spec else "measured"
        used.append((key, {m["measured"]} if m["measured"] in have else _names(m["measured"], f"{source}: {key}")))
        if "inverse_of" in m:
            inv = m["inverse_of"]["measured"]
            used.append((f"{key[:-9]}.inverse_of.measured",
                         {inv} if inv in have else _names(inv, f"{source}: {key}")))
    used += [(k, set(spec.get(k, []))) for k in ("label_columns", "stratify_by")]
    for key, names in used:
        missing = sorted(names - have)
        if missing:
            raise SpecError.at(source, key, f"column {missing[0]!r} is not in {spec['reference']}; columns: "
                               f"{', '.join(map(str, table.columns))}")


def load_suite(path: str | Path) -> Suite:
    source = display(path)
    spec = load_yaml(Path(path))
    validate(spec, "suite", source)
    metrics = metric_specs(spec)
    reference = project_root() / spec["reference"]
    table = read_reference(reference, source, spec["reference"])
    check_columns(spec, table, source)
    calibration = set(spec.get("calibration_rows", []))
    if calibration - set(range(len(table))):
        raise SpecError(f"{source}: calibration_rows {sorted(calibration - set(range(len(table))))} are not rows of {spec['reference']}")
    stratify = tuple(spec.get("stratify_by", []))
    cases, skipped, strata = [], [], {}
    for i, row in enumerate(table.to_dict("records")):
        where = f"{source} row {i}"
        strata[i] = " ".join(str(_native(row.get(c))) for c in stratify)
        reason = next((r["reason"] for r in spec.get("skip", []) if matches(r["when"], row)), None)
        if reason is not None:
            skipped.append((i, reason))
            continue
        try:
            measured = {m.metric: measurement(m, row, where) for m in metrics}
            measured |= {m.inverse_of[0]: measurement(MetricSpec(m.inverse_of[0], m.inverse_of[1]), row, where)
                         for m in metrics if m.inverse_of}
        except (SpecError, KeyError, ZeroDivisionError) as err:
            skipped.append((i, f"measurement: {err}"))
            continue
        if all(math.isnan(v) for v in measured.values()):
            skipped.append((i, "no measured " + " / ".join(m.measured for m in metrics)))
            continue
        try:
            case = row_to_case(spec, row, where)
        except (SpecError, KeyError) as err:
            skipped.append((i, str(err)))
            continue
        label = " ".join(str(_native(row[c])) for c in spec.get("label_columns", [])) or f"row {i}"
        meta = {"row": i, "calibration": i in calibration, **{f"measured_{k}": v for k, v in measured.items()}}
        cases.append({**case, "label": label, "meta": meta})
    _no_spec_paths(spec["base"], cases, source)
    exp = Experiment(name=spec["name"], source=source, base=spec["base"], cross={}, cases=cases,
                     factorize=None, shard_size=spec.get("shard_size", 64))
    return Suite(name=spec["name"], source=source, reference=reference, metrics=metrics, experiment=exp,
                 skipped=skipped, rows=len(table), group=spec.get("group", spec["name"]),
                 in_overall=bool(spec.get("in_overall", True)), calibration_rows=tuple(sorted(calibration)),
                 stratify_by=stratify, strata=strata, paper=dict(spec.get("paper", {})))


def _no_spec_paths(base: dict, cases: list[dict], source: str) -> None:
    """Refuse a model, hardware or network named by path in a suite's base or rows, in one line at load: a
    suite validates and calibrates the project's own specs by config name (`rapidllm calibrate` writes fitted
    constants into config/hardware/NAME.yaml). Each row was invalid with a message naming only a search spec
    and a mapping as the places a path is not read (review 17)."""
    named = [(f"base.{k}", base.get(k)) for k in NAMED_KINDS]
    named += [(f"row {c['meta']['row']}: {k}", c.get(k)) for c in cases for k in NAMED_KINDS]
    key, value = next(((k, v) for k, v in named if is_spec_path(v)), (None, None))
    if key is not None:
        raise SpecError.at(source, key, f"{value!r} is a path; a suite names its model, hardware and network by "
                           "config name (config/<kind>/NAME.yaml) or inline: its rows validate and calibrate the "
                           "project's own specs")


def compare(suite: Suite, summary: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured per reference row and metric (invalid or infeasible rows keep their reason;
    skipped rows are listed with theirs)."""
    frames = []
    for m in suite.metrics:
        df = summary
        if m.inverse_of:
            key = m.inverse_of[0]
            predicted = (df[f"meta_measured_{m.metric}"] * df[f"meta_measured_{key}"] / df[key].astype(float)
                         if key in df else float("nan"))
        else:
            predicted = df[m.metric].astype(float) if m.metric in df else float("nan")
        frames.append(pd.DataFrame({
            "suite": suite.name, "group": suite.group, "in_overall": suite.in_overall,
            "row": df["meta_row"].astype(int), "label": df["label"], "metric": m.metric, "basis": m.basis,
            "calibration": df["meta_calibration"].astype(bool),
            "measured": df[f"meta_measured_{m.metric}"].astype(float),
            "predicted": predicted,
            "status": df["status"], "reason": df["reason"].fillna(""),
        }))
    out = pd.concat(frames, ignore_index=True)
    out = out[~out.measured.isna()]
    out["error_pct"] = 100.0 * (out.predicted - out.measured) / out.measured
    skipped = pd.DataFrame([{"suite": suite.name, "group": suite.group, "in_overall": suite.in_overall, "row": r,
                             "label": f"row {r}", "metric": suite.metric, "basis": suite.metrics[0].basis,
                             "calibration": False,
                             "measured": float("nan"), "predicted": float("nan"), "status": "skipped",
                             "reason": why, "error_pct": float("nan")} for r, why in suite.skipped],
                           columns=ROW_COLUMNS)
    out = pd.concat([out[ROW_COLUMNS], skipped], ignore_index=True) if len(skipped) else out[ROW_COLUMNS]
    order = {m.metric: k for k, m in enumerate(suite.metrics)}
    out = out.assign(_m=out.metric.map(order)).sort_values(["row", "_m"], kind="stable").drop(columns="_m")
    return out.reset_index(drop=True)
