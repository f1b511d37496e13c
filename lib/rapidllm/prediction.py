"""The one place a case becomes a prediction: training or inference, event engine or alpha-beta baseline.

The CLI, the pipeline, validation, calibration, search and the explorer all call `evaluate` (a flat record
with the stable snake_case keys of the README) or the typed `predict` built on it, so a number printed by
`rapidllm predict` is the number a sweep, a validation suite or a search would record for the same case.

Caches (rapidllm/caches.py): the memo tables that let a sweep price a shape or simulate a collective once
are owned here. `sweep` and `predict_many` run in a fresh `Caches` of their own unless given one (pass the
same one to share work across calls); `evaluate` and `predict` use the caller's active scope, else
`caches.PROCESS_DEFAULT`, which lives as long as the process. Keys are values, never identities, so which
tables a prediction runs with changes its run time only, never its numbers.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rapidllm.caches import Caches
from rapidllm.engine.comm_cost import topology_of
from rapidllm.engine.engine import ENGINES, Adjust, record_keys, simulate
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import as_frame, price_case, price_table
from rapidllm.spec.case import Case, load_case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import Experiment, case_columns, expand_row, flat_columns, load_experiment, raw_cases
from rapidllm.spec.named import NAME
from rapidllm.spec.paths import config_dir, spec_path

if TYPE_CHECKING:
    import pandas as pd

MEMORY_FIELDS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "framework", "capacity")
TRAINING_ONLY = ("mfu", "hfu")
INFERENCE_ONLY = ("ttft_s", "itl_s", "e2e_latency_s", "sequences_in_flight")
TIMINGS = ("step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s", "mfu", "hfu", "tokens_per_s",
           *INFERENCE_ONLY)


def memory_record(mem: MemoryResult) -> dict[str, Any]:
    """Bytes per memory component, peak and feasibility, as record columns."""
    rec: dict[str, Any] = {f"{f}_bytes": getattr(mem, f) for f in MEMORY_FIELDS}
    rec.update(mem.verdict())
    return rec


_WARNED: set[tuple[str, str]] = set()


def device_record(case: Case) -> dict[str, Any]:
    """`device_validated`: whether the device's three constants were fitted on its own validation rows. A
    device without rows (constants transferred from another, validate/transfer.py, or none given) warns
    once per process on stderr: its predictions carry the donor's error and more."""
    hw = case.hardware
    validated = hw.validated and _shipped_device(hw.name)
    if not validated and (hw.name, hw.utilization_from) not in _WARNED:
        _WARNED.add((hw.name, hw.utilization_from))
        origin = ("no utilization given: datasheet peaks (1.0)" if hw.utilization_from == "datasheet"
                  else f"constants transferred from {hw.utilization_from} (docs/transfer.md)"
                  if hw.utilization_from else
                  "a device of its own, not in config/hardware: its constants come with it, not from rows of "
                  "its own (docs/transfer.md)")
        print(f"rapidllm: warning: device {hw.name} has no validation rows of its own; {origin}",
              file=sys.stderr)
    if validated and hw.borrowed and (hw.name, hw.borrowed_from) not in _WARNED:
        _WARNED.add((hw.name, hw.borrowed_from))
        print(f"rapidllm: note: device {hw.name}'s {' and '.join(hw.borrowed)} constants are {hw.borrowed_from}'s: "
              "its own rows are too few to fit them (docs/transfer.md, \"B200's own rows\")", file=sys.stderr)
    return {"device_validated": validated}


def replicas_served(case: Case) -> int:
    """How many copies of a record's `tokens_per_s` the case's GPUs produce (`replicas`)."""
    return replicas(case.training, case.parallelism.dp)


def replicas(training: bool, dp: int) -> int:
    """An inference record's rate is one replica's (`workload.batch` is per replica, docs/limits.md), so dp of
    them run on the case's world; a training record's rate is already the whole job's. Per-GPU and
    per-dollar rates divide the rate times this by the world (they divided one replica's rate by every
    replica's GPUs: dp 2 halved them)."""
    return 1 if training else dp


