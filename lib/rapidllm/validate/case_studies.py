"""The RAPID-LLM paper's case studies (§6.1-6.4): a study's sweep summary -> its table and its claims.

Each study is an ordinary experiment (config/experiments/case-*.yaml) run through the pipeline; this module
reduces the one-row-per-case summary to what the paper reports (best mapping per GPU count, slowdown per
fault, speedup per topology, gain per what-if) and to `claims`: one row per quantity the paper states, ours
beside the paper's. The paper's numbers are another model's outputs, not measurements, so nothing here is
fitted to them; validation/case_studies/rapid_llm_paper.csv holds them with the sentence they come from.
docs/case-studies.md discusses every disagreement.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import Experiment, raw_cases

PAPER = Path("validation/case_studies/rapid_llm_paper.csv")
LAYOUT = ["dp", "tp", "pp", "cp", "ep"]
NDR, HDR = "superpod-ndr", "superpod-h100-hdr"


def feasible(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows with a prediction (memory-feasible, valid layouts)."""
    return summary[summary.status == "ok"].copy()


def mapping_name(row: pd.Series) -> str:
    """The paper's layout notation, tp8-cp3-dp4-pp1 (with -epN when experts are sharded)."""
    name = "-".join(f"{a}{int(row[a])}" for a in ("tp", "cp", "dp", "pp"))
    return name + (f"-ep{int(row['ep'])}" if row.get("ep", 1) > 1 else "")


# ---- §6.1 SuperPOD scaling, NDR vs HDR ---------------------------------------------------------------

