"""The paper's case studies (§6.1-6.4) on tiny slices of their experiments: the invariants their conclusions
rest on (a faster fabric never slows a mapping down, a fault never speeds a step up, more GPUs at a fixed
global batch never do less work), the expansion of fault sweeps, and the study tables. Not the paper's
numbers: those are another model's outputs (docs/case-studies.md)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml

from rapidllm.network.api import simulate_collective
from rapidllm.network.routing import Router
from rapidllm.network.topology import build_topology
from rapidllm.prediction import sweep
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import count_cases, load_experiment, raw_cases
from rapidllm.spec.network import FaultSpec, NetworkSpec, line_cables
from rapidllm.validate.case_studies import PAPER, run_study

PEAK_BF16_H100 = 989e12


@pytest.fixture(scope="module")
def superpod_slice() -> pd.DataFrame:
    """Two GPU counts, two layouts each (tp4 x cp4 with pp 16 or 32, dp what is left), both fabrics, selective
    recompute: 8 cases of the §6.1 experiment."""
    exp = load_experiment("config/experiments/case-superpod.yaml")
    exp = dataclasses.replace(exp, cross={"network": exp.cross["network"], "parallelism.recompute": ["selective"]},
                              factorize={"gpus": [512, 1024], "axes": ["dp", "tp", "pp", "cp"],
                                         "bounds": {"tp": [4, 4], "cp": [4, 4], "pp": [16, 32]}})
    return sweep(exp)


def test_superpod_ndr_never_slower_than_hdr_for_the_same_mapping(superpod_slice):
    ok = superpod_slice[superpod_slice.status == "ok"]
    p = ok.pivot_table(index=["world", "dp", "pp"], columns="network", values="step_time_s").dropna()
    assert len(p) >= 3
    assert (p["superpod-ndr"] <= p["superpod-h100-hdr"] * (1 + 1e-12)).all()
    # the fabric changes only communication: the compute of a mapping is the same on both
    c = ok.pivot_table(index=["world", "dp", "pp"], columns="network", values="compute_time_s").dropna()
    assert np.allclose(c["superpod-ndr"], c["superpod-h100-hdr"], rtol=1e-12)


def test_superpod_more_gpus_never_reduce_total_work(superpod_slice):
    ok = superpod_slice[(superpod_slice.status == "ok") & (superpod_slice.network == "superpod-ndr")].copy()
    model_flops = ok.mfu * PEAK_BF16_H100 * ok.world * ok.step_time_s
    hw_flops = ok.hfu * PEAK_BF16_H100 * ok.world * ok.step_time_s
    # a fixed global batch is the same model work whatever the GPU count (PaLM's count, attention unhalved)
    assert np.allclose(model_flops, model_flops.iloc[0], rtol=1e-9)
    # executed work (recompute included) and GPU-seconds: doubling dp (same tp, pp, cp) never reduces them;
    # each replica does half the micro-batches, plus the same bubble and a wider gradient reduction
    hw = ok.assign(hw=hw_flops, gpu_s=ok.world * ok.step_time_s).set_index(["pp", "world"])
    for pp in (16, 32):
        assert hw.hw[(pp, 1024)] >= hw.hw[(pp, 512)] * (1 - 1e-9)
        assert hw.gpu_s[(pp, 1024)] >= hw.gpu_s[(pp, 512)]


def test_superpod_table_and_claims(superpod_slice):
    table, compared = run_study("case-superpod", superpod_slice, pd.read_csv(PAPER))
    assert set(table.network) == {"superpod-ndr", "superpod-h100-hdr"}
    assert (table.layouts == table.invalid + table.infeasible + table.feasible).all()
    hdr = compared.set_index("quantity").ours
    assert hdr["hdr_over_ndr_best_at_max_gpus"] >= 1.0
    assert compared.set_index("quantity").paper["hdr_over_ndr_best_at_max_gpus"] == 1.64


@pytest.fixture(scope="module")
def faults_slice() -> pd.DataFrame:
    """The §6.2 sweep for its smallest torus (tp2 x cp3: 9 cables) and one fault kind of each sort: 28 cases."""
    exp = load_experiment("config/experiments/case-faults.yaml")
    exp = dataclasses.replace(exp, cases=[c for c in exp.cases if c["label"] == "tp2-cp3-dp4-pp4"])
    return sweep(exp)


def test_fault_sweep_places_every_kind_on_every_torus_cable(faults_slice):
    cables = line_cables("torus", 6, (2, 3))
    assert len(cables) == 9       # 3 rings of 2 (no wrap at extent 2: one cable each) + 2 rings of 3
    assert len(faults_slice) == 1 + 3 * len(cables)
    assert (faults_slice.status == "ok").all()
    links = set(faults_slice.meta_fault_link) - {""}
    assert links == {f"{a}-{b}" for a, b in cables}
    assert count_cases(load_experiment("config/experiments/case-faults.yaml")) == 6 + 3 * (3 * 48 + 2 * 24 + 9)


def test_a_fault_never_speeds_a_step_up_and_more_loss_hurts_more(faults_slice):
    base = faults_slice[faults_slice.meta_fault_kind == "none"].step_time_s.iloc[0]
    t = faults_slice[faults_slice.meta_fault_kind != "none"].pivot(index="meta_fault_link", columns="meta_fault_kind",
                                                                    values="step_time_s")
    assert (t >= base * (1 - 1e-12)).all().all()
    assert (t["soft-75"] >= t["soft-25"] * (1 - 1e-12)).all()
    assert t["soft-75"].max() > base          # some cable carries the TP or CP traffic


def test_faults_table(faults_slice):
    table, compared = run_study("case-faults", faults_slice, pd.read_csv(PAPER))
    assert set(table.fault_kind) == {"soft-25", "soft-75", "hard"}
    assert (table.placements == 9).all()
    assert (table.min_slowdown_pct >= -1e-9).all()
    ours = compared.set_index("quantity").ours
    assert ours["max_mean_slowdown_soft-75"] >= ours["max_mean_slowdown_soft-25"] >= 0
    assert np.isnan(ours["median_soft-75_tp8cp3_over_pp_heavy"])   # the paper's two layouts are not in the slice


TORUS = NetworkSpec.from_mapping({"name": "t", "dimensions": [
    {"topology": "torus", "size": 12, "shape": [4, 3], "link_bandwidth": "50 GB/s", "latency": "1 us"}]}, "test")


def test_hard_fault_never_speeds_a_collective_and_reroutes_over_healthy_links():
    ring = [0, 1, 2, 3]                            # the first TP ring of the 4 x 3 torus
    healthy = simulate_collective(TORUS, "all_reduce", 64e6, ring)
    dead = dataclasses.replace(TORUS, faults=(FaultSpec(link=(1, 2), failed=True),))
    broken = simulate_collective(dead, "all_reduce", 64e6, ring)
    assert broken.time_s >= healthy.time_s
    topo = build_topology(dead)
    router = Router(topo)
    route = router.route(1, 2)
    assert route and all(topo.alive[i] for i in route)
    assert not topo.alive[topo.link_of[(1, 2)]] and not topo.alive[topo.link_of[(2, 1)]]


def test_soft_fault_on_an_unused_link_changes_nothing():
    ring = [0, 1, 2, 3]
    healthy = simulate_collective(TORUS, "all_reduce", 64e6, ring)
    # cable 4-8 joins the second and third TP rings: no flow of the first ring's all-reduce crosses it
    elsewhere = dataclasses.replace(TORUS, faults=(FaultSpec(link=(4, 8), bandwidth_factor=0.25),))
    assert simulate_collective(elsewhere, "all_reduce", 64e6, ring).time_s == healthy.time_s


def test_fault_sweep_over_switched_and_auto_sized_dimensions():
    """User trial 3 (P6): a superpod's dimensions were refused (a switch; a fat tree of size 'auto'). Now
    each rank of rank 0's line has its cable into its switch or leaf swept, as node ids of the fabric sized
    for the layout: superpod-ndr at 64 GPUs has 8 NVLink switches (64..71), then rail 0's InfiniBand leaf
    (72, 32 ports: ranks 0, 8, .., 56 of an 8-node line)."""
    exp = load_experiment("config/experiments/case-faults.yaml")
    kinds = {"hard": {"failed": True}}
    links = {}
    for network, d in (("dgx-a100", 0), ("superpod-ndr", 0), ("superpod-ndr", 1)):
        swept = dataclasses.replace(exp, cases=[{"network": network, "parallelism": {"tp": 8, "dp": 8}}],
                                    fault_sweep={"dimension": d, "kinds": kinds})
        links[network, d] = [raw["meta"]["fault_link"] for _, raw in raw_cases(swept)]
    assert links["dgx-a100", 0] == ["", *(f"{r}-8" for r in range(8))]      # (64 GPUs: those rows are invalid)
    assert links["superpod-ndr", 0] == ["", *(f"{r}-64" for r in range(8))]
    assert links["superpod-ndr", 1] == ["", *(f"{8 * k}-72" for k in range(8))]
    bad = dataclasses.replace(exp, cases=[{"network": "dgx-a100", "parallelism": {"tp": 8}}],
                              fault_sweep={"dimension": 1, "kinds": kinds})
    with pytest.raises(SpecError, match="1 is not a dimension of"):
        count_cases(bad)


def _injection(name: str) -> np.ndarray:
    """Bandwidth out of each rank (B/s per direction), from the built fabric."""
    from rapidllm.spec.case import resolve_case
    net = resolve_case({"model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": name,
                        "workload": {"mode": "inference", "prompt_tokens": 8, "output_tokens": 1},
                        "parallelism": {"dp": 20}}, "test").network
    topo = build_topology(net)
    return np.bincount(topo.src, weights=topo.bandwidth, minlength=topo.n_ranks)[:topo.n_ranks]


def test_matched_bandwidth_fabrics_have_the_stated_injection():
    torus, fc, mesh, fc_total = (_injection(n) for n in
                                 ("wafer-torus", "wafer-fc", "wafer-mesh", "wafer-fc-mesh-total"))
    assert np.allclose(torus, 3000e9)                              # four 750 GB/s ports on every GPU
    assert np.allclose(fc, 3000e9, rtol=1e-6)                      # 19 links of 3000/19 GB/s
    assert mesh.sum() == pytest.approx(2 * 31 * 750e9)             # 31 cables of the 4 x 5 mesh, both ways
    assert fc_total.sum() == pytest.approx(mesh.sum(), rel=1e-6)   # the sensitivity fabric: the mesh's total


def test_skewed_routing_conserves_tokens_and_loads_the_hot_rank():
    from rapidllm.ops.workload import Shard, expert_load
    from rapidllm.spec.named import resolve_named
    from rapidllm.spec.model import ModelSpec
    m, src = resolve_named("model", "glm-4.5-air", "test", "model")
    model = ModelSpec.from_mapping(m, src)
    E, k = model.moe.experts, model.moe.top_k

    def busiest(factor: float) -> int:
        s = Shard(tokens=4096, batch=1, q_len=4096, kv_len=4096, tp=1, sp=False, ep=E, dtype_bytes=2, etp=1,
                  causal=True, hot_expert_factor=factor)
        return expert_load(model, s)[0]
    total = 4096 * E * k                      # tokens x top_k routed in the EP group (ep = E: one expert per rank)
    hot, balanced = busiest(2.0), busiest(1.0)
    assert balanced == total / E and hot == 2 * balanced
    rest = (total - hot) / (E - 1)            # what conservation leaves every other rank
    assert 0 < rest < balanced < hot and hot + (E - 1) * rest == pytest.approx(total)


def test_what_if_overrides_reach_into_named_specs_and_keep_the_file_as_input():
    from rapidllm.spec.experiment import Experiment, expand_with_cases, referenced_spec_files
    base = {"model": "glm-4.5-air", "hardware": "h100-sxm5-80gb", "network": "hier-ring",
            "workload": {"mode": "inference", "batch": 16, "prompt_tokens": 8, "output_tokens": 2}}
    exp = Experiment(name="t", source="test", base=base, cross={}, shard_size=8,
                     cases=[{"label": "2.5d"}, {"label": "3d", "hardware.hbm_bandwidth": "10.05 TB/s",
                                                  "network.dimensions.0.latency": "20 us"}],
                     factorize={"gpus": [8, 16], "axes": ["dp", "ep"], "bounds": {"dp": [8, 8], "ep": [8, 8]},
                                "per_replica": ["workload.batch"]})
    rows = expand_with_cases(exp)
    assert [r["label"] for r, _ in rows] == ["2.5d dp8 ep8", "3d dp8 ep8"]     # 16 GPUs: dp is bounded to 8
    (_, plain), (_, what_if) = rows
    assert plain.hardware.hbm_bandwidth == pytest.approx(3.35e12)
    assert what_if.hardware.hbm_bandwidth == pytest.approx(10.05e12)
    assert what_if.hardware.name == "h100-sxm5-80gb+hbm_bandwidth=10.05 TB/s"
    assert what_if.network.dimensions[0].latency_s == pytest.approx(20e-6)
    assert plain.network.dimensions[0].latency_s == pytest.approx(5e-6)     # the named file is untouched
    assert plain.workload.batch == what_if.workload.batch == 2               # 16 requests over 8 replicas
    assert "config/hardware/h100-sxm5-80gb.yaml" in referenced_spec_files(exp)


def test_per_replica_totals_split_over_dp_and_indivisible_ones_stay_invalid():
    from rapidllm.spec.experiment import Experiment, expand
    base = {"model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "batch": 12, "prompt_tokens": 8, "output_tokens": 2}}
    exp = Experiment(name="t", source="test", base=base, cross={}, cases=[{}], shard_size=8,
                     factorize={"gpus": 8, "axes": ["dp", "tp"], "per_replica": ["workload.batch"]})
    rows = {(r["dp"] if r["status"] == "ok" else r["label"]): r for r in expand(exp)}
    assert rows[1]["batch"] == 12 and rows[2]["batch"] == 6 and rows[4]["batch"] == 3
    bad = rows["dp8 tp1"]
    assert bad["status"] == "invalid" and "1.5" in bad["reason"]


def test_a_dotted_key_that_names_nothing_is_one_clear_error():
    from rapidllm.spec.experiment import Experiment, count_cases
    base = {"model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 8, "output_tokens": 2}}
    exp = Experiment(name="t", source="x.yaml", base=base, cross={"network.dimensions.5.latency": ["1 us"]},
                     cases=[{}], factorize=None, shard_size=8)
    with pytest.raises(SpecError, match="network.dimensions.5.latency"):
        count_cases(exp)


def test_topology_slice_richer_fabric_never_slower_for_the_same_layout():
    """§6.3 on Llama inference, tp 4 with dp 5 or pp 5: the torus adds links to the mesh at the same bandwidth,
    so no layout gets slower on it; the study table's speedups come out of the best layouts."""
    exp = load_experiment("config/experiments/case-topology.yaml")
    exp = dataclasses.replace(exp, cases=[c for c in exp.cases if c["label"] == "llama3.1-70b inference"],
                              cross={"network": ["wafer-mesh", "wafer-torus"]},
                              factorize={**exp.factorize, "bounds": {"tp": [4, 4], "cp": [1, 1], "ep": [1, 1]}})
    s = sweep(exp)
    ok = s[s.status == "ok"]
    p = ok.pivot_table(index=["dp", "pp"], columns="network", values="e2e_latency_s")
    assert len(p) == 2
    assert (p["wafer-torus"] <= p["wafer-mesh"] * (1 + 1e-12)).all()
    table, _ = run_study("case-topology", s, pd.read_csv(PAPER))
    assert (table[table.network == "wafer-torus"].speedup_over_mesh >= 1.0).all()