def _shipped_device(name: str) -> bool:
    """Whether device `name`, or the name it was derived from (an experiment's what-if
    `h100-sxm5-80gb+hbm_bandwidth=...`, the explorer's `...-edited`), is a file of config/hardware. Only
    those files' constants can have been fitted (tests/test_transfer.py holds each to its rows or its stated
    donor); an inline device of another name (a made-up future GPU) with a `utilization` of its own was
    reported as validated. The constants themselves are not compared: calibration prices a fitted device at
    trial constants, which must not read as another device."""
    base = name.partition("+")[0].removesuffix("-edited")
    return (NAME.fullmatch(base) is not None
            and os.path.isfile(os.path.join(config_dir("hardware"), f"{base}.yaml")))


def evaluate(case: Case | str | Path | Mapping[str, Any], engine: str = "event", adjust: Adjust | None = None,
             trace: bool = False) -> dict[str, Any]:
    """Price, memory, graph and replay of one case in-process, as one flat record.

    engine: "event" (graph replay on the network simulator) or "baseline" (the alpha-beta ablation);
    adjust: rewrites operator times first (engine/measured.py). An infeasible case gets its memory and the
    reason, and no timing. trace=True adds the replay under "schedule" (what `rapidllm.explore.timeline`
    draws; None where there is none); every other value is the same. `case` may also be a path or a mapping,
    as for `predict`.
    """
    return _evaluate(_as_case(case), engine, adjust, trace)[0]


def _evaluate(case: Case, engine: str, adjust: Adjust | None,
              trace: bool = False) -> tuple[dict[str, Any], MemoryResult]:
    if case.network.faults:     # built here whether or not a collective needs it, so a bad fault is refused
        topology_of(case.network)
    mem = memory_for_case(case)
    record: dict[str, Any] = {"case_id": case.case_id, **device_record(case)}
    if not mem.feasible and adjust is not None:
        adjust(as_frame(price_table(case)))    # what a simulation would read: a misspelt measured row is refused
    if not mem.feasible:
        record.update(status="infeasible", reason=mem.reason, peak_memory_bytes=mem.peak, feasible=False)
        if trace:
            record["schedule"] = None
        return record, mem
    result = simulate(case, price_table(case), mem, engine=engine, adjust=adjust, trace=trace)
    result.pop("infeasible_reason")
    record.update(status="ok", reason="", **result)
    return record, mem


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU bytes of the worst pipeline stage, by component, against the device's capacity: the public,
    flat view of `memory.closed_form.MemoryResult` (which also carries the stage index and the optimizer's
    transient buffers that the peak is computed from)."""
    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    framework: float
    capacity: float
    peak: float

    @property
    def feasible(self) -> bool:
        return self.peak <= self.capacity

    @classmethod
    def of(cls, mem: MemoryResult) -> MemoryBreakdown:
        return cls(**{f: float(getattr(mem, f)) for f in MEMORY_FIELDS}, peak=float(mem.peak))


@dataclass(frozen=True)
class Prediction:
    """A typed prediction. Fields that do not apply to the case's mode are None (MFU of an inference case,
    TTFT of a training step); timings are None when the case does not fit in memory (`status`
    "infeasible", `reason` says by how much)."""
    case_id: str
    mode: str
    status: str
    reason: str
    step_time_s: float | None
    compute_time_s: float | None
    exposed_comm_s: float | None
    bubble_s: float | None
    mfu: float | None
    hfu: float | None
    tokens_per_s: float | None
    ttft_s: float | None
    itl_s: float | None
    e2e_latency_s: float | None
    # inference on the event engine: the sequences in flight (static batching: the batch; serving: those the
    # engine admits, memory/kv_pool.py) and what bounds them: batch, concurrency (every client), kv_cache or
    # max_batch_size
    sequences_in_flight: float | None
    in_flight_limit: str | None
    memory: MemoryBreakdown
    device_validated: bool = True    # False: the device has no validation rows of its own (docs/transfer.md)
    # the replay behind the numbers when asked for (`predict(..., trace=True)`), for timelines; not a column
    schedule: Any = field(default=None, compare=False, repr=False)

    @property
    def feasible(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Flat record: the README's `--json` keys plus `{component}_bytes` memory columns
        (`RECORD_COLUMNS`, in that order)."""
        values = [*(getattr(self, n) for n in _OWN_COLUMNS), *(getattr(self.memory, n) for n in MEMORY_FIELDS),
                  self.memory.peak, self.feasible]
        return dict(zip(RECORD_COLUMNS, values, strict=True))


