"""Constants for a device without validation rows of its own: the transfer rule.

The three calibrated constants (validate/calibrate.py) are fractions of datasheet peaks that the software
running on a device reaches end to end. A device with no end-to-end validation rows (A100-40GB, H200, B200
here) cannot be fitted, and 1.0 ("the datasheet is reached") is the one value known to be wrong: every
fitted device lands at 0.5-0.8 on compute and HBM. The rule, in order:

1. Same SM generation, i.e. the same CUDA compute capability (sm_80, sm_90, ...): the same tensor-core
   instructions and therefore the same kernels of cuBLAS, FlashAttention and NCCL reach the same fraction
   of the peak; take the fitted device of that capability (several: the one whose HBM bandwidth is
   nearest, ratio-wise). A100-40GB takes A100-80GB's constants, H200 takes H100's: same die, same clocks,
   the HBM fraction carried to the new stack's datasheet bandwidth.
2. No fitted device of that capability: the fitted device of the nearest capability, the older one on a
   tie (a new generation's software starts from the previous one's kernels). B200 (sm_100) takes H100's
   (sm_90) constants as a prior; nothing published in this project measures B200 kernels.

Where the device has its own published microbenchmark tables, they come first (no such table of A100-40GB,
H200 or B200 is used in this project, so today this only matters when a fitted device is left out; the
published H200 and B200 GEMM, collective and bandwidth tables are kept aside for independent checks):
- network: fitted on its nccl-tests table (validate/calibrate.py: fit_network_on_collectives);
- compute: the donor's constant x (the device's GEMM-table fraction / the donor's), where a GEMM-table
  fraction is the operator model's summed datasheet time over the summed measured time of a device's bf16
  GEMM kernels (validate/kernels.py: A100 Nsight Compute 0.980, H100 XLA 0.897): what the end-to-end
  constant carries across devices is then the software's share, not the kernels';
- HBM: the donor's constant x (the device's STREAM fraction / the donor's), where a STREAM fraction is the
  Triad bandwidth of its BabelStream table (validation/references/hbm_babelstream_azure.csv, one harness
  on both devices) over its datasheet HBM bandwidth (A100-80GB 1.70 / 2.039 = 0.834, H100 2.97 / 3.35 =
  0.887). Triad, McCalpin's STREAM figure of sustainable bandwidth, chosen before any LODO run.

Each transferred device says so in its hardware file (`utilization_from: <donor>`); `rapidllm calibrate`
checks that the declared donor is the one this rule picks and copies the donor's fitted values, and every
prediction on such a device carries `device_validated: false` and a warning (rapidllm.prediction). The
rule is tested by leaving each fitted device out (validate/loo.py): its rows predicted with the constants
this rule gives it from the others.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping

import numpy as np

from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import config_dir


def device_spec(name: str) -> HardwareSpec:
    mapping, where = resolve_named("hardware", name, "transfer", "hardware")
    return HardwareSpec.from_mapping(mapping, where)


def devices() -> list[str]:
    """Every device of config/hardware, by file name."""
    return sorted(p.stem for p in config_dir("hardware").glob("*.yaml"))


def capability(hw: HardwareSpec) -> float:
    """Compute capability as a number (8.0, 9.0, 10.0); a device without one cannot take part in the rule."""
    if not hw.compute_capability:
        raise SpecError(f"config/hardware/{hw.name}.yaml: compute_capability is needed to transfer constants")
    major, minor = hw.compute_capability.split(".")
    return int(major) + int(minor) / 10.0


def donor(device: str, fitted: Iterable[str]) -> str | None:
    """The fitted device whose constants `device` takes under the rule (module doc); None if none is fitted."""
    target = device_spec(device)
    cc = capability(target)
    candidates = [device_spec(d) for d in sorted(set(fitted) - {device})]
    if not candidates:
        return None
    same = [c for c in candidates if capability(c) == cc]
    if same:
        return min(same, key=lambda c: (abs(math.log(c.hbm_bandwidth / target.hbm_bandwidth)), c.name)).name
    return min(candidates, key=lambda c: (abs(capability(c) - cc), capability(c), c.name)).name


@functools.cache
def gemm_fraction(device: str) -> float | None:
    """Summed operator-model time at the datasheet peak over summed measured time of the device's published
    bf16 GEMM kernels (validate/kernels.py SETS); None without a table."""
    from rapidllm.validate.kernels import SETS, load_cases, load_hardware, predict

    for set_name, (_, dev) in SETS.items():
        if dev == device:
            cases = load_cases(set_name)
            priced = predict(cases[cases.dtype == "bf16"], load_hardware(device))
            return float(priced.tile_s.sum() / priced.measured_s.sum())
    return None


STREAM_TABLE = "hbm_babelstream_azure.csv"
STREAM_KERNEL = "triad"


@functools.cache
def stream_fraction(device: str) -> float | None:
    """The device's BabelStream Triad bandwidth over its datasheet HBM bandwidth (module doc); None without
    a table."""
    import pandas as pd

    from rapidllm.validate.kernels import references_dir

    table = pd.read_csv(references_dir() / STREAM_TABLE)
    rows = table[(table.device == device) & (table.kernel == STREAM_KERNEL)]
    if rows.empty:
        return None
    return float(rows.bandwidth_TBps.iloc[0]) * 1e12 / device_spec(device).hbm_bandwidth


def with_own_tables(device: str, source: str, u: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The donor's constants u, with the device's own microbenchmark tables applied where published (module
    doc): the network constant from its collective table, compute scaled by the GEMM-table fractions, HBM by
    the STREAM fractions."""
    from rapidllm.validate.calibrate import fit_network_on_collectives

    u, notes = np.array(u, float), []
    mine, theirs = gemm_fraction(device), gemm_fraction(source)
    if mine is not None and theirs is not None:
        u[0] = round(u[0] * mine / theirs, 3)
        notes.append(f"compute x GEMM tables {mine:.3f}/{theirs:.3f}")
    mine, theirs = stream_fraction(device), stream_fraction(source)
    if mine is not None and theirs is not None:
        u[1] = round(u[1] * mine / theirs, 3)
        notes.append(f"hbm x STREAM tables {mine:.3f}/{theirs:.3f}")
    network = fit_network_on_collectives(device)
    if network is not None:
        u[2] = network
        notes.append("network from own collective table")
    return u, notes


