"""What every command shares: its flags checked by the same schemas and unit parser as spec files, JSON
that is always JSON (no NaN or Infinity), and output paths checked before any work is done.

Every failure here is a SpecError, which `rapidllm.cli.main` prints as one line and turns into exit 2.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rapidllm.spec.errors import SpecError
from rapidllm.spec.schema import json_safe, validate


def plain_number(value: float) -> str:
    """A number for a text table: 5,389,110 and 0.9093, never 5.38911e+06 (whole units at or above 1,000,
    four significant digits below)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def print_json(obj: Any, **kwargs: Any) -> None:
    """Print `obj` as strict JSON (allow_nan=False: a non-finite number left over would be a bug)."""
    print(json.dumps(json_safe(obj), allow_nan=False, **kwargs))


def check_flags(kind: str, flags: dict[str, Any], command: str) -> None:
    """Validate a command's flags (None = not given) against workflow/schemas/{kind}.schema.yaml, the same
    validator, formats and bounds as the spec files: 'rapidllm gemm: --m: 0 is out of range; ...'."""
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        validate(given, kind, f"rapidllm {command}")
    except SpecError as err:
        prefix = f"rapidllm {command}: "
        raise SpecError([f"{prefix}--{line[len(prefix):]}" if line.startswith(prefix) and
                         not line.startswith(prefix + "(") else line for line in err.lines]) from None


def output_path(path: str | Path, what: str) -> Path:
    """`path` as an output target, refused before any work if it is a directory or cannot be created or
    written (results are then written atomically, so a failure leaves no partial file)."""
    out = Path(path)
    if out.is_dir():
        raise SpecError(f"{out}: {what} is a directory; give a file path")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        raise SpecError(f"{out}: {what}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"{out}: {what}: {parent} is not writable")
    return out


def write_output(writer: Callable[[Path], None], path: Path, what: str) -> None:
    """Run `writer(path)`; an OS error (disk full, permissions changed) becomes one SpecError line."""
    try:
        writer(path)
    except OSError as exc:
        raise SpecError(f"{path}: cannot write the {what}: {exc.strerror or exc}") from None


def output_dir(path: str | Path, what: str) -> Path:
    """`path` as an output folder: refused before any work if it is a file or cannot be created."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise SpecError(f"{out}: {what} is a file; give a folder")
    output_path(out / "_", what)
    return out