# `Prediction.to_dict`'s keys: the flat fields, each memory component's bytes, the peak and feasibility
_OWN_COLUMNS = tuple(f.name for f in fields(Prediction) if f.name not in ("memory", "schedule"))
RECORD_COLUMNS = (*_OWN_COLUMNS, *(f"{k}_bytes" for k in MEMORY_FIELDS), "peak_memory_bytes", "feasible")


def _applies(key: str, training: bool) -> bool:
    return not ((training and key in INFERENCE_ONLY) or (not training and key in TRAINING_ONLY))


CASE_ALLOWED = "a Case, a mapping with a case file's keys, or a path to a case YAML file (str or pathlib.Path)"


def _as_case(case: Case | str | Path | Mapping[str, Any]) -> Case:
    if isinstance(case, Case):
        return case
    if isinstance(case, Mapping):
        return resolve_case(dict(case), "<mapping>")
    return load_case(spec_path(case, "case", CASE_ALLOWED))


def predict(case: Case | str | Path | Mapping[str, Any], engine: str = "event",
            adjust: Adjust | None = None, trace: bool = False) -> Prediction:
    """Predict one case: a `Case`, a YAML path, or a mapping with the keys of a case file. trace=True
    keeps the replay in `Prediction.schedule` (for `rapidllm.explore.timeline`).

    >>> import rapidllm
    >>> p = rapidllm.predict("examples/gpt175b-tp8-pp8.yaml")   # doctest: +SKIP
    >>> p.step_time_s, p.memory.activations                            # doctest: +SKIP
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    resolved = _as_case(case)
    rec, mem_result = _evaluate(resolved, engine, adjust, trace)
    ok = rec["status"] == "ok"

    def timing(key: str) -> float | None:
        if not ok or not _applies(key, resolved.training) or key not in rec:   # the baseline engine has
            return None                                                        # no admission
        return float(rec[key])

    memory = MemoryBreakdown.of(mem_result)
    return Prediction(case_id=rec["case_id"], mode="training" if resolved.training else "inference",
                      status=rec["status"], reason=rec["reason"],
                      **{k: timing(k) for k in TIMINGS},
                      in_flight_limit=rec.get("in_flight_limit") if ok and not resolved.training else None,
                      memory=memory, schedule=rec.get("schedule"), device_validated=bool(rec["device_validated"]))


CHAKRA_TRAINING_ONLY = ("Chakra traces are written for training steps (engine/chakra.py replays the training "
                        "graph); allowed: a case with workload.mode training")


def export_chakra(case: Case | str | Path | Mapping[str, Any], directory: str | Path,
                  per_class: bool = False) -> list[Path]:
    """Write the case's training step as Chakra traces for ASTRA-sim (engine/chakra.py): one `.et` per rank
    (or one per pipeline stage with `per_class`), `comm_groups.json`, and a README naming the ASTRA-sim
    options with our prediction beside them. Returns the trace paths."""
    from rapidllm.engine.chakra import write_chakra, write_readme

    resolved = _as_case(case)
    if not resolved.training:
        raise SpecError(f"export_chakra: {CHAKRA_TRAINING_ONLY}")
    paths = write_chakra(resolved, price_case(resolved), directory, per_class)
    write_readme(resolved, directory, evaluate(resolved), per_class)
    return paths


def predict_many(cases: Iterable[Case | str | Path | Mapping[str, Any]], engine: str = "event",
                 caches: Caches | None = None) -> pd.DataFrame:
    """One row per case, in input order: the case's `MANY_CASE_COLUMNS`, then `Prediction.to_dict`; memo
    tables: `caches`, else a fresh set."""
    import pandas as pd

    if isinstance(cases, (str, os.PathLike, Mapping, Case)) or not isinstance(cases, Iterable):
        raise SpecError(f"predict_many: got {type(cases).__name__}; allowed: an iterable of cases "
                        f"(each {CASE_ALLOWED}); predict() takes a single one")
    with (caches or Caches()).active():
        rows = []
        for c in cases:
            resolved = _as_case(c)
            flat = flat_columns(resolved)
            rows.append({**{k: flat[k] for k in MANY_CASE_COLUMNS}, **predict(resolved, engine).to_dict()})
    # the same columns and dtypes whatever the cases: a field no row has (TTFT of training rows) is a float
    # NaN column, not object Nones, and no cases give an empty table with the columns
    return pd.DataFrame(rows, columns=[*MANY_CASE_COLUMNS, *RECORD_COLUMNS]).astype(dict.fromkeys(TIMINGS, "float64"))


# What a `predict_many` row says of its case before the prediction's own columns, as a sweep's columns name
# it (`flat_columns`): the specs, the GPU count and layout a plot is drawn against, and the faults, so a
# frame needs no list of its inputs kept beside it (and `cost.add_cost_columns` needs no `cases=`).
MANY_CASE_COLUMNS = ("model", "hardware", "network", "precision", "world", "dp", "tp", "pp", "cp", "ep", "faults")


def sweep(experiment: Experiment | str | Path, progress: bool = False, engine: str = "event",
          caches: Caches | None = None, jobs: int = 1) -> pd.DataFrame:
    """Every combination of an experiment, evaluated in-process: one row per combination, invalid and
    infeasible ones kept with their reason (what `rapidllm sweep` writes). Memo tables: `caches`, else a
    fresh set for this sweep.

    jobs > 1 evaluates in that many processes, this one and jobs - 1 workers (0: one per available core;
    `resolve_jobs`). Rows are the same values in the same order as with jobs=1 (every memo key is a value,
    so which process priced a case never changes its numbers). With jobs > 1 each worker starts from a
    copy of `caches` (fork) or a fresh set (spawn) and its new entries stay in the worker."""
    import pandas as pd
    from tqdm import tqdm

    workers = resolve_jobs(jobs)
    with (caches or Caches()).active() as active:
        exp = experiment if isinstance(experiment, Experiment) else load_experiment(spec_path(
            experiment, "sweep", "an Experiment (rapidllm.spec.experiment.load_experiment) or a path to an "
            "experiment YAML file (str or pathlib.Path); not a mapping"))
        raws = list(raw_cases(exp))
        units, starts = _chunks(_raw_groups(raws), min(workers, len(raws)))
        if workers > 1 and len(units) > 1:
            return _sweep_table(_sweep_parallel(exp, raws, units, starts, engine, active, progress), raws, engine)
        out: list[dict[str, Any]] = [{} for _ in raws]
        with tqdm(total=len(raws), desc=exp.name, unit="case", disable=not progress) as bar:
            for unit in units:                  # a layout's cases together: they meet in small memo tables
                for i, rec in _evaluate_unit(exp, raws, unit, engine):
                    out[i] = rec
                    bar.update(1)
    return _sweep_table(out, raws, engine)


def sweep_columns(mode: Any, engine: str = "event") -> tuple[str, ...]:
    """The columns a sweep row of workload mode `mode` has after its bookkeeping (`expand_row`) once its
    case is predicted: the case (`case_columns`), then `evaluate`'s record of a case that fits. () for a
    mode that is none."""
    case = case_columns(mode)
    if not case:
        return ()
    record = record_keys(mode == "training", engine)
    return (*case, "device_validated", *(k for k in record if k != "infeasible_reason"))


def _sweep_table(rows: list[dict[str, Any]], raws: list[tuple[str, dict]], engine: str) -> pd.DataFrame:
    """The sweep's rows as one table (`sweep_frame`), each row's mode from its case, else its raw one's."""
    import pandas as pd

    modes = (row.get("mode", workload_mode(raw["case"])) for row, (_, raw) in zip(rows, raws, strict=True))
    return sweep_frame(pd.DataFrame(rows), rows, modes, engine)