def test_hbm_slice_more_memory_bandwidth_never_slower_and_the_what_ifs_order():
    """§6.4 at 8 GPUs on one layout (tp 1, dp 8, ep 8): 2.5D < 3D throttled < 3D in throughput, and a 4x
    scale-up hop never helps."""
    exp = load_experiment("config/experiments/case-hbm.yaml")
    keep = {"h100-2.5d", "3d", "3d-throttled-73", "3d-4x-latency"}
    exp = dataclasses.replace(exp, cases=[c for c in exp.cases if c["label"] in keep],
                              factorize={**exp.factorize, "gpus": [8],
                                         "bounds": {"tp": [1, 1], "pp": [1, 1], "ep": [8, 8]}})
    s = sweep(exp)
    assert (s.status == "ok").all() and len(s) == 4
    thr = (s.tokens_per_s * s.dp).set_axis(s.label.str.split(" ").str[0])
    assert thr["h100-2.5d"] < thr["3d-throttled-73"] < thr["3d"]
    assert thr["3d-4x-latency"] <= thr["3d"]
    table, compared = run_study("case-hbm", s, pd.read_csv(PAPER))
    assert table.set_index("variant").over_h100_2_5d["h100-2.5d"] == 1.0


def test_topology_vit_slice_one_image_torus_never_slower_and_claims_are_read():
    """§6.3 with DINOv3 ViT-7B (bidirectional, 261 tokens): one image on tp 4 x pp 5, where every layer's
    TP all-reduce crosses the wafer; the torus only adds links, so it is never slower, and the study reads
    the ViT's speedups into its claims."""
    exp = load_experiment("config/experiments/case-topology-vit-b1.yaml")
    exp = dataclasses.replace(exp, cross={"network": ["wafer-mesh", "wafer-torus"]},
                              factorize={**exp.factorize, "bounds": {"tp": [4, 4], "pp": [5, 5]}})
    s = sweep(exp)
    ok = s[s.status == "ok"].set_index("network")
    assert len(ok) == 2 and (ok.output_tokens == 0).all()
    assert ok.e2e_latency_s["wafer-torus"] <= ok.e2e_latency_s["wafer-mesh"] * (1 + 1e-12)
    _, compared = run_study("case-topology-vit-b1", s, pd.read_csv(PAPER))
    vit = compared.set_index("quantity").ours["torus_over_mesh_inference_vit"]
    assert vit == pytest.approx(ok.e2e_latency_s["wafer-mesh"] / ok.e2e_latency_s["wafer-torus"])


