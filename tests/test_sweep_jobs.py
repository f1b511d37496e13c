"""`sweep(..., jobs=N)` / `rapidllm sweep --jobs N`: worker processes change how long a sweep takes, never
its table. The same experiment swept serially and with 2 and 3 workers (different chunk-to-worker
assignments) must give the same CSV byte for byte, invalid and infeasible rows included; an interrupted
parallel sweep writes nothing and leaves no worker running."""
from __future__ import annotations

import io
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from rapidllm import prediction
from rapidllm.cli import main
from rapidllm.prediction import resolve_jobs, sweep
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import load_experiment, raw_cases

# Every layout of 16 GPUs for two small models, two micro-batch sizes: ok rows, infeasible ones
# (Llama-3.1-70B on few model-parallel GPUs) and invalid ones (a global batch of 24 that dp 16 cannot split).
EXPERIMENT = {
    "name": "jobs-determinism",
    "base": {"hardware": "a100-sxm4-80gb", "network": "superpod-hdr", "precision": "bf16",
             "workload": {"mode": "training", "seq_len": 2048, "global_batch": 24, "micro_batch": 1},
             "parallelism": {"sp": True, "zero": 1, "recompute": "selective", "schedule": "1f1b"}},
    "factorize": {"gpus": 16, "axes": ["dp", "tp", "pp"]},
    "cross": {"model": ["llama3.1-8b", "llama3.1-70b"], "workload.micro_batch": [1, 2]},
    "shard_size": 8,
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jobs") / "jobs-determinism.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def serial_csv(experiment: Path) -> str:
    return sweep(experiment).to_csv(index=False)


def test_experiment_covers_every_row_kind(serial_csv: str) -> None:
    import pandas as pd

    assert set(pd.read_csv(io.StringIO(serial_csv)).status) == {"ok", "infeasible", "invalid"}


@pytest.mark.parametrize("jobs", [2, 3])
def test_parallel_sweep_is_byte_identical(experiment: Path, serial_csv: str, jobs: int) -> None:
    assert sweep(experiment, jobs=jobs).to_csv(index=False) == serial_csv


def test_parallel_inference_sweep_is_byte_identical() -> None:
    path = Path("config/experiments/optimus-cost-inference.yaml")
    assert sweep(path, jobs=2).to_csv(index=False) == sweep(path).to_csv(index=False)


def test_spawned_workers_give_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fork is missing (Windows, macOS by default) the rows travel to spawned workers pickled."""
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    path = Path("config/experiments/optimus-cost-inference.yaml")
    assert sweep(path, jobs=2).to_csv(index=False) == sweep(path).to_csv(index=False)


def test_units_keep_layouts_and_families_together(experiment: Path) -> None:
    raws = list(raw_cases(load_experiment(experiment)))
    units, starts = prediction._chunks(prediction._raw_groups(raws), 2)
    assert sorted(i for u in units for i in u) == list(range(len(raws)))     # every row exactly once
    layout = [{k: raw["case"]["parallelism"][k] for k in ("dp", "tp", "pp")} for _, raw in raws]
    owner: dict[tuple, int] = {}
    for n, unit in enumerate(units):
        for i in unit:
            assert owner.setdefault(tuple(layout[i].values()), n) == n   # a layout's models and variants share one
    tps = [layout[u[0]]["tp"] for u in units]
    assert all(t not in tps[:k] for k, t in enumerate(tps) if k and t != tps[k - 1])   # a tp family is one run
    assert starts[0] == 0 and starts[-1] == len(units) and len(starts) == 3
    assert 0 < starts[1] < len(units) and tps[starts[1]] != tps[starts[1] - 1]      # cut between families


def test_claims_take_own_run_first_then_steal_from_the_back() -> None:
    import multiprocessing

    shares = multiprocessing.Array("l", [0, 2, 2, 5])      # worker 0 owns units 0-1, worker 1 units 2-4
    assert [prediction._claim(shares, 0) for _ in range(4)] == [0, 1, 4, 3]
    assert [prediction._claim(shares, 1) for _ in range(2)] == [2, None]


def test_jobs_values() -> None:
    assert resolve_jobs(3) == 3
    assert resolve_jobs(0) == len(os.sched_getaffinity(0))
    assert resolve_jobs(768) == 768      # a two-socket EPYC 9965's logical CPUs, what jobs=0 gives there
    with pytest.raises(SpecError, match="jobs: -1 is not allowed"):
        resolve_jobs(-1)
    with pytest.raises(SpecError, match="jobs: 100000 is not allowed; allowed: an integer 1 to 1024"):
        resolve_jobs(100000)            # 100,000 forked workers on a 2-core machine


def test_cli_rejects_absurd_jobs(experiment: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["sweep", str(experiment), "--jobs", "100000", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rapidllm sweep: --jobs: 100000 is not allowed; allowed: an integer 1 to 1024")


def test_cli_rejects_negative_jobs(experiment: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["sweep", str(experiment), "--jobs", "-2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rapidllm sweep: --jobs: -2 is not allowed") and "\n" not in err


_PRESSED = Path()      # the flag file that makes all workers' chunks press Ctrl-C once (set by the test)


def _interrupt_parent(indices: list[int]) -> list:
    """A worker's chunk that would run for a long time; the first of them presses Ctrl-C in the parent
    once (the flag file is created by exactly one worker), as one Ctrl-C at a terminal would."""
    try:
        os.close(os.open(_PRESSED, os.O_CREAT | os.O_EXCL))
        os.kill(os.getppid(), signal.SIGINT)
    except FileExistsError:
        pass
    time.sleep(60)
    return []


def test_interrupted_parallel_sweep_writes_nothing(experiment: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("the patched chunk function reaches the workers only through fork")
    monkeypatch.setattr(prediction, "_run_chunk", _interrupt_parent)
    flags = tmp_path.parent / f"{tmp_path.name}-pressed"      # outside tmp_path, which must stay empty
    flags.mkdir()
    monkeypatch.setitem(globals(), "_PRESSED", flags / "ctrl-c")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    out = tmp_path / "sweep.csv"
    try:
        t0 = time.perf_counter()
        assert main(["sweep", str(experiment), "--jobs", "2", "--out", str(out), "--quiet"]) == 130
    finally:
        signal.signal(signal.SIGINT, old)
    assert time.perf_counter() - t0 < 30                                # the sleeping workers were killed
    assert not out.exists() and not list(tmp_path.iterdir())
    assert multiprocessing.active_children() == []
    assert "sweep interrupted: no output file written" in capsys.readouterr().err


def test_a_ctrl_c_swallowed_where_it_landed_is_raised_again() -> None:
    """The parallel sweep's handler remembers a press, so a KeyboardInterrupt dropped where it was raised (as
    in a finalizer) still stops the waiting loop (`prediction._raise_if`)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with prediction._ctrl_c_recorded() as pressed:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)               # the handler runs here and its KeyboardInterrupt is swallowed
            except KeyboardInterrupt:
                pass
            assert pressed == [signal.SIGINT]
            with pytest.raises(KeyboardInterrupt):
                prediction._raise_if(pressed)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, old)