def sweep_frame(table: pd.DataFrame, keys: Iterable[Iterable[str]], modes: Iterable[Any],
                engine: str = "event") -> pd.DataFrame:
    """A sweep's rows (`table`, one per combination, with each row's own `keys` and workload mode) as a
    table whose columns do not depend on which rows are valid: each row's own keys that its mode's
    `sweep_columns` lack (bookkeeping, meta), then those columns, in the order first met. A column no row
    has (the timings of a sweep whose every row is invalid or infeasible) is a float NaN column, as in a
    sweep where some rows have it. What `sweep` returns and the pipeline's collect writes
    (pipeline/stages.py), so both give one experiment the same columns."""
    columns: dict[str, None] = {}
    for row, mode in zip(keys, modes, strict=True):
        schema = _schema(mode if isinstance(mode, str) else None, engine)
        columns.update(dict.fromkeys(k for k in row if k not in schema[1]))
        columns.update(dict.fromkeys(schema[0]))
    absent = [c for c in columns if c not in table.columns]
    return table.reindex(columns=list(columns)).astype(dict.fromkeys(absent, "float64"))


def workload_mode(raw_case: Mapping[str, Any]) -> Any:
    """A raw case mapping's `workload.mode` (what an invalid row's columns follow), None without one."""
    workload = raw_case.get("workload")
    return workload.get("mode") if isinstance(workload, dict) else None