def superpod_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per fabric and GPU count: how many layouts were tried / valid / memory-feasible, the best mapping and
    its step time, the spread of all feasible ones, scaling efficiency against the smallest GPU count with a
    feasible mapping, and (HDR rows) the best-to-best slowdown against NDR."""
    rows = []
    ok = feasible(summary)
    for (net, world), g in summary.groupby(["network", "world"], sort=True):
        f = ok[(ok.network == net) & (ok.world == world)]
        rec = {"network": net, "world": int(world), "layouts": len(g), "invalid": int((g.status == "invalid").sum()),
               "infeasible": int((g.status == "infeasible").sum()), "feasible": len(f)}
        if len(f):
            best = f.loc[f.step_time_s.idxmin()]
            rec.update(best_step_time_s=best.step_time_s, best_mapping=mapping_name(best),
                       best_recompute=best.recompute,
                       best_mfu=best.mfu, best_exposed_comm_s=best.exposed_comm_s, best_bubble_s=best.bubble_s,
                       median_step_time_s=f.step_time_s.median(), worst_step_time_s=f.step_time_s.max())
        rows.append(rec)
    t = pd.DataFrame(rows)
    if "best_step_time_s" not in t:
        return t
    for net, g in t[t.best_step_time_s.notna()].groupby("network"):
        first = g.sort_values("world").iloc[0]
        t.loc[g.index, "scaling_efficiency"] = (first.best_step_time_s * first.world) / (g.best_step_time_s * g.world)
    ndr = t[t.network == NDR].set_index("world").best_step_time_s
    t["best_over_ndr"] = t.best_step_time_s / t.world.map(ndr)
    return t


def same_mapping_ratio(summary: pd.DataFrame) -> pd.DataFrame:
    """HDR over NDR step time for every mapping feasible on both (same layout and recompute)."""
    keys = ["world", *LAYOUT, "recompute"]
    ok = feasible(summary)
    p = ok.pivot_table(index=keys, columns="network", values="step_time_s").dropna()
    p["hdr_over_ndr"] = p[HDR] / p[NDR]
    return p.reset_index()


def superpod_claims(summary: pd.DataFrame) -> dict[str, float]:
    t = superpod_table(summary)
    top = int(t.world.max())
    hdr = t[(t.network == HDR) & t.best_over_ndr.notna()]
    ndr = t[t.network == NDR]
    ratio = same_mapping_ratio(summary)
    at_top = ratio[ratio.world == top]
    return {
        "hdr_over_ndr_best_at_max_gpus": float(hdr[hdr.world == top].best_over_ndr.iloc[0]),
        "hdr_over_ndr_best_max_below_max_gpus": float(hdr[hdr.world < top].best_over_ndr.max()),
        "ndr_scaling_efficiency_at_max_gpus": float(ndr[ndr.world == top].scaling_efficiency.iloc[0]),
        "hdr_over_ndr_median_pp_light_at_max_gpus": float(at_top[at_top.pp <= 4].hdr_over_ndr.median()),
        "hdr_over_ndr_median_pp_heavy_at_max_gpus": float(at_top[at_top.pp >= 16].hdr_over_ndr.median()),
    }


# ---- §6.2 Faulty links -----------------------------------------------------------------------------

PP_HEAVY, TP_HEAVY = "tp4-cp3-dp2-pp4", "tp8-cp3-dp4-pp1"


def fault_slowdowns(summary: pd.DataFrame) -> pd.DataFrame:
    """Every fault placement with its layout (the case label's first word) and its slowdown (%) against the
    same layout without a fault."""
    f = feasible(summary)
    f["config"] = f.label.str.split(" ").str[0]
    base = f[f.meta_fault_kind == "none"].set_index("config").step_time_s
    f["slowdown_pct"] = 100 * (f.step_time_s / f.config.map(base) - 1)
    return f


def faults_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per layout and fault kind: placements, fault-free step time, mean / median / min / max slowdown."""
    f = fault_slowdowns(summary)
    base = f[f.meta_fault_kind == "none"].set_index("config").step_time_s
    g = f[f.meta_fault_kind != "none"].groupby(["config", "meta_fault_kind"], sort=True)
    t = g.slowdown_pct.agg(placements="size", mean_slowdown_pct="mean", median_slowdown_pct="median",
                           min_slowdown_pct="min", max_slowdown_pct="max").reset_index()
    t["median_step_time_s"] = g.step_time_s.median().to_numpy()
    t.insert(2, "fault_free_step_time_s", t.config.map(base))
    return t.rename(columns={"meta_fault_kind": "fault_kind"})


def faults_claims(summary: pd.DataFrame) -> dict[str, float]:
    t = faults_table(summary)
    means = t.pivot(index="config", columns="fault_kind", values="mean_slowdown_pct")
    med = t.pivot(index="config", columns="fault_kind", values="median_step_time_s")
    free = t.drop_duplicates("config").set_index("config").fault_free_step_time_s
    out = {f"max_mean_slowdown_{k}": float(means[k].max()) for k in ("soft-75", "soft-25", "hard")}
    named = TP_HEAVY in free.index and PP_HEAVY in free.index     # a slice of the sweep may lack them
    out["fault_free_tp8cp3_over_pp_heavy"] = float(100 * (free[TP_HEAVY] / free[PP_HEAVY] - 1)) if named else np.nan
    out["median_soft-75_tp8cp3_over_pp_heavy"] = (
        float(100 * (med.loc[TP_HEAVY, "soft-75"] / med.loc[PP_HEAVY, "soft-75"] - 1)) if named else np.nan)
    out["configs_soft-75_worse_than_hard"] = float((means["soft-75"] > means["hard"]).sum())
    return out


# ---- §6.3 Topology on a waferscale-style system ----------------------------------------------------

MESH, TORUS, FC, FC_TOTAL = "wafer-mesh", "wafer-torus", "wafer-fc", "wafer-fc-mesh-total"
VIT = "dinov3-vit7b16"


def metric(row: pd.Series | pd.DataFrame):
    """What a study minimizes: the step time of a training case, the request latency of an inference one
    (an encoder's: the latency of its one forward pass over the batch)."""
    return row.step_time_s.where(row["mode"] == "training", row.e2e_latency_s)


def topology_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per model, mode and fabric: the best memory-feasible layout, its time, and its speedup over the mesh's
    best (mesh time / this fabric's time; > 1 is faster)."""
    ok = feasible(summary)
    ok["time_s"] = metric(ok)
    rows = []
    for (model, mode, net), g in summary.assign(model=summary.label.str.split(" ").str[0],
                                                mode=summary.label.str.split(" ").str[1]).groupby(
            ["model", "mode", "network"], sort=True):
        f = ok.loc[ok.index.intersection(g.index)]
        rec = {"model": model, "mode": mode, "network": net, "layouts": len(g), "feasible": len(f)}
        if len(f):
            best = f.loc[f.time_s.idxmin()]
            rec.update(best_mapping=mapping_name(best), best_time_s=best.time_s,
                       best_exposed_comm_s=best.exposed_comm_s)
        rows.append(rec)
    t = pd.DataFrame(rows)
    if "best_time_s" not in t:
        return t
    mesh = t[t.network == MESH].set_index(["model", "mode"]).best_time_s
    t["speedup_over_mesh"] = [mesh.get((m, d), np.nan) / v for m, d, v in zip(t.model, t["mode"], t.best_time_s)]
    return t


def topology_claims(summary: pd.DataFrame) -> dict[str, float]:
    t = topology_table(summary).set_index(["model", "mode", "network"]).speedup_over_mesh

    def s(model: str, mode: str, net: str) -> float:
        return float(t.get((model, mode, net), np.nan))

    models = sorted({m for m, _, _ in t.index})
    out = {}
    for net, tag in ((FC, ""), (FC_TOTAL, f"[{FC_TOTAL}]")):
        out[f"max_fc_over_mesh_inference_llama{tag}"] = s("llama3.1-70b", "inference", net)
        out[f"max_fc_over_mesh_inference_moe{tag}"] = s("glm-4.5-air", "inference", net)
        out[f"max_fc_over_mesh_training{tag}"] = float(pd.Series([s(m, "training", net) for m in models]).max())
    out["max_torus_over_mesh_training"] = float(pd.Series([s(m, "training", TORUS) for m in models]).max())
    out["min_torus_over_mesh_inference"] = float(pd.Series([s(m, "inference", TORUS) for m in models]).min())
    out["torus_over_mesh_inference_vit"] = s(VIT, "inference", TORUS)
    out["fc_over_mesh_inference_vit"] = s(VIT, "inference", FC)
    out["torus_inference_vit_over_moe"] = s(VIT, "inference", TORUS) / s("glm-4.5-air", "inference", TORUS)
    return out


# ---- §6.4 3D-stacked HBM what-if -------------------------------------------------------------------

BASE_25D, BASE_3D = "h100-2.5d", "3d"


def hbm_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per device variant and GPU count: the best memory-feasible layout by throughput (all requests in flight
    x output tokens / request latency = tokens/s of one replica x dp), normalised to the 80 GB 2.5D H100's best
    and compared with the 3D baseline's; NaN where a variant has no feasible layout at that count."""
    ok = feasible(summary)
    ok["throughput"] = ok.tokens_per_s * ok.dp
    rows = []
    for (variant, world), g in summary.assign(variant=summary.label.str.split(" ").str[0]).groupby(
            ["variant", "world"], sort=True):
        f = ok.loc[ok.index.intersection(g.index)]
        rec = {"variant": variant, "world": int(world), "layouts": len(g), "feasible": len(f)}
        if len(f):
            best = f.loc[f.throughput.idxmax()]
            rec.update(best_mapping=mapping_name(best), throughput_tokens_per_s=best.throughput,
                       e2e_latency_s=best.e2e_latency_s, peak_memory_bytes=best.peak_memory_bytes)
        rows.append(rec)
    t = pd.DataFrame(rows)
    if "throughput_tokens_per_s" not in t:
        t["throughput_tokens_per_s"] = np.nan
    for ref, col in ((BASE_25D, "over_h100_2_5d"), (BASE_3D, "gain_over_3d_pct")):
        r = t[t.variant == ref].set_index("world").throughput_tokens_per_s
        t[col] = t.throughput_tokens_per_s / t.world.map(r)
    t["gain_over_3d_pct"] = 100 * (t.gain_over_3d_pct - 1)
    return t


def hbm_claims(summary: pd.DataFrame) -> dict[str, float]:
    t = hbm_table(summary)
    g = t.pivot(index="world", columns="variant", values="gain_over_3d_pct")
    g = g.reindex(columns=sorted(set(g.columns) | {"3d-160gb", "3d-2x-fabric", "3d-160gb-2x-fabric",
                                                   "3d-throttled-73", "3d-4x-latency", "3d-skew-2x"}))
    low = int(g.index.min())
    above, mid = g.index > low, (g.index > low) & (g.index <= 32)
    over = t.set_index(["variant", "world"]).over_h100_2_5d
    return {
        "capacity_160gb_gain_at_8_gpus": float(g.loc[low, "3d-160gb"]),
        "capacity_160gb_max_gain_above_8_gpus": float(g.loc[above, "3d-160gb"].max()),
        "fabric_2x_max_gain": float(g["3d-2x-fabric"].max()),
        "both_gain_at_8_gpus": float(g.loc[low, "3d-160gb-2x-fabric"]),
        "both_gain_16_32_gpus": float(g.loc[mid, "3d-160gb-2x-fabric"].max()),
        "throttle_73_max_loss": float(-g["3d-throttled-73"].min()),
        "latency_4x_max_loss": float(-g["3d-4x-latency"].min()),
        "skew_2x_max_loss": float(-g["3d-skew-2x"].min()),
        "3d_over_2_5d_at_8_gpus": float(100 * (over.get((BASE_3D, low), np.nan) - 1)),
    }


# ---- registry and the comparison table ---------------------------------------------------------------

KINDS: dict[str, tuple[Callable[[pd.DataFrame], pd.DataFrame], Callable[[pd.DataFrame], dict[str, float]]]] = {
    "superpod": (superpod_table, superpod_claims),
    "faults": (faults_table, faults_claims),
    "topology": (topology_table, topology_claims),
    "hbm": (hbm_table, hbm_claims),
}


def study_kind(experiment: str) -> str:
    """The study an experiment belongs to: case-superpod and its variants (case-superpod-gb256) -> superpod."""
    for kind in KINDS:
        if experiment == f"case-{kind}" or experiment.startswith(f"case-{kind}-"):
            return kind
    raise KeyError(f"{experiment!r} is not a case study; known: {', '.join(f'case-{k}' for k in KINDS)}")


def check_study(experiment: str, exp: Experiment) -> None:
    """What a case study's table reads, checked when the workflow loads: an experiment named case-{kind}-*
    without it ran its sweep and then ended in a KeyError / AttributeError traceback in the case_study job.
    (The hbm table reads only labels and columns every summary has.)"""
    kind = study_kind(experiment)
    raws = list(raw_cases(exp)) if kind in ("superpod", "topology") else []
    if kind == "faults" and not exp.fault_sweep:
        raise SpecError.at(exp.source, "fault_sweep", "a faults case study (case-faults-*) compares fault "
                           "placements with the fault-free case; allowed: a fault_sweep as in case-faults.yaml")
    if kind == "superpod":
        nets = {c["case"]["network"] if isinstance(c["case"].get("network"), str) else None for _, c in raws}
        if not {NDR, HDR} <= nets:
            raise SpecError.at(exp.source, "network", f"a superpod case study (case-superpod-*) compares {NDR} "
                               f"with {HDR} (named networks); it lacks {' and '.join(sorted({NDR, HDR} - nets))}")
    if kind == "topology":
        bad = [label for label, _ in raws if label.split(" ")[1:2] not in (["training"], ["inference"])]
        if bad:
            raise SpecError.at(exp.source, "cases", f"a topology case study's (case-topology-*) labels are "
                               f"'MODEL MODE ...' (e.g. '{VIT} inference'); {bad[0]!r} is not")


def comparison(experiment: str, claims: dict[str, float], paper: pd.DataFrame) -> pd.DataFrame:
    """Ours beside the paper's value for every quantity of the study (ratio = ours / paper where the paper
    gives a number)."""
    kind = study_kind(experiment)
    p = paper[paper.study == kind].set_index("quantity")
    rows = []
    for q, ours in claims.items():
        base = q.split("[")[0]                      # "quantity[variant]": a sensitivity reading of it
        value = p.paper_value.get(base, np.nan)
        rows.append({"study": kind, "experiment": experiment, "quantity": q, "unit": p.unit.get(base, ""),
                     "paper": value, "ours": ours,
                     "ratio": ours / value if pd.notna(value) and value != 0 else np.nan,
                     "paper_claim": p.paper_claim.get(base, "")})
    return pd.DataFrame(rows)


def run_study(experiment: str, summary: pd.DataFrame, paper: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(study table, paper comparison) of one case-study experiment."""
    table, claims = KINDS[study_kind(experiment)]
    return table(summary), comparison(experiment, claims(summary), paper)
