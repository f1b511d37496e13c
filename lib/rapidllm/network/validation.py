"""Network simulator vs nccl-tests all-reduce on one 8x A100 NVSwitch node.

The network is the named `dgx-a100` (one switch dimension, 300 GB/s per direction, its own latency);
one utilization constant scales every link: the A100's frozen network constant from
config/hardware/a100-sxm4-80gb.yaml, which `rapidllm calibrate` fits on this table's declared calibration
rows (every 4th size >= 1 MiB, see validate/calibrate.py); the other rows are held out.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rapidllm.network.api import DEFAULT_CHUNKS, simulate_collective
from rapidllm.network.topology import build_topology
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec

REFERENCE = Path(__file__).resolve().parents[3] / "validation" / "references" / "collectives_nccl_a100_node.csv"
MIN_BYTES = 1 << 20


@dataclass(frozen=True)
class Row:
    nbytes: int
    measured_s: float
    predicted_s: float
    measured_busbw: float      # bytes/s
    predicted_busbw: float     # bytes/s

    @property
    def error(self) -> float:
        """Signed relative error of the predicted time."""
        return (self.predicted_s - self.measured_s) / self.measured_s


def a100_network_utilization() -> float:
    """The frozen network constant of config/hardware/a100-sxm4-80gb.yaml."""
    mapping, where = resolve_named("hardware", "a100-sxm4-80gb", "network.validation", "hardware")
    return HardwareSpec.from_mapping(mapping, where).utilization.network


def nccl_a100_rows(utilization: float, path: Path = REFERENCE, network: str | dict = "dgx-a100",
                   chunks: int = DEFAULT_CHUNKS,
                   algorithm: str = "ring") -> list[Row]:
    """Predicted vs measured all-reduce time for every row of the reference table."""
    mapping, where = resolve_named("network", network, str(path), "network")
    net = NetworkSpec.from_mapping(mapping, where)
    topo = build_topology(net)
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["collective"] != "all_reduce":
                continue
            n, size = int(r["n_ranks"]), int(r["payload_bytes"])
            res = simulate_collective(net, "all_reduce", size, n, algorithm=algorithm, chunks=chunks,
                                      utilization=utilization, topology=topo)
            out.append(Row(size, float(r["time_us"]) * 1e-6, res.time_s, float(r["busbw_GBps"]) * 1e9, res.busbw))
    return out


def mape(rows: list[Row], min_bytes: int = MIN_BYTES) -> float:
    """Mean absolute percentage error (in %) over rows with at least `min_bytes`."""
    errs = [abs(r.error) for r in rows if r.nbytes >= min_bytes]
    return 100.0 * float(np.mean(errs)) if errs else float("nan")


def main() -> None:
    rows = nccl_a100_rows(a100_network_utilization())
    print(f"{'bytes':>12} {'meas_us':>10} {'pred_us':>10} {'err_%':>7} {'meas_busbw':>10} {'pred_busbw':>10}")
    for r in rows:
        print(f"{r.nbytes:>12} {r.measured_s * 1e6:>10.1f} {r.predicted_s * 1e6:>10.1f} {100 * r.error:>7.1f} "
              f"{r.measured_busbw / 1e9:>10.1f} {r.predicted_busbw / 1e9:>10.1f}")
    print(f"MAPE >= 1 MiB: {mape(rows):.1f}%   MAPE all rows: {mape(rows, 0):.1f}%")


if __name__ == "__main__":
    main()
