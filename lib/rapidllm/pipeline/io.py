"""Deterministic, atomic table I/O for the pipeline stages."""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from rapidllm.spec.case import Case, resolve_case


def _new_temp_beside(path: Path) -> str:
    """A new empty file in `path`'s folder, created 0666 less the umask as a plain file is. (mkstemp creates
    0600, and sweep CSVs came out owner-only; reading the umask to chmod means setting it, process-wide, and a
    file another thread created meanwhile would get mode 0666.)"""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}{path.suffix}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return str(tmp)
        except FileExistsError:
            continue


def atomic_write(path: str | Path, writer: Callable[[str], None]) -> None:
    """Write through a temporary file in the same folder and rename, so no partial output survives."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_beside(path)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_table(df: pd.DataFrame, path: str | Path) -> None:
    """Parquet (or CSV by suffix) without the index; same frame -> same bytes."""
    df = df.reset_index(drop=True)
    if str(path).endswith(".csv"):
        atomic_write(path, lambda tmp: df.to_csv(tmp, index=False, float_format="%.10g"))
    else:
        atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False, compression="zstd"))


def write_npz(arrays: dict[str, np.ndarray], path: str | Path) -> None:
    def writer(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    atomic_write(path, writer)


def shard_cases(cases_path: str | Path, shard: int) -> list[tuple[dict[str, Any], Case]]:
    """(row, resolved Case) for the valid cases of one shard, each case once: two reference rows can be one
    case (two measurements of one layout), and stage tables keyed by case_id must not hold it twice."""
    df = pd.read_parquet(cases_path)
    df = df[(df["shard"] == shard) & (df["status"] == "ok")].drop_duplicates("case_id")
    out = []
    for row in df.to_dict("records"):
        out.append((row, resolve_case(json.loads(row["case_json"]), f"case {row['case_id']}")))
    return out


def log_to(path: str | Path) -> None:
    """Send this process's stdout and stderr to a Snakemake job log (warnings and progress end up there)."""
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - lives for the whole short-lived job process
    sys.stdout = sys.stderr = handle
