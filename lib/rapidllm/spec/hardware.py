"""Hardware spec in SI units: datasheet values plus the three calibrated utilizations."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rapidllm.spec.errors import SpecError
from rapidllm.units import parse_quantity as q

# NVFP4 (NVIDIA's block-scaled FP4, the format of TensorRT Model Optimizer's nvidia/*-FP4 checkpoints):
# E2M1 elements packed two per byte, one FP8 E4M3 scale per 16 consecutive elements along K, and one FP32
# scale per tensor (negligible): 4 + 8/16 = 4.5 bits per element. MXFP4 (OCP Microscaling Formats spec v1.0,
# one E8M0 scale per 32 elements) would store 4.25 bits; no `precision` runs it (docs/fp4.md says why).
FP4_SCALE_BLOCK = 16
# Bytes one element of each type occupies in HBM, L2 and shared memory, block scales included.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5 + 1 / FP4_SCALE_BLOCK}
# Bytes of the element alone where it differs (scales travel beside the data, in tensors of their own): what
# a tensor-core MMA's K depth counts. CUTLASS's sm100 NVFP4 GEMM (examples/72_blackwell_narrow_precision_gemm/
# 72a_blackwell_nvfp4_bf16_gemm.cu) runs 256-element K tiles: 128 B of packed operand row, as 128 B is 64
# elements of FP8.
PACKED_BYTES: dict[str, float] = {"fp4": 0.5}
# Case precisions that only the GEMMs take (and, in serving, the stored weights): everything else runs and
# moves BF16 (`Case.activation_precision`, docs/fp8.md and docs/fp4.md).
GEMM_PRECISIONS = ("fp8", "fp4")
# exp2 results per clock per SM of the special-function units: 16 on compute capability 5.x through 10.0
# (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table). H100 SXM5: 16 x 132 x 1.83 GHz =
# 3.9 T/s, the figure Shah et al. 2024 (FlashAttention-3, §3) contrast with its 989 TFLOP/s of matmul. Not a
# fixed ratio to the FP32 rate: sm_90 doubled the FP32 lanes per SM (128) but not the SFUs. Blackwell Ultra
# (sm_103) doubles the SFU rate of MUFU.EX2 (NVIDIA technical blog "Making Softmax More Efficient with NVIDIA
# Blackwell Ultra", 2026): its file sets `exponentials_per_sm_clock: 32`.
DEFAULT_EXP_PER_SM_CLOCK = 16.0


def packed_bytes(dtype: str) -> float:
    """Bytes of one element without its block scales (`PACKED_BYTES`, else `DTYPE_BYTES`)."""
    return PACKED_BYTES.get(dtype, DTYPE_BYTES[dtype])


@dataclass(frozen=True)
class SMLimits:
    max_threads: int
    max_threads_per_block: int
    max_registers: int
    max_registers_per_thread: int
    max_shared_memory: float          # bytes per SM
    max_shared_memory_per_block: float
    max_blocks: int


@dataclass(frozen=True)
class Utilization:
    """The only calibrated constants: fractions of peak compute, HBM and network bandwidth achieved."""
    compute: float = 1.0
    hbm: float = 1.0
    network: float = 1.0


@dataclass(frozen=True)
class HardwareSpec:
    # Left out of the case id at their defaults (spec/case_id.py): devices that do not set them keep their ids.
    HASH_OMITTED_DEFAULTS = ("exp_per_sm_clock", "borrowed_from", "borrowed")

    name: str
    sm_count: int
    clock_hz: float
    tensor_flops: dict[str, float]    # dense FLOP/s per dtype at clock_hz
    vector_flops: float               # FP32 non-tensor FLOP/s
    hbm_capacity: float               # bytes
    hbm_bandwidth: float              # bytes/s
    l2_size: float                    # bytes
    l2_bandwidth: float               # bytes/s
    smem_bandwidth_per_sm: float      # bytes/s
    limits: SMLimits
    launch_overhead_s: float
    framework_memory: float           # bytes reserved by CUDA context + allocator
    utilization: Utilization
    compute_capability: str = ""      # "8.0", "9.0", ...; "" when unknown
    memory_latency_s: float = 0.0     # 0 -> the GEMM model's default of 700 SM cycles
    exp_per_sm_clock: float = DEFAULT_EXP_PER_SM_CLOCK   # exp2 results per clock per SM (special-function units)
    # Where the three constants come from: "" = fitted on this device's own validation rows; a device name =
    # transferred from that device by the rule of validate/transfer.py (no rows of its own); "datasheet" =
    # none given (1.0). Anything but "" makes a prediction carry `device_validated: false` and a warning.
    utilization_from: str = ""
    # A device with rows of its own too few to fit every constant (validate/calibrate.py fitted_count): the
    # constants taken from its transfer donor instead, and that donor (`utilization_borrowed` in its file).
    borrowed_from: str = ""
    borrowed: tuple[str, ...] = ()

    @property
    def validated(self) -> bool:
        """True when the constants were fitted on this device's own end-to-end rows."""
        return not self.utilization_from

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for dtype; falls back to the nearest slower dtype the device has, except FP4:
        block-scaled FP4 operands need the block-scaled MMAs of sm_100 (an FP8 or BF16 unit cannot read them),
        so a device without an fp4 rate has no FP4 GEMM to price (cases and `rapidllm gemm` refuse it first)."""
        if dtype == "fp4" and "fp4" not in self.tensor_flops:
            raise ValueError(f"{self.name} has no fp4 tensor units")
        for d in {"fp4": ("fp4",), "fp8": ("fp8", "bf16", "fp16"), "bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"),
                  "tf32": ("tf32", "fp32"), "fp32": ("fp32",)}[dtype]:
            if d in self.tensor_flops:
                return self.tensor_flops[d]
        return self.vector_flops

    def at_clock(self, clock_hz: float) -> "HardwareSpec":
        """The same device with its SM clock locked: compute, L2 and shared-memory rates scale, HBM does not."""
        s = clock_hz / self.clock_hz
        return replace(self, clock_hz=clock_hz, tensor_flops={k: v * s for k, v in self.tensor_flops.items()},
                       vector_flops=self.vector_flops * s, l2_bandwidth=self.l2_bandwidth * s,
                       smem_bandwidth_per_sm=self.smem_bandwidth_per_sm * s)

    @classmethod
    def from_mapping(cls, m: dict[str, Any], source: str) -> "HardwareSpec":
        lim = m["sm_limits"]
        clock = q(m["clock"], "frequency")
        if max_clock_hz(m) < clock:
            raise SpecError.at(source, "max_clock", f"{m['max_clock']} is below clock {m['clock']}; allowed: the "
                               "highest SM clock the device runs (its max boost), at least clock")
        hbm_bw = q(m["hbm_bandwidth"], "bandwidth")
        smem = q(lim["max_shared_memory"], "bytes")
        util = m.get("utilization", {})
        borrowed = m.get("utilization_borrowed", {})
        return cls(
            name=m["name"], sm_count=m["sm_count"], clock_hz=clock,
            tensor_flops={k: q(v, "flops") for k, v in m["tensor_flops"].items()},
            vector_flops=q(m["vector_flops"], "flops"),
            hbm_capacity=q(m["hbm_capacity"], "bytes"), hbm_bandwidth=hbm_bw,
            l2_size=q(m["l2_size"], "bytes"),
            # Without a published L2 figure, assume ~2.5x HBM (A100: 5120 B/clk/SM-slice ~ 2.3x-3x HBM).
            l2_bandwidth=q(m["l2_bandwidth"], "bandwidth") if "l2_bandwidth" in m else 2.5 * hbm_bw,
            # 128 B/clk/SM is the shared-memory bandwidth of Volta through Hopper.
            smem_bandwidth_per_sm=(q(m["shared_memory_bandwidth_per_sm"], "bandwidth")
                                   if "shared_memory_bandwidth_per_sm" in m else 128.0 * clock),
            exp_per_sm_clock=float(m.get("exponentials_per_sm_clock", DEFAULT_EXP_PER_SM_CLOCK)),
            limits=SMLimits(
                max_threads=lim["max_threads"], max_threads_per_block=lim.get("max_threads_per_block", 1024),
                max_registers=lim["max_registers"], max_registers_per_thread=lim.get("max_registers_per_thread", 255),
                max_shared_memory=smem,
                max_shared_memory_per_block=q(lim.get("max_shared_memory_per_block", smem), "bytes"),
                max_blocks=lim["max_blocks"],
            ),
            launch_overhead_s=q(m.get("kernel_launch_overhead", "4 us"), "time"),
            framework_memory=q(m.get("framework_memory", "1 GiB"), "bytes"),
            utilization=Utilization(**util) if util else Utilization(),
            compute_capability=str(m.get("compute_capability", "")),
            memory_latency_s=q(m.get("memory_latency", 0.0), "time"),
            utilization_from=str(m.get("utilization_from", "" if util else "datasheet")),
            borrowed_from=str(borrowed.get("from", "")), borrowed=tuple(borrowed.get("constants", ())),
        )


def max_clock_hz(m: dict[str, Any]) -> float:
    """The highest SM clock the device of hardware mapping `m` runs: `max_clock` where its file gives one (a
    datasheet that quotes the tensor rates below the max boost, as H100's 1830 against 1980 MHz), else
    `clock` (the files whose clock is the boost). Read from the file, not kept in `HardwareSpec`: it bounds
    the input and changes no prediction, so it stays out of the case id."""
    return q(m.get("max_clock", m["clock"]), "frequency")


def locked_clock(hw: HardwareSpec, m: dict[str, Any], where: str, clock: Any, source: str,
                 key: str) -> HardwareSpec:
    """`hw` with its SM clock locked at `clock` (a frequency given at `source`'s `key`); a clock above the
    device's maximum (`max_clock_hz` of its mapping `m`, from `where`) is bad input: no GPU runs there, and
    scaling the datasheet rates up to it would predict a faster chip than exists."""
    hz = q(clock, "frequency")
    top = max_clock_hz(m)
    if hz > top:
        raise SpecError.at(source, key, f"{clock} is above {hw.name}'s highest SM clock ({where}: "
                           f"{'max_clock' if 'max_clock' in m else 'clock'}); allowed: a frequency > 0 and at "
                           f"most {top / 1e9:g} GHz")
    return hw.at_clock(hz)
