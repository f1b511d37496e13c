"""Every input of tests/bad_input_corpus.py is refused cleanly: exit 2, nothing on stdout, at most three
short lines on stderr containing the expected fragment, no traceback, no output file, and within the
harness's time limit (pytest-timeout). Most run in-process through `rapidllm.cli.main`; a few run as real
subprocesses of `python -m rapidllm.cli` to check the process-level contract.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bad_input_corpus import CORPUS, Bad
from conftest import ROOT
from rapidllm.cli import main

MAX_LINES = 3
MAX_LINE_CHARS = 600
CASES = [pytest.param(bad, id=f"{command}-{bad.id}") for command, bads in CORPUS.items() for bad in bads]


def _edited_suite(source: str, edit: dict[str, Any], drop: tuple[str, ...]) -> str:
    spec = yaml.safe_load((ROOT / source).read_text())
    for key in drop:
        spec.pop(key, None)
    spec.update(edit)
    return yaml.safe_dump(spec)


def _materialize(bad: Bad, tmp: Path) -> list[str]:
    """Write the case's files into tmp and return its argv with {tmp} filled in."""
    for name, content in bad.files.items():
        path = tmp / name
        if content == ("fifo",):
            os.mkfifo(path)
        elif isinstance(content, tuple) and content[0] == "edit-suite":
            path.write_text(_edited_suite(*content[1:]))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(yaml.safe_dump(content))
    return [a.replace("{tmp}", str(tmp)) for a in bad.argv]


def _check(bad: Bad, code: int, out: str, err: str, tmp: Path, before: set[Path]) -> None:
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}; stderr: {err[-2000:]}"
    assert out == "", f"stdout not empty: {out[:500]}"
    assert "Traceback" not in err
    assert 1 <= len(lines) <= MAX_LINES, err
    assert all(len(line) <= MAX_LINE_CHARS for line in lines), [len(x) for x in lines]
    assert bad.expect in err, f"{bad.expect!r} not in {err!r}"
    assert set(tmp.rglob("*")) == before, "an output file or folder was written"


def test_corpus_size_and_classes() -> None:
    """>= 120 cases over the commands, every class of issue 20 represented several times, unique ids."""
    bads = [b for bs in CORPUS.values() for b in bs]
    assert len(bads) >= 120
    ids = [f"{c}-{b.id}" for c, bs in CORPUS.items() for b in bs]
    assert len(ids) == len(set(ids))
    for kind in ("quantity", "crash", "work", "message", "file"):
        assert sum(b.kind == kind for b in bads) >= 5, kind


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", CASES)
def test_refused_in_process(bad: Bad, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = _materialize(bad, tmp_path)
    before = set(tmp_path.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as exc:            # argparse's own refusals
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    _check(bad, code, captured.out, captured.err, tmp_path, before)


SUBPROCESS = ["predict-alias-bomb-name-field", "predict-not-utf8", "sweep-cross-key-typo",
              "collective-ranks-1e8", "gemm-m-1e12", "validate-measured-does-not-parse"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", SUBPROCESS)
def test_refused_as_a_process(name: str, tmp_path: Path) -> None:
    bad = next(b for c, bs in CORPUS.items() for b in bs if f"{c}-{b.id}" == name)
    argv = _materialize(bad, tmp_path)
    before = set(tmp_path.rglob("*"))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", *argv], capture_output=True, text=True, timeout=100)
    _check(bad, run.returncode, run.stdout, run.stderr, tmp_path, before)