TINY_STUDY = {"base": {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
                       "workload": {"mode": "inference", "prompt_tokens": 128, "output_tokens": 16, "batch": 1}},
              "cross": {"parallelism.tp": [1, 2]}}


@pytest.mark.parametrize("kind, key", [("faults", "fault_sweep"), ("superpod", "network"), ("topology", "cases")])
def test_a_case_study_without_what_its_table_reads_is_refused_at_load(tmp_path, kind: str, key: str) -> None:
    """An ordinary experiment named case-{kind}-* ran its sweep, then its case_study job ended in a KeyError or
    AttributeError traceback (no superpod-h100-hdr rows, no meta_fault_kind column, no 'MODEL MODE' labels)."""
    from rapidllm.validate.case_studies import check_study

    path = tmp_path / f"case-{kind}-mine.yaml"
    path.write_text(yaml.safe_dump({"name": f"case-{kind}-mine", **TINY_STUDY}))
    with pytest.raises(SpecError) as err:
        check_study(f"case-{kind}-mine", load_experiment(path))
    assert len(err.value.lines) == 1 and f"case-{kind}-mine.yaml: {key}: " in err.value.lines[0]


def test_the_shipped_case_studies_pass_the_load_check() -> None:
    from rapidllm.spec.paths import config_dir
    from rapidllm.validate.case_studies import check_study

    for path in sorted(config_dir("experiment").glob("case-*.yaml")):
        check_study(path.stem, load_experiment(path))
