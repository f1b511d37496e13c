"""The named hardware and network library: every YAML validates, parses, and carries datasheet numbers.

Reference values come from ../shared/references/gpu_specs.csv (NVIDIA datasheets) and
node_interconnect_specs.csv, converted to SI (bytes, bytes/s, FLOP/s, Hz).
"""
from __future__ import annotations

import pytest

from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import HardwareSpec, locked_clock, max_clock_hz
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec
from rapidllm.spec.paths import known_names

HARDWARE = known_names("hardware")
NETWORKS = known_names("network")
GiB = 2**30
MiB = 2**20


def hardware(name: str) -> HardwareSpec:
    mapping, where = resolve_named("hardware", name, "test", "hardware")
    return HardwareSpec.from_mapping(mapping, where)


def network(name: str) -> NetworkSpec:
    mapping, where = resolve_named("network", name, "test", "network")
    return NetworkSpec.from_mapping(mapping, where)


def test_required_names_exist():
    assert {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200", "b200"} <= set(HARDWARE)
    assert {"dgx-a100", "dgx-h100", "superpod-hdr", "superpod-ndr", "torus2d", "wafer-mesh"} <= set(NETWORKS)


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_parses_and_is_sane(name):
    mapping, _ = resolve_named("hardware", name, "test", "hardware")
    assert mapping["name"] == name and mapping.get("source")
    hw = hardware(name)
    assert hw.peak_flops("bf16") > hw.vector_flops > 0
    assert 1e9 < hw.clock_hz < 3e9
    assert hw.l2_size < hw.hbm_capacity
    assert hw.limits.max_shared_memory_per_block <= hw.limits.max_shared_memory
    assert hw.limits.max_threads >= hw.limits.max_threads_per_block
    # the three calibrated constants are fractions of the datasheet peaks (rapidllm calibrate writes them)
    for value in (hw.utilization.compute, hw.utilization.hbm, hw.utilization.network):
        assert 0.0 < value <= 1.0
    assert 0 < hw.launch_overhead_s < 20e-6
    assert 0 < hw.framework_memory < 4 * GiB


# gpu_specs.csv: bf16/fp16/fp8/tf32 dense TFLOP/s, FP32 TFLOP/s, HBM TB/s, SM count, boost MHz
CSV = {
    "a100-sxm4-80gb": dict(bf16=312, fp16=312, fp8=None, tf32=156, fp32=19.5, hbm=2.00, sms=108, mhz=1410),
    "h100-sxm5-80gb": dict(bf16=989, fp16=989, fp8=1979, tf32=494.5, fp32=67, hbm=3.35, sms=132, mhz=1830),
    "h200": dict(bf16=989, fp16=989, fp8=1979, tf32=494.5, fp32=67, hbm=4.80, sms=132, mhz=1830),
    "b200": dict(bf16=2250, fp16=2250, fp8=4500, tf32=1125, fp32=80, hbm=8.00, sms=None, mhz=1965),
}


@pytest.mark.parametrize("name", sorted(CSV))
def test_hardware_matches_gpu_specs_csv(name):
    hw, ref = hardware(name), CSV[name]
    for dtype in ("bf16", "fp16", "fp8", "tf32"):
        if ref[dtype] is None:
            assert dtype not in hw.tensor_flops
        else:
            assert hw.tensor_flops[dtype] == pytest.approx(ref[dtype] * 1e12)
    assert hw.vector_flops == pytest.approx(ref["fp32"] * 1e12)
    # the CSV rounds A100-80GB's 2.039 TB/s to 2.00
    assert hw.hbm_bandwidth == pytest.approx(ref["hbm"] * 1e12, rel=0.02)
    assert hw.clock_hz == pytest.approx(ref["mhz"] * 1e6)
    if ref["sms"]:
        assert hw.sm_count == ref["sms"]


def test_exact_si_values():
    a100 = hardware("a100-sxm4-80gb")
    assert a100.tensor_flops["bf16"] == 312e12
    assert a100.hbm_bandwidth == pytest.approx(2.039e12)
    assert a100.hbm_capacity == 80 * GiB              # "80GB" A100 = 81920 MiB
    assert a100.l2_size == 40 * MiB
    assert a100.clock_hz == pytest.approx(1.41e9)
    assert a100.limits.max_shared_memory == 164 * 1024 and a100.limits.max_shared_memory_per_block == 163 * 1024
    a100_40 = hardware("a100-sxm4-40gb")
    assert a100_40.hbm_bandwidth == pytest.approx(1.555e12) and a100_40.hbm_capacity == 40 * GiB
    h100 = hardware("h100-sxm5-80gb")
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h100.tensor_flops["fp8"] == pytest.approx(1979e12)
    assert h100.l2_size == 50 * MiB
    assert h100.limits.max_shared_memory == 228 * 1024 and h100.limits.max_shared_memory_per_block == 227 * 1024
    # datasheet "80GB" / "141GB" / "180GB" are within a few % of what the device exposes
    for name, gb in (("a100-sxm4-80gb", 80), ("h100-sxm5-80gb", 80), ("h200", 141), ("b200", 180)):
        assert hardware(name).hbm_capacity == pytest.approx(gb * 1e9, rel=0.08), name
        assert hardware(name).hbm_capacity >= gb * 1e9 * 0.99, name


@pytest.mark.parametrize("name", NETWORKS)
def test_network_parses(name):
    mapping, _ = resolve_named("network", name, "test", "network")
    assert mapping["name"] == name and mapping.get("source")
    net = network(name)
    assert net.dimensions and all(d.link_bandwidth > 0 and d.latency_s > 0 for d in net.dimensions)
    assert net.axis_order == ("tp", "cp", "ep", "dp", "pp")
    for d in net.dimensions:
        if d.shape:
            assert d.topology in ("mesh", "torus", "kingmesh")


@pytest.mark.parametrize("name, cc, mib", [("gb200", "10.0", 189471), ("gb300", "10.3", 284208)])
def test_grace_blackwell_gpus_are_the_nvl72_rack_figures_per_gpu(name, cc, mib):
    """NVIDIA's GB200 / GB300 NVL72 pages give rack totals with sparsity: 360 PFLOPS FP16/BF16, 720 FP8,
    180 TF32 and 576 TB/s of HBM over 72 GPUs; dense is half. Capacity is nvidia-smi's total, as b200."""
    hw = hardware(name)
    for dtype, rack_sparse in (("bf16", 360e15), ("fp16", 360e15), ("fp8", 720e15), ("tf32", 180e15)):
        assert hw.tensor_flops[dtype] == pytest.approx(rack_sparse / 72 / 2)
    assert hw.hbm_bandwidth == pytest.approx(576e12 / 72)
    assert hw.hbm_capacity == mib * MiB and hw.compute_capability == cc
    assert hw.peak_flops("bf16") > hardware("b200").peak_flops("bf16")    # 1200 / 1400 W against B200's 1000 W


def test_node_networks_match_nvlink_specs():
    # node_interconnect_specs.csv: per-GPU NVLink per direction 300 GB/s (DGX A100), 450 GB/s (DGX H100)
    assert network("dgx-a100").dimensions[0].link_bandwidth == 300e9
    assert network("dgx-h100").dimensions[0].link_bandwidth == 450e9
    for name in ("dgx-a100", "dgx-h100"):
        (dim,) = network(name).dimensions
        assert (dim.topology, dim.size) == ("switch", 8)


@pytest.mark.parametrize("name, nvlink, nic", [("superpod-hdr", 300e9, 200e9 / 8), ("superpod-ndr", 450e9, 400e9 / 8)])
def test_superpods(name, nvlink, nic):
    net = network(name)
    node, fabric = net.dimensions
    assert (node.topology, node.size, node.link_bandwidth) == ("switch", 8, nvlink)
    assert fabric.topology == "fat_tree" and fabric.rail_optimized and fabric.leaf_size and fabric.spines
    assert fabric.link_bandwidth == pytest.approx(nic)  # one 200/400 Gb/s NIC per GPU
    assert fabric.size == 0                              # 'auto' until sized for a world
    sized = net.sized_for(256, "test")
    assert sized.total_size == 256 and sized.dimensions[1].size == 32


def segment_gpus(gpus: int, per_tray: int = 4, trays_per_rack: int = 18) -> int:
    """GPUs per NVLink domain of a Megatron-Bridge GB200/GB300 run (scripts/performance/utils/executors.py at
    v0.1.0rc4 and v0.2.0): a job of more than one rack's trays gets the SLURM segment equal to the largest
    divisor of its node count not above 18; a smaller job lies in one rack."""
    nodes = gpus // per_tray
    if nodes <= trays_per_rack:
        return gpus
    return per_tray * max(k for k in range(1, trays_per_rack + 1) if nodes % k == 0)


@pytest.mark.parametrize("name, nic", [("nvl72-gb200", 400e9 / 8), ("nvl72-gb300", 800e9 / 8)])
def test_nvl72_networks_hold_the_runs_nvlink_domains(name, nic):
    net = network(name)
    rack, fabric = net.dimensions
    # NVLink5 900 GB/s per direction per GPU, one switch domain per segment of 16 trays = 64 GPUs
    assert (rack.topology, rack.link_bandwidth) == ("switch", 900e9) and rack.in_switch_reduction_s
    assert rack.size == segment_gpus(128) == segment_gpus(256) == segment_gpus(64) == 64
    assert fabric.topology == "fat_tree" and fabric.rail_optimized and fabric.link_bandwidth == pytest.approx(nic)
    for gpus, racks in ((8, 1), (64, 1), (128, 2), (256, 4)):   # the suite's job sizes
        assert net.sized_for(gpus, "test").dimensions[1].size == racks


def test_direct_networks():
    torus = network("torus2d").dimensions[0]
    assert (torus.topology, torus.shape, torus.size) == ("torus", (8, 8), 64)
    wafer = network("wafer-mesh").dimensions[0]
    assert (wafer.topology, wafer.shape, wafer.link_bandwidth) == ("mesh", (4, 5), 750e9)


# The highest SM clock each file states: H100 SXM5 and H800 their 1980 MHz max boost (the 67 TFLOP/s FP32
# figure's clock; tensor rates are quoted at 1830 MHz), the others the boost their `clock` is.
MAX_MHZ = {"a100-sxm4-40gb": 1410, "a100-sxm4-80gb": 1410, "b200": 1965, "gb200": 1965, "gb300": 1965,
           "h100-sxm5-80gb": 1980, "h200": 1830, "h800": 1980}


@pytest.mark.parametrize("name", HARDWARE)
def test_a_locked_clock_goes_up_to_the_devices_maximum_and_no_higher(name):
    mapping, where = resolve_named("hardware", name, "test", "hardware")
    hw = HardwareSpec.from_mapping(mapping, where)
    top = max_clock_hz(mapping)
    assert top == pytest.approx(MAX_MHZ[name] * 1e6) and top >= hw.clock_hz
    at_top = locked_clock(hw, mapping, where, f"{top / 1e6} MHz", "case.yaml", "clock")
    assert at_top.tensor_flops["bf16"] == pytest.approx(hw.tensor_flops["bf16"] * top / hw.clock_hz)
    with pytest.raises(SpecError, match=rf"^case.yaml: clock: {top / 1e6 + 1:g} MHz is above {name}'s highest SM "
                                        rf"clock \(.*{name}.yaml: (max_)?clock\); allowed: a frequency > 0 and at "
                                        rf"most {top / 1e9:g} GHz$"):
        locked_clock(hw, mapping, where, f"{top / 1e6 + 1:g} MHz", "case.yaml", "clock")
