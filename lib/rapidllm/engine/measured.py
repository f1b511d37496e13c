"""Measured-timing replay and what-if knobs (PrismLLM's idea: measure a few GPUs, replay the rest).

A CSV with columns `name,time_s` (optional `section`, `phase`) gives measured seconds per launch of named
operators, e.g. from a PyTorch profiler run on one node; matching rows of the priced table take them and
the full-scale job is replayed with them. A what-if edits one operator, or every operator of one kind
(`gemm`, `attention`, `pointwise`): `NAME=x0.5` multiplies its time by 0.5 (x2 makes it twice as slow),
`NAME=/2` divides it by 2 (twice as fast), `NAME=1.5ms` sets it.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rapidllm.spec.errors import SpecError
from rapidllm.spec.schema import close_names, read_text
from rapidllm.units import UnitError, parse_quantity

if TYPE_CHECKING:
    import pandas as pd


def load_measured(path: str | Path) -> pd.DataFrame:
    import pandas as pd

    try:
        text = read_text(Path(path), "measured timings table", limit=64 * 2**20)
    except SpecError as err:
        raise SpecError(f"cannot read measured timings: {err}") from None
    try:
        df = pd.read_csv(io.StringIO(text))
    except ValueError as e:                # pandas' ParserError and EmptyDataError
        raise SpecError(f"{path}: cannot read measured timings ({str(e).splitlines()[0]})") from None
    if not {"name", "time_s"} <= set(df.columns):
        raise SpecError(f"{path}: measured timings need columns name,time_s (optional section, phase)")
    times = pd.to_numeric(df.time_s, errors="coerce")
    bad = df.index[~(times.notna() & np.isfinite(times) & (times >= 0))]
    if len(bad):
        raise SpecError(f"{path}: row {int(bad[0])}: time_s {df.time_s[bad[0]]} is not a finite time >= 0 in seconds")
    df.attrs["source"] = str(path)
    return df


def apply_measured(ops: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Override time_s of operators named in `measured` (matching section/phase when given). A row that
    matches no operator is refused, as a what-if's name is: a misspelt name (`atn`) changed nothing and
    the prediction printed as the measured replay."""
    out = ops.copy()
    for i, row in enumerate(measured.itertuples(index=False)):
        sel = out.name == row.name
        where = []
        for col in ("section", "phase"):
            val = getattr(row, col, None)
            if isinstance(val, str) and val:
                sel &= out[col] == val
                where.append(f"{col} {val!r}")
        if not sel.any():
            source = measured.attrs.get("source", "measured timings")
            names = sorted(set(out.name))
            meant = close_names(str(row.name), names)
            known = ", ".join(names)
            place = f" in {', '.join(where)}" if where else ""
            raise SpecError(f"{source}: row {i}: no operator named {row.name!r}{place}"
                            + (f" (did you mean {' or '.join(meant[:2])}?)" if meant else "")
                            + f"; known: {known if len(known) <= 300 else known[:297] + '...'}")
        out.loc[sel, "time_s"] = float(row.time_s)
    return out


# What-if factors (docs/limits.md): a million times faster or slower is past any hardware question.
MIN_FACTOR, MAX_FACTOR = 1e-6, 1e6


def parse_what_if(spec: str) -> tuple[str, str, float]:
    """'NAME=x2' -> (NAME, 'scale', 2); 'NAME=/2' -> (NAME, 'scale', 0.5); 'NAME=3 ms' -> (NAME, 'set', 0.003)."""
    if "=" not in spec:
        raise SpecError(f"--what-if {spec!r}: use NAME=xFACTOR, NAME=/FACTOR or NAME=TIME (e.g. mlp_up=/2)")
    name, value = (s.strip() for s in spec.split("=", 1))
    if value[:1] in ("x", "/"):
        try:
            factor = float(value[1:])
        except ValueError:
            factor = math.nan
        if not MIN_FACTOR <= factor <= MAX_FACTOR:        # NaN fails both; x1e30 gave a 1e29-second step
            raise SpecError(f"--what-if {spec!r}: {value[1:]!r} is not a factor; allowed: a finite number "
                            f"from {MIN_FACTOR:g} to {MAX_FACTOR:g}")
        return name, "scale", factor if value[0] == "x" else 1.0 / factor
    try:
        return name, "set", parse_quantity(value, "time")
    except UnitError as err:
        raise SpecError(f"--what-if {spec!r}: {err}") from None


def apply_what_if(ops: pd.DataFrame, specs: Sequence[str]) -> pd.DataFrame:
    """`ops` with each what-if applied in turn. NAME is an operator (`qkv`, `mlp_up_dgrad`) or, where no
    operator has that name, an operator kind of the table's `kind` column (`gemm`: every GEMM, forward and
    backward; `attention`; `pointwise`), so "all GEMMs twice as fast" is one flag, not 15 (user trial 3). A
    time for a kind sets each of its operators to it, whatever their shapes (docs/engine.md: `pointwise=0 ms`
    removes a kind; a factor changes its speed)."""
    out = ops.copy()
    for spec in specs:
        name, how, val = parse_what_if(spec)
        sel = out.name == name
        if not sel.any():
            sel = out.kind == name
        if not sel.any():
            raise SpecError(f"--what-if: no operator or operator kind named {name!r}; known operators: "
                            f"{', '.join(sorted(set(out.name)))}; kinds: {', '.join(sorted(set(out.kind)))}")
        out.loc[sel, "time_s"] = out.loc[sel, "time_s"] * val if how == "scale" else val
    return out


def adjuster(measured: str | Path | None = None, what_if: Sequence[str] = ()) -> Callable[[pd.DataFrame], pd.DataFrame] | None:
    """One function applying the measured CSV, then the what-ifs (None when there is nothing to apply)."""
    table = load_measured(measured) if measured else None
    if table is None and not what_if:
        return None
    for spec in what_if:
        parse_what_if(spec)

    def adjust(ops: pd.DataFrame) -> pd.DataFrame:
        out = apply_measured(ops, table) if table is not None else ops
        return apply_what_if(out, what_if) if what_if else out
    return adjust