@functools.lru_cache(maxsize=8)
def _schema(mode: Any, engine: str) -> tuple[tuple[str, ...], frozenset[str]]:
    columns = sweep_columns(mode, engine)
    return columns, frozenset(columns)


def _sweep_parallel(exp: Experiment, raws: list[tuple[str, dict]], units: list[list[int]], starts: list[int],
                    engine: str, caches: Caches, progress: bool) -> list[dict[str, Any]]:
    """The rows of `sweep` from the parent and a pool of one worker fewer than runs: each expands
    (resolves) and evaluates its own run of units (`_claim`; the parent is run 0), so the parent's serial
    part is only `raw_cases` and the table, its rows are never pickled, and one process fewer is forked.
    The parent first warns about each device once (one case per device resolved here), so the workers do
    not warn again."""
    from tqdm import tqdm

    warned: set[str] = set()
    for index, (label, raw) in enumerate(raws):
        key = _spec_key(raw["case"].get("hardware")) + repr(raw["case"].get("clock"))
        if key not in warned:
            case = expand_row(exp, index, label, raw, case_json=False)[1]
            if case is not None:
                warned.add(key)
                device_record(case)
    import multiprocessing

    out: list[dict[str, Any]] = [{} for _ in raws]
    with tqdm(total=len(raws), desc=exp.name, unit="case", disable=not progress) as bar, \
            _ctrl_c_recorded() as pressed, _pool(exp, raws, units, starts, engine, caches) as (pool, shares):
        results = pool.imap_unordered(_run_chunk, range(len(units)))      # each task claims a unit
        while (unit := _claim(shares, 0)) is not None:
            _raise_if(pressed)
            for i, rec in _evaluate_unit(exp, raws, units[unit], engine):
                out[i] = rec
                bar.update(1)
        while True:
            _raise_if(pressed)
            try:
                done = results.next(timeout=0.25)
            except StopIteration:
                break
            except multiprocessing.TimeoutError:
                continue
            for i, rec in done:
                out[i] = rec
            bar.update(len(done))
    return out


