"""Network simulator vs nccl-tests all-reduce on one 8-GPU NVSwitch node, per device.

Two measured tables (validation/references, SOURCES.md): 8x A100 (NCCL's default algorithm, simulated as the
ring through the switch) and 8x H100 (the NVLS algorithm, simulated as the in-switch reduction of
network/in_switch.py). Each device's network is its named node (`dgx-a100`, `dgx-h100`: one switch
dimension, its own latency); one utilization constant scales every link: the device's frozen network
constant from config/hardware, which `rapidllm calibrate` fits on the table's declared calibration rows
(every 4th size >= 1 MiB, see validate/calibrate.py); the other rows are held out.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from rapidllm.network.api import DEFAULT_CHUNKS, simulate_collective
from rapidllm.network.topology import build_topology
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec
from rapidllm.validate.metrics import mape_of

REFERENCES = Path(__file__).resolve().parents[3] / "validation" / "references"
MIN_BYTES = 1 << 20


@dataclass(frozen=True)
class CollectiveTable:
    """A measured all-reduce table and how to simulate it: the node's network and NCCL's algorithm."""
    path: Path
    network: str
    algorithm: str


TABLES = {
    "a100-sxm4-80gb": CollectiveTable(REFERENCES / "collectives_nccl_a100_node.csv", "dgx-a100", "ring"),
    "h100-sxm5-80gb": CollectiveTable(REFERENCES / "collectives_nccl_h100_node.csv", "dgx-h100", "in_switch"),
}


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


def network_utilization(device: str) -> float:
    """The frozen network constant of config/hardware/<device>.yaml."""
    mapping, where = resolve_named("hardware", device, "validate.nccl", "hardware")
    return HardwareSpec.from_mapping(mapping, where).utilization.network


def nccl_rows(device: str, utilization: float, network: str | dict | None = None,
              chunks: int | None = DEFAULT_CHUNKS) -> list[Row]:
    """Predicted vs measured all-reduce time for every row of the device's table."""
    table = TABLES[device]
    mapping, where = resolve_named("network", network or table.network, str(table.path), "network")
    net = NetworkSpec.from_mapping(mapping, where)
    topo = build_topology(net)
    out = []
    with open(table.path, newline="") as f:
        for r in csv.DictReader(f):
            if r["collective"] != "all_reduce":
                continue
            n, size = int(r["n_ranks"]), int(r["payload_bytes"])
            res = simulate_collective(net, "all_reduce", size, n, algorithm=table.algorithm, chunks=chunks,
                                      utilization=utilization, topology=topo)
            out.append(Row(size, float(r["time_us"]) * 1e-6, res.time_s, float(r["busbw_GBps"]) * 1e9, res.busbw))
    return out


def mape(rows: list[Row], min_bytes: int = MIN_BYTES) -> float:
    """Mean absolute percentage error (in %) over rows with at least `min_bytes`."""
    return mape_of([100.0 * r.error for r in rows if r.nbytes >= min_bytes])


def main() -> None:
    for device in TABLES:
        rows = nccl_rows(device, network_utilization(device))
        print(f"{device}: {TABLES[device].path.name}")
        print(f"{'bytes':>12} {'meas_us':>10} {'pred_us':>10} {'err_%':>7} {'meas_busbw':>10} {'pred_busbw':>10}")
        for r in rows:
            print(f"{r.nbytes:>12} {r.measured_s * 1e6:>10.1f} {r.predicted_s * 1e6:>10.1f} {100 * r.error:>7.1f} "
                  f"{r.measured_busbw / 1e9:>10.1f} {r.predicted_busbw / 1e9:>10.1f}")
        print(f"MAPE >= 1 MiB: {mape(rows):.1f}%   MAPE all rows: {mape(rows, 0):.1f}%")


if __name__ == "__main__":
    main()