def own_table_constants(device: str) -> np.ndarray | None:
    """All three constants from the device's own microbenchmark tables alone, no donor and no end-to-end row:
    compute = its GEMM-table fraction, HBM = its STREAM fraction, network = its nccl-tests fit. None unless
    all three tables exist. What the kernels reach, without the software's end-to-end share (docs/transfer.md)."""
    from rapidllm.validate.calibrate import fit_network_on_collectives

    parts = (gemm_fraction(device), stream_fraction(device), fit_network_on_collectives(device))
    return None if any(x is None for x in parts) else np.round(np.array(parts, float), 3)


def transferred_constants(fitted: Mapping[str, np.ndarray]) -> list[tuple[str, str, np.ndarray]]:
    """(device, donor, constants) for every device of config/hardware that declares `utilization_from`.

    `fitted` holds the constants just fitted; a donor not among them (calibration run on a subset of the
    suites) keeps the values frozen in its hardware file. A declared donor that is not the rule's choice
    among the devices with rows of their own is an error: the files state the rule, the code applies it.
    """
    specs = {d: device_spec(d) for d in devices()}
    own = sorted(set(fitted) | {d for d, hw in specs.items() if hw.validated})
    out = []
    for device, hw in specs.items():
        if hw.validated or hw.utilization_from == "datasheet":
            continue
        rule = donor(device, own)
        if hw.utilization_from != rule:
            raise SpecError(f"config/hardware/{device}.yaml: utilization_from: {hw.utilization_from!r}, but the "
                            f"transfer rule (validate/transfer.py) picks {rule!r} among {', '.join(own)}")
        u = fitted.get(rule)
        if u is None:
            frozen = specs[rule].utilization
            u = np.array([frozen.compute, frozen.hbm, frozen.network])
        out.append((device, rule, with_own_tables(device, rule, u)[0]))
    return out