@contextlib.contextmanager
def _ctrl_c_recorded() -> Iterator[list[int]]:
    """Ctrl-C in the parent of a parallel sweep, remembered. The default handler raises KeyboardInterrupt
    wherever the main thread is: one raised inside a finalizer (a `__del__`, a weakref callback) is printed
    and dropped, and the main thread may be blocked waiting on its workers. A single Ctrl-C was lost once
    (tests/test_sweep_jobs.py in a full CI run beside the pipeline: the parent kept waiting on workers that
    sleep a minute a chunk; where it went was not found). This handler records the press and raises as the
    default one; the waiting loops, which wake at least every 0.25 s, raise a recorded press (`_raise_if`),
    however the first raise was lost. Another handler the caller installed, or a call off the main thread,
    is left alone."""
    pressed: list[int] = []
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield pressed
        return

    def record(signum: int, frame: Any) -> None:
        pressed.append(signum)
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, record)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, old)


def _raise_if(pressed: list[int]) -> None:
    if pressed:
        raise KeyboardInterrupt


# Worker processes at most (docs/limits.md): above the logical CPUs of the largest nodes (two 192-core EPYC
# 9965 with SMT: 768, which --jobs 0 already gives); --jobs 100000 forked as many workers as the sweep had
# layout runs, whatever the machine.
MAX_JOBS = 1024
JOBS_ALLOWED = f"allowed: an integer 1 to {MAX_JOBS} (worker processes) or 0 (one per available core)"


