"""Interrupted runs resume: kill a local sweep halfway (SIGINT, then SIGKILL), rerun, and only the missing or
incomplete shard outputs are computed; the summary equals an uninterrupted run byte for byte.

The sweep is config/experiments/small-sweep.yaml (72 cases, 4 shards) so the test stays short;
RAPIDLLM_RESUME_SWEEP=sweep-1k runs the same check on the 1,040-configuration sweep (about 10 minutes on
2 cores; the figures are in docs/hpc.md).
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

SMALL = "small-sweep"   # also what tests/test_slurm.py runs through SLURM
SWEEP = os.environ.get("RAPIDLLM_RESUME_SWEEP", SMALL)
STAGES = ("ops", "memory", "graphs", "sim")
EXT = {"ops": "parquet", "memory": "parquet", "graphs": "npz", "sim": "parquet"}
COPY = ("Snakefile", "environment.yml", "workflow", "config", "validation", "lib", "profiles")
TIMEOUT = 300 if SWEEP == SMALL else 1800
_LOCAL_RUNS: dict[str, Path] = {}


def scratch(base: Path, exp: str = SWEEP) -> Path:
    """A copy of the workflow (as tests/test_pipeline.py makes) whose config runs only `exp`."""
    base.mkdir(parents=True, exist_ok=True)
    for item in COPY:
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, base / item)
    (base / "run.yaml").write_text(yaml.safe_dump({"experiments": [exp], "suites": []}))
    return base


def snakemake_cmd(*extra: str, exp: str = SWEEP, profile: str = "default") -> list[str]:
    # The profile as users run it (rerun-incomplete on), on the 2 cores CI has.
    return [sys.executable, "-m", "snakemake", "--profile", f"profiles/{profile}", "--cores", "2",
            "--configfile", "run.yaml", *extra, "--", f"results/{exp}/summary.csv"]


def env_for(work: Path) -> dict:
    return {**os.environ, "RAPIDLLM_ROOT": str(work), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))}


def _run(work: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["timeout", "-k", "10", str(TIMEOUT), *snakemake_cmd(*extra)], cwd=work,
                          env=env_for(work), capture_output=True, text=True)


def local_run(tmp_path_factory, exp: str) -> Path:
    """An uninterrupted local run of `exp`, made once per test session (shared with tests/test_slurm.py)."""
    if exp not in _LOCAL_RUNS:
        work = scratch(tmp_path_factory.mktemp("local") / exp, exp)
        run = subprocess.run(["timeout", "-k", "10", str(TIMEOUT), *snakemake_cmd(exp=exp)], cwd=work,
                             env=env_for(work), capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        _LOCAL_RUNS[exp] = work
    return _LOCAL_RUNS[exp]


def _n_shards(work: Path) -> int:
    from rapidllm.spec.experiment import count_cases, load_experiment
    exp = load_experiment(work / "config" / "experiments" / f"{SWEEP}.yaml")
    return -(-count_cases(exp) // exp.shard_size)


def _shard_outputs(work: Path, n: int) -> list[Path]:
    return [work / "results" / SWEEP / stage / f"{i}.{EXT[stage]}" for stage in STAGES for i in range(n)]


def _incomplete(work: Path) -> set[Path]:
    """Outputs Snakemake marked as started but not finished (.snakemake/incomplete/<urlsafe b64 path>)."""
    marks = work / ".snakemake" / "incomplete"
    out = set()
    for mark in marks.rglob("*") if marks.exists() else []:
        if mark.is_file() and mark.name != "migration_underway":
            name = "".join(p.lstrip("@") for p in mark.relative_to(marks).parts)
            out.add((work / base64.urlsafe_b64decode(name).decode()).resolve())
    return out


def _kill_leftovers(work: Path) -> None:
    """SIGKILL any process still running in the scratch tree (a job that outlived its group), by PID."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if Path(os.readlink(proc / "cwd")).resolve() == work.resolve() and int(proc.name) != os.getpid():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def _interrupt_halfway(work: Path, outputs: list[Path]) -> int:
    """Start the run, SIGINT it once half the shard outputs exist, SIGKILL its process group 0.3 s later."""
    proc = subprocess.Popen(snakemake_cmd(), cwd=work, env=env_for(work), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT
    try:
        while sum(p.exists() for p in outputs) < len(outputs) // 2:
            assert proc.poll() is None, "the run ended before it was half done"
            assert time.monotonic() < deadline, "the run did not get half way in time"
            time.sleep(0.05)
        done = sum(p.exists() for p in outputs)
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        _kill_leftovers(work)
    return done


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return local_run(tmp_path_factory, SWEEP)


def test_interrupted_run_resumes_without_recomputing(reference: Path, tmp_path: Path) -> None:
    work = scratch(tmp_path / "interrupted")
    n = _n_shards(work)
    outputs = _shard_outputs(work, n)
    assert n >= 4
    _interrupt_halfway(work, outputs)

    summary = work / "results" / SWEEP / "summary.csv"
    assert not summary.exists()
    incomplete = {p for p in _incomplete(work) if p in {o.resolve() for o in outputs}}
    finished = {p: p.stat().st_mtime_ns for p in outputs if p.exists() and p.resolve() not in incomplete}
    missing = [p for p in outputs if not p.exists()]
    assert finished and (missing or incomplete), (len(finished), len(missing), len(incomplete))
    # A job killed mid-write leaves its output behind: stand in for a non-atomic writer by leaving a torn
    # file at every output Snakemake marked incomplete. The rerun must redo it, not trust it.
    for path in incomplete:
        path.write_bytes(b"torn")

    # A SIGKILLed Snakemake leaves its lock behind: unlock (the documented recipe), then rerun.
    unlock = _run(work, "--unlock")
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    run = _run(work)
    assert run.returncode == 0, run.stderr[-3000:]
    # What the rerun ran: exactly the shard steps that did not finish, nothing that did.
    log = run.stdout + run.stderr
    planned = {(work / p).resolve() for p in re.findall(r"^\s+output: (\S+?),?$", log, flags=re.M)}
    assert not planned & {p.resolve() for p in finished}, "a finished shard was run again"
    assert {p.resolve() for p in missing} | incomplete <= planned, log[-3000:]
    print(f"{SWEEP}: {n} shards, killed with {len(finished)} shard outputs finished, {len(missing)} missing, "
          f"{len(incomplete)} incomplete; rerun ran {len(planned)} jobs")
    redone = [str(p.relative_to(work)) for p, mtime in finished.items() if p.stat().st_mtime_ns != mtime]
    assert redone == [], "finished shards were recomputed"
    for path in incomplete:
        assert path.read_bytes() != b"torn"
    assert not _incomplete(work)
    for name in ("summary.csv", "summary.parquet"):
        assert (work / "results" / SWEEP / name).read_bytes() == \
               (reference / "results" / SWEEP / name).read_bytes(), name
    for path in outputs:
        assert path.read_bytes() == (reference / path.relative_to(work)).read_bytes(), path