def resolve_jobs(jobs: int) -> int:
    """Worker processes for `jobs`: itself when >= 1, every core this process may use when 0."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 0 <= jobs <= MAX_JOBS:
        raise SpecError(f"jobs: {jobs!r} is not allowed; {JOBS_ALLOWED}")
    if jobs:
        return jobs
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _sweep_row(row: dict[str, Any], case: Case, engine: str) -> dict[str, Any]:
    try:
        return {**row, **evaluate(case, engine)}
    except SpecError as err:            # a limit met while predicting: the row says so, the sweep goes on
        return {**row, "case_id": "", "status": "invalid", "reason": str(err)}


def _spec_key(value: Any) -> str:
    """A named spec's name, an inline one's text: what tells devices and fabrics apart before resolving."""
    return value if isinstance(value, str) else repr(value)


def _raw_groups(raws: list[tuple[str, dict]]) -> list[tuple[tuple, list[int]]]:
    """Every combination by device, fabric and parallel layout as `raw_cases` gives them (before resolving,
    so workers can resolve their own), each group with its family: device, fabric and the model-parallel
    axes tp, cp, ep, which decide operator shapes and the ranks of the tensor-parallel collectives."""
    groups: dict[tuple, list[int]] = {}
    for i, (_, raw) in enumerate(raws):
        c = raw["case"]
        p = c.get("parallelism") if isinstance(c.get("parallelism"), dict) else {}
        family = tuple(_spec_key(v) for v in (c.get("hardware"), c.get("network"), p.get("tp"), p.get("cp"),
                                              p.get("ep")))
        layout = tuple(_spec_key(p.get(k)) for k in ("dp", "pp", "virtual_stages", "schedule"))
        groups.setdefault((family, layout), []).append(i)
    return [(key[0], members) for key, members in groups.items()]


def _chunks(groups: list[tuple[tuple, list[int]]], workers: int) -> tuple[list[list[int]], list[int]]:
    """Work units for the pool and where each worker starts: the layout groups (`_raw_groups`) in order of
    family, so a family's cases, which share most priced layers, template replays and simulated
    collectives, go to one worker (sweep-1000 on two workers: 1,118 collective simulations and 76 priced
    layer sets against 977 and 60 in one process; whole layouts dealt out in order gave 1,152 and 120),
    cut into one run of units per worker at the family boundaries nearest to even shares of cases.
    Returns (units, starts): worker k owns units[starts[k]:starts[k + 1]]."""
    families: dict[tuple, list[list[int]]] = {}
    for family, members in groups:
        families.setdefault(family, []).append(members)
    units = [members for family in families.values() for members in family]
    edges, cases_before = [0], [0]              # unit index and cases before it at each family boundary
    for family in families.values():
        edges.append(edges[-1] + len(family))
        cases_before.append(cases_before[-1] + sum(map(len, family)))
    total = cases_before[-1]
    starts = [edges[min(range(len(edges)), key=lambda e: abs(cases_before[e] - k * total / workers))]
              for k in range(workers)]
    return units, starts + [len(units)]


_WORKER: tuple[Experiment, list, list, str, Caches, Any, int] | None = None   # see _init_worker


def _init_worker(exp: Experiment, raws: list, units: list, engine: str, caches: Caches,
                 warned: set[tuple[str, str]], shares: Any, slots: Any) -> None:
    """Pool initializer: keep the sweep's combinations (inherited, not pickled, under fork), the devices
    the parent has warned about, the shared table of unclaimed units and this worker's slot in it (from 1:
    slot 0 is the parent's); Ctrl-C
    is the parent's to handle (it terminates the pool), so workers ignore SIGINT instead of printing
    tracebacks."""
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WARNED.update(warned)
    with slots.get_lock():
        slot = slots.value
        slots.value += 1
    _WORKER = (exp, raws, units, engine, caches, shares, slot)


def _claim(shares: Any, slot: int) -> int | None:
    """The next unit for worker `slot`: the front of its own run, else (its run done) the back of the run
    with most units left, so each worker keeps to its families and the runs meet where the load balances.
    `shares` holds [lo, hi) of every run, guarded by its lock."""
    with shares.get_lock():
        runs = len(shares) // 2
        if shares[2 * slot] < shares[2 * slot + 1]:
            shares[2 * slot] += 1
            return shares[2 * slot] - 1
        k = max(range(runs), key=lambda k: shares[2 * k + 1] - shares[2 * k])
        if shares[2 * k] < shares[2 * k + 1]:
            shares[2 * k + 1] -= 1
            return shares[2 * k + 1]
    return None


def _run_chunk(_: int) -> list[tuple[int, dict[str, Any]]]:
    """One pool task: claim a unit (`_claim`), expand its rows and evaluate the valid ones; the parent
    submits one task per unit."""
    assert _WORKER is not None
    exp, raws, units, engine, caches, shares, slot = _WORKER
    unit = _claim(shares, slot % (len(shares) // 2))
    if unit is None:
        return []
    with caches.active():
        return list(_evaluate_unit(exp, raws, units[unit], engine))


def _evaluate_unit(exp: Experiment, raws: list[tuple[str, dict]], unit: list[int],
                   engine: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row index, record) of every combination of one work unit: expanded (resolved), and evaluated
    when valid."""
    for i in unit:
        row, case = expand_row(exp, i, *raws[i], case_json=False)
        yield i, row if case is None else _sweep_row(row, case, engine)


@contextlib.contextmanager
def _pool(exp: Experiment, raws: list, units: list[list[int]], starts: list[int], engine: str,
          caches: Caches) -> Iterator[tuple[Any, Any]]:
    """A process pool, one worker per run of `starts` but the first (the parent's), whose workers hold the
    sweep's combinations and units: forked where the platform can (they and a copy of `caches` are
    inherited, not pickled), else spawned with fresh memo tables; with the shared table of unclaimed units
    (`_claim`). Used as a context manager: leaving the block (done, an error, or Ctrl-C in the parent)
    terminates the pool and joins its workers (`Pool.__exit__` only terminates, and a worker could still
    be listed as alive after it), so an interrupted sweep leaves no process behind and returns nothing."""
    import multiprocessing

    fork = "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    runs = len(starts) - 1
    shares = ctx.Array("l", [b for k in range(runs) for b in (starts[k], starts[k + 1])])
    pool = ctx.Pool(runs - 1, initializer=_init_worker,
                    initargs=(exp, raws, units, engine, caches if fork else Caches(), set(_WARNED), shares,
                              ctx.Value("l", 1)))
    try:
        yield pool, shares
    finally:
        pool.terminate()
        pool.join()
