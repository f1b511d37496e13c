"""Best-layout search (docs/search.md): the pruned search returns exactly what the exhaustive one does on
dense training, MoE training, inference and MoE inference spaces; every bound is below the simulated value it bounds; a
layout built by the search is the case `resolve_case` builds; bad input is one line and exit 2; shards
merge to the unsharded answer; an interrupted write leaves nothing behind."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

import rapidllm
from rapidllm.memory.model import memory_for_case, training_liveness
from rapidllm.memory.state import FRAMEWORKS
from rapidllm.prediction import predict
from rapidllm.search import load_search, merge, search
from rapidllm.engine.comm_cost import CommCost
from rapidllm.search.bounds import optimistic_record, shard_work, stage_profile
from rapidllm.search.space import layouts
from rapidllm.search.tails import layer_floor, refinable, step_tail, template_spans
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named
from conftest import ROOT

DENSE = {"name": "dense", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16},
         "gpus": [4, 8], "top": 3,
         "space": {"micro_batch": [1, 2], "recompute": ["none", "full"], "zero": [0, 1, 3], "cp": [1, 2],
                   "sp": [True]}}
MOE = {"name": "moe", "model": "mixtral-8x7b", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
       "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16},
       "gpus": 16, "top": 3,
       "space": {"micro_batch": [1], "recompute": ["full"], "zero": [1], "cp": [1], "sp": [True],
                 "attention_impl": ["flash"], "pp": [1, 2]}}
INFERENCE = {"name": "inference", "model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
             "workload": {"mode": "inference", "prompt_tokens": 512, "output_tokens": 128},
             "gpus": {"min": 2, "max": 8}, "top": 2, "objective": "throughput_per_gpu",
             "slo": {"itl": "40 ms"}, "space": {"batch": [1, 8, 32], "attention_impl": ["flash"]}}

# the framework overlap switches as axes (docs/search.md "Overlap switches"): searched both ways where they
# apply (TP userbuffers with tp > 1 and sp, the parameter all-gather with ZeRO-1/2, the EP all-to-all with ep > 1)
DENSE_OVERLAPS = {**DENSE, "name": "dense-overlaps", "gpus": [8],
                  "space": {**DENSE["space"], "zero": [0, 1, 2], "tp_comm_overlap": [False, True],
                            "overlap_param_gather": [False, True]}}
MOE_OVERLAPS = {**MOE, "name": "moe-overlaps", "space": {**MOE["space"], "moe_a2a_overlap": [False, True],
                                                         "tp_comm_overlap": [False, True]}}

# inference MoE on the serving engines' expert grid (ep inside tp, etp = tp / ep; docs/engine.md "Expert grid")
MOE_INFERENCE = {"name": "moe-inference", "model": "mixtral-8x7b", "hardware": "h100-sxm5-80gb",
                 "network": "dgx-h100", "workload": {"mode": "inference", "prompt_tokens": 512, "output_tokens": 64},
                 "gpus": [4, 8], "top": 3, "objective": "throughput_per_gpu",
                 "space": {"batch": [8, 64], "attention_impl": ["flash"]}}

# each device on its own fabric (`systems`, user trial 3 P7): a candidate per pair, not every device crossed
# with every network
SYSTEMS = {"name": "systems", "model": "llama3.1-8b",
           "systems": [{"hardware": "a100-sxm4-80gb", "network": "dgx-a100"},
                       {"hardware": "h100-sxm5-80gb", "network": "dgx-h100"}],
           "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16}, "gpus": 8, "top": 3,
           "space": {"micro_batch": [1, 2], "recompute": ["none", "full"], "zero": [0, 1], "cp": [1], "sp": [True]}}


ALL = [DENSE, MOE, INFERENCE, MOE_INFERENCE, DENSE_OVERLAPS, MOE_OVERLAPS, SYSTEMS]


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s["name"])
def test_pruned_search_equals_exhaustive(spec: dict) -> None:
    pruned = search(spec)
    exhaustive = search(spec, prune=False)
    assert not pruned.empty
    pd.testing.assert_frame_equal(pruned, exhaustive)
    c_p, c_e = pruned.attrs["counts"], exhaustive.attrs["counts"]
    assert c_p["layouts"] == c_e["layouts"]
    for c in (c_p, c_e):   # every layout is counted once: removed for one reason, or ranked
        assert c["layouts"] == c["ranked"] + sum(c[r] for r in ("invalid", "filtered", "slo", "dominated",
                                                                  "out_of_memory"))
    assert c_p["evaluated"] <= c_e["evaluated"] and c_p["dominated"] > 0    # pruning skipped layouts
    # ranks are 1..n best first, each GPU count has its own group ranks, and its best row is first there
    assert list(pruned["rank"]) == list(range(1, len(pruned) + 1))
    assert (pruned.groupby("gpus").group_rank.min() == 1).all()
    for c in (c_p, c_e):     # the switches a space searches ran both ways, and were counted so
        for s, n in c["overlaps"].items():
            assert n["layouts_on"] + n["layouts_off"] == c["layouts"]
            assert n["evaluated_on"] + n["evaluated_off"] == c["evaluated"]
            if s in spec["space"]:       # [false, true]: each layout it applies to, once off and once on
                assert n["applies_off"] == n["layouts_on"]
            else:                        # off by default
                assert n["layouts_on"] == 0 and 0 < n["applies_off"] <= n["layouts_off"]
    assert all(c_e["overlaps"][s]["evaluated_on"] > 0 for s in spec["space"] if s in c_e["overlaps"])
    for c in (c_p, c_e):     # the breakdown (user trial 3 P5): each axis splits each removal's layouts exactly
        assert sum(c["out_of_memory_by_check"].values()) == c["out_of_memory"]
        for category, axes in c["by_axis"].items():
            total = c["layouts"] if category == "layouts" else c[category]
            assert bool(axes) == bool(total) and all(sum(n.values()) == total for n in axes.values())
            assert all(n.get(v, 0) <= c["by_axis"]["layouts"][a][v] for a, n in axes.items() for v in n)
    # what pruning does not decide is the same in both: the layouts, the rules, the persistent-state check
    for category in ("layouts", "invalid"):
        assert c_p["by_axis"][category] == c_e["by_axis"][category]
    assert c_p["out_of_memory_by_check"]["persistent_state"] == c_e["out_of_memory_by_check"]["persistent_state"]


# cost objectives (docs/cost.md): $ per step or per million tokens rise with the step time, a token rate per
# watt falls, so bounds prune them as they prune the time or rate they are priced from
COSTED = [{**INFERENCE, "name": "usd-per-million-tokens", "slo": {},
           "objective": {"column": "usd_per_million_tokens", "direction": "min"}},
          {**INFERENCE, "name": "tokens-per-watt", "slo": {},
           "objective": {"column": "tokens_per_s_per_watt", "direction": "max"}},
          {**DENSE, "name": "usd-per-step", "objective": {"column": "usd_per_step", "direction": "min"}}]


@pytest.mark.parametrize("spec", COSTED, ids=lambda s: s["name"])
def test_cost_objectives_prune_to_the_exhaustive_answer(spec: dict) -> None:
    """A search ranked by a cost column returns what the exhaustive search does (review 17: no test ran a
    cost `objective.column`), and its bounds pruned layouts."""
    pruned = search(spec)
    assert not pruned.empty and pruned.attrs["counts"]["dominated"] > 0
    pd.testing.assert_frame_equal(pruned, search(spec, prune=False))


def test_each_device_is_priced_with_its_own_cost_inputs() -> None:
    """An inline copy of a config device with twice the capital cost: named like the config device it was
    priced with the config device's inputs and labelled like it (review 17, finding 5), so that is refused in
    one line; under a name of its own it is priced with its own inputs. The two devices time every layout
    alike, so each layout's $ per million tokens differs exactly by the ratio of their $/GPU-hour."""
    from rapidllm.cost.config import hardware_cost

    h100 = yaml.safe_load((ROOT / "config" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
    dearer = {**h100, "cost": {**h100["cost"], "operating": {**h100["cost"]["operating"], "capital_usd": {
        **h100["cost"]["operating"]["capital_usd"], "value": 2 * h100["cost"]["operating"]["capital_usd"]["value"]}}}}
    spec = {**COSTED[0], "hardware": ["h100-sxm5-80gb", dearer], "gpus": [2], "top": 20}
    with pytest.raises(SpecError) as err:
        load_search(spec, "spec.yaml")
    assert err.value.lines == ["spec.yaml: hardware.1: device name 'h100-sxm5-80gb' is hardware.0's too, for another "
                               "device; give each device its own name (an inline variant: name: "
                               "h100-sxm5-80gb-variant), so the ranked table and a cost objective tell them apart"]
    paired = {k: v for k, v in spec.items() if k not in ("hardware", "network")}
    one = load_search({**paired, "systems": [{"hardware": "h100-sxm5-80gb", "network": n}   # one device, two fabrics
                                             for n in ("dgx-h100", "superpod-ndr")]})
    assert len({c.label for c in one.candidates}) == 2
    with pytest.raises(SpecError, match=r"^spec.yaml: systems.1.hardware: device name 'h100-sxm5-80gb' is "
                                        r"systems.0.hardware's too, for another device"):
        load_search({**paired, "systems": [{"hardware": "h100-sxm5-80gb", "network": "dgx-h100"},
                                           {"hardware": dearer, "network": "superpod-ndr"}]}, "spec.yaml")
    dearer["name"] = "h100-capital-x2"
    df = search({**spec, "hardware": ["h100-sxm5-80gb", dearer]})
    assert set(df.candidate) == {"llama3.1-70b / h100-sxm5-80gb / dgx-h100", "llama3.1-70b / h100-capital-x2 / dgx-h100"}
    rate = {"h100-sxm5-80gb": hardware_cost("h100-sxm5-80gb").operating.usd_per_gpu_hour,
            "h100-capital-x2": hardware_cost(dearer).operating.usd_per_gpu_hour}
    assert rate["h100-capital-x2"] > rate["h100-sxm5-80gb"]
    key = ["gpus", "tp", "pp", "batch"]
    cheap, dear = (df[df.candidate.str.contains(f"/ {n} /")].set_index(key).sort_index() for n in rate)
    assert len(cheap) == len(dear) > 0 and (cheap.tokens_per_s == dear.tokens_per_s).all()
    assert (dear.usd_per_million_tokens / cheap.usd_per_million_tokens).to_numpy() == pytest.approx(
        rate["h100-capital-x2"] / rate["h100-sxm5-80gb"])


SERVING = {"name": "serving", "model": "deepseek-v2-lite", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
           "workload": {"mode": "inference", "batch": 8, "prompt_tokens": 512, "output_tokens": 16}, "gpus": 8,
           "top": 4, "parallelism": {"redundant_experts": 8, "moe_dispatcher": "deepep", "microbatch_overlap": 2},
           "space": {"dp": [1, 8], "attention_impl": ["flash3"]}}


def test_fixed_parallelism_settings_reach_every_layout() -> None:
    """`parallelism` of a search spec (not searched) is in every layout's case: a ranked row equals the case
    file with its columns and those settings; layouts the settings do not suit (ep 1 cannot hold replicas)
    are invalid; the two-micro-batch overlap has no bound, so nothing is pruned and pruning changes nothing."""
    df = search(SERVING)
    assert df.attrs["counts"]["invalid"] > 0 and len(df) >= 2
    pd.testing.assert_frame_equal(df, search(SERVING, prune=False))
    for row in df.itertuples():
        layout = {k: int(getattr(row, k)) for k in ("dp", "tp", "pp", "ep")}
        case = {k: SERVING[k] for k in ("model", "hardware", "network", "workload")}
        case.update(attention_impl="flash3", parallelism={**layout, **SERVING["parallelism"]})
        assert predict(case).e2e_latency_s == row.e2e_latency_s
        assert predict(dict(case, parallelism=layout)).e2e_latency_s != row.e2e_latency_s


def test_inference_bound_holds_under_speculative_decoding() -> None:
    """A decode step that verifies MTP drafts emits tokens_per_step tokens per sequence (1.9 here): the ITL
    bound is divided by it as the engine's ITL is (undivided it was ~1.9x the simulated ITL, and a pruned
    search could drop the best layouts)."""
    model, _ = resolve_named("model", "deepseek-v2-lite", "test", "model")
    case = resolve_case(dict(model=dict(model, mtp_depth=1), hardware="h100-sxm5-80gb", network="dgx-h100",
                             attention_impl="flash3", workload={"mode": "inference", "batch": 8, "prompt_tokens": 512,
                                                                "output_tokens": 64, "draft_tokens": 1,
                                                                "draft_acceptance": 0.9}), "test")
    bound, rec = optimistic_record(case, shard_work(case)), predict(case).to_dict()
    for col in ("ttft_s", "itl_s", "e2e_latency_s"):
        assert bound[col] <= rec[col], (col, bound[col], rec[col])
    assert bound["tokens_per_s"] >= rec["tokens_per_s"]


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s["name"])
def test_bounds_never_exceed_the_simulation(spec: dict) -> None:
    """The property pruning rests on, checked on every feasible layout of the space."""
    loaded = load_search(spec)
    checked = refined = 0
    for cand in loaded.candidates:
        for gpus in loaded.gpus:
            for lay in layouts(loaded, cand, gpus):
                if lay.case is None or not memory_for_case(lay.case).feasible:
                    continue
                work = shard_work(lay.case)
                bounds = [optimistic_record(lay.case, work)]
                if refinable(lay.case):       # the search's levels: + tail and floor, + spans, + parameter gather
                    cost = CommCost(lay.case)
                    spans = template_spans(lay.case, cost) or work
                    floor = layer_floor(lay.case, cost)
                    for w, gather in ((work, False), (spans, False), (spans, True)):
                        bounds.append(optimistic_record(lay.case, w, stage_profile(lay.case, w, floor),
                                                        step_tail(lay.case, cost, gather)))
                    steps = [b["step_time_s"] for b in bounds]
                    assert steps == sorted(steps), steps          # each level at least the one before
                    refined += steps[-1] > steps[0]
                rec = predict(lay.case).to_dict()
                for bound in bounds:
                    for col in ("step_time_s", "ttft_s", "itl_s", "e2e_latency_s"):
                        if bound and col in bound:
                            assert bound[col] <= rec[col], (lay.columns, col, bound[col], rec[col])
                checked += 1
    assert checked >= 10
    assert refined or spec in (INFERENCE, MOE_INFERENCE)     # inference steps are not refined


def test_interleaved_layouts_interleave() -> None:
    """Default virtual stages: 2-8 with at least one layer per chunk (uneven splits included), only where the
    micro-batches per step are a multiple of pp (else the schedule would be 1F1B again)."""
    loaded = load_search({**DENSE, "gpus": 8, "space": {"micro_batch": [1, 2], "recompute": ["none"],
                                                        "zero": [0], "cp": [1], "sp": [True], "tp": [1]}})
    seen = set()
    for lay in layouts(loaded, loaded.candidates[0], 8):
        c = lay.columns
        if c["schedule"] == "interleaved":
            assert (16 // (c["dp"] * c["micro_batch"])) % c["pp"] == 0
            seen.add((c["pp"], c["virtual_stages"]))
    assert (2, 8) in seen and (4, 3) in seen          # 32 layers: 4 x 3 chunks split unevenly
    assert all(2 <= v <= 8 and pp * v <= 32 for pp, v in seen)


def test_search_layout_is_the_resolved_case() -> None:
    loaded = load_search(MOE)
    cand = loaded.candidates[0]
    seen = 0
    for lay in layouts(loaded, cand, 16):
        if lay.case is None:
            continue
        par = {k: v for k, v in lay.case.parallelism.__dict__.items() if k != "recompute_modules" and v is not None}
        mapping = {"model": "mixtral-8x7b", "hardware": "h100-sxm5-80gb", "network": MOE["network"],
                   "workload": {**lay.case.workload.__dict__},
                   "attention_impl": lay.case.attention_impl,
                   "parallelism": {**par, "recompute_modules": list(lay.case.parallelism.recompute_modules)}}
        assert resolve_case(mapping, "x").case_id == lay.case.case_id
        liveness = training_liveness(lay.case, FRAMEWORKS[lay.case.framework])
        assert memory_for_case(lay.case, liveness=liveness) == memory_for_case(lay.case)
        seen += 1
    assert seen >= 4


def test_shards_merge_to_the_whole_answer() -> None:
    whole = search(DENSE)
    parts = [search(DENSE, shard=(i, 3)) for i in range(3)]
    merged = merge(parts, load_search(DENSE))
    pd.testing.assert_frame_equal(merged.drop(columns=["layout_index"]), whole.drop(columns=["layout_index"]))
    assert merged.attrs["counts"]["layouts"] == whole.attrs["counts"]["layouts"]
    for category in ("layouts", "invalid"):           # the shards' breakdowns add up to the whole's
        assert merged.attrs["counts"]["by_axis"][category] == whole.attrs["counts"]["by_axis"][category]


def test_pareto_front_across_gpu_counts() -> None:
    df = search(DENSE)
    best = df[df.group_rank == 1].sort_values("gpus")
    # the smallest GPU count's best is always on the front; a larger count is on it only if it is faster
    assert best.pareto.iloc[0]
    assert list(best.pareto) == [True] + [b < a for a, b in zip(best.step_time_s, best.step_time_s.iloc[1:])]


def test_package_is_callable_whatever_was_imported_first() -> None:
    import rapidllm.search.run  # noqa: F401

    assert callable(rapidllm.search)
    df = rapidllm.search({**DENSE, "gpus": 8, "top": 1})
    assert len(df) == 1


@pytest.mark.parametrize("change,key", [
    ({"space": {"pipeline": [2]}}, "space"),
    ({"space": {"recompute": ["sometimes"]}}, "space.recompute.0"),
    ({"objective": "ttft_s"}, "objective"),
    ({"gpus": {"min": 8, "max": 4}}, "gpus"),
    ({"objective": {"column": "speed", "direction": "max"}}, "objective.column"),
    ({"constraints": {"filters": {"tpp": {"max": 4}}}}, "constraints.filters.tpp"),
    ({"constraints": {"filters": {"peak_memory_bytes": {"max": "70 GHz"}}}}, "constraints.filters.peak_memory_bytes.max"),
    ({"constraints": {"filters": {"mfu": {"min": "5 GiB"}}}}, "constraints.filters.mfu.min"),
    ({"constraints": {"filters": {"tokens_per_s": {"min": "5 ms"}}}}, "constraints.filters.tokens_per_s.min"),
    ({"objective": {"column": "schedule", "direction": "min"}}, "objective.column"),
    ({"parallelism": {"tp_comm_overlap": True}}, "parallelism.tp_comm_overlap"),
    ({"usd_per_gpu_hour": 2.49}, "usd_per_gpu_hour"),
    ({"workload": INFERENCE["workload"], "space": {"tp_comm_overlap": [True]}}, "space.tp_comm_overlap"),
])
def test_bad_spec_is_one_line(change: dict, key: str) -> None:
    with pytest.raises(SpecError) as err:
        load_search({**DENSE, **change}, "spec.yaml")
    assert len(err.value.lines) == 1 and f"spec.yaml: {key}" in err.value.lines[0]


@pytest.mark.parametrize("kwargs, key", [({"top": -1}, "top"), ({"top": 0}, "top"), ({"top": "3"}, "top"),
                                         ({"shard": (5, 2)}, "shard"), ({"shard": (0, 0)}, "shard"),
                                         ({"shard": 3}, "shard")])
def test_bad_call_arguments_are_one_line_before_any_work(kwargs: dict, key: str) -> None:
    """top -1 and shard (5, 2) returned an empty table, top '3' and shard (0, 0) raised deep inside."""
    with pytest.raises(SpecError) as err:
        search(DENSE, **kwargs)
    assert len(err.value.lines) == 1 and err.value.lines[0].startswith(f"search: {key}: ")


def test_any_mapping_is_a_spec() -> None:
    from types import MappingProxyType

    proxied, plain = load_search(MappingProxyType(DENSE)), load_search(DENSE)
    assert dataclasses.replace(proxied, objective=plain.objective) == plain


def test_cli_empty_space_and_bad_axis_exit_2(tmp_path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text(yaml.safe_dump({**DENSE, "space": {"tp": [3]}, "gpus": 3}))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "search", str(empty), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "no feasible layout" in run.stderr and "parallelism.tp" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "o").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**DENSE, "space": {"tensor": [2]}}))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "search", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "unknown key(s) 'tensor'" in run.stderr


def test_cli_json_and_files(tmp_path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**DENSE, "gpus": 8}))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "search", str(spec), "--json", "--top", "2",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, check=True)
    out = json.loads(run.stdout)
    assert out["objective"] == {"column": "step_time_s", "direction": "min"} and len(out["rows"]) == 2
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["counts.json", "pareto.pdf", "pareto.png",
                                                                   "ranked.csv", "ranked.parquet"]
    assert pd.read_csv(tmp_path / "o" / "ranked.csv").step_time_s.is_monotonic_increasing


def test_interrupted_write_leaves_no_files(tmp_path, monkeypatch) -> None:
    from rapidllm.pipeline import search as outputs

    df = search({**DENSE, "gpus": 8, "top": 1})

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs, "search_figure", interrupt)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_search(df, load_search({**DENSE, "gpus": 8}), tmp_path / "o")
    assert list((tmp_path / "o").iterdir()) == []


def test_memory_precheck_never_rejects_a_feasible_layout() -> None:
    """The search's shortcut (the first and last stage alone against the HBM, with the shared liveness)
    rejects only layouts the memory model calls infeasible, and here it rejects some."""
    from rapidllm.search.run import _Shared

    loaded = load_search({**DENSE, "gpus": 8, "space": {"micro_batch": [1, 4], "cp": [1]}})
    shared, rejected = _Shared(), 0
    for lay in layouts(loaded, loaded.candidates[0], 8):
        if lay.case is not None and not shared.may_fit(lay):
            assert not memory_for_case(lay.case).feasible
            rejected += 1
    assert rejected > 0


def test_shard_work_sums_the_priced_table() -> None:
    """The bound's per-section compute is the engine's priced table summed (training and inference)."""
    from rapidllm.ops.price import price_case

    for spec in (MOE, INFERENCE):
        loaded = load_search(spec)
        lay = next(x for x in layouts(loaded, loaded.candidates[0], loaded.gpus[-1]) if x.case is not None)
        ops = price_case(lay.case)
        ops = ops.assign(t=ops.time_s * ops["count"])
        work = shard_work(lay.case)
        fwd = ops[ops.phase == "fwd"].groupby("section").t.sum()
        bwd = ops[ops.phase.isin(["bwd", "recompute"])].groupby("section").t.sum()
        assert work.fwd == pytest.approx(fwd.to_dict(), rel=1e-12)
        assert work.bwd == pytest.approx(bwd.to_dict(), rel=1e-12)


def test_ctrl_c_during_a_search_leaves_no_files(tmp_path) -> None:
    import signal

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**DENSE, "space": {}, "gpus": {"min": 8, "max": 64}}))
    proc = subprocess.Popen([sys.executable, "-m", "rapidllm.cli", "search", str(spec), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "enumerate and bound" not in seen:        # the progress bar: the search is running
        chunk = proc.stderr.read(1)
        assert chunk, "search ended before it could be interrupted"
        seen += chunk
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "no output files written" in err
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_time_to_train_ranks_as_step_time() -> None:
    """time_to_train_s = ceil(tokens / tokens per step) x step time: the same order as the step time."""
    tokens = 1e9
    df = search({**DENSE, "objective": "time_to_train_s", "train_tokens": tokens})
    base = search(DENSE)
    steps = -(-tokens // (16 * 2048))
    assert list(df.layout_index) == list(base.layout_index)
    assert (df.time_to_train_s == steps * df.step_time_s).all()


def test_filters_and_max_gpus() -> None:
    limit = 70e9
    spec = {**DENSE, "constraints": {"max_gpus": 4, "filters": {"tp": {"max": 1}, "peak_memory_bytes": {"max": limit}}}}
    df = search(spec)
    assert set(df.gpus) == {4} and (df.tp == 1).all() and (df.peak_memory_bytes <= limit).all()
    assert df.attrs["counts"]["filtered"] > 0
    pd.testing.assert_frame_equal(df, search(spec, prune=False))


def test_shared_work_equals_each_layouts_own() -> None:
    """The search shares bounds, memory verdicts, tails and rates between layouts (FlashAttention-2 and -3
    share the memory verdict, ZeRO variants the compute bound, a GPU count the rates' case) and builds a
    layout's case only where a shared result is missing: every value equals what a search that has seen
    nothing else computes from the layout's own case."""
    from rapidllm.search.run import FULL, SPANS, TAIL, _Shared
    from rapidllm.search.space import rebuild

    loaded = load_search({"name": "shared", "model": "llama3.1-8b", "hardware": "h100-sxm5-80gb",
                          "network": "dgx-h100", "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16},
                          "gpus": 8, "space": {"micro_batch": [1, 2], "recompute": ["none", "full"], "cp": [1],
                                               "tp": [1, 2], "zero": [0, 1, 3], "sp": [True]}})
    cand = loaded.candidates[0]
    shared, checked, refined, kernels = _Shared(), 0, 0, set()
    for lay in layouts(loaded, cand, 8):
        if lay.reason:
            continue
        alone = rebuild(cand, lay.key, loaded.options)
        assert shared.state_fits(lay) == _Shared().state_fits(alone)
        assert shared.may_fit(lay) == _Shared().may_fit(alone)
        assert shared.optimistic(lay) == _Shared().optimistic(alone)
        if shared.may_fit(lay) and checked % 3 == 0:          # a third of them: spans replay the templates
            fresh = _Shared()
            fresh.optimistic(alone)
            for level in (TAIL, SPANS, FULL):
                assert shared.refined(lay, level) == fresh.refined(alone, level), (lay.columns, level)
            refined += 1
        kernels.add(lay.key[-1])
        checked += 1
    assert checked >= 100 and refined >= 10 and kernels == {"flash", "flash3"}, (checked, refined)


def test_workload_micro_batch_is_the_axis_default() -> None:
    """A training search spec's `workload.micro_batch` was silently ignored (the axis searched 1, 2, 4, 8, or
    the space's values): it is now the axis's only value when the space does not list one, like an inference
    workload's `batch`, and a value outside the space's list is refused."""
    from rapidllm.search.space import axis_defaults
    spec = {**DENSE, "workload": {**DENSE["workload"], "micro_batch": 2}, "space": {}}
    loaded = load_search(spec)
    assert axis_defaults(loaded, loaded.candidates[0])["micro_batch"] == [2]
    assert axis_defaults(load_search({**spec, "space": {"micro_batch": [2, 4]}}), loaded.candidates[0])["micro_batch"] == [2, 4]
    with pytest.raises(SpecError, match=r"workload.micro_batch: 2 is not among space.micro_batch \[1\]"):
        load_search({**spec, "space": {"micro_batch": [1]}})


def test_fp8_recipe_reaches_the_searched_cases() -> None:
    """A search spec takes the case key `fp8_recipe` (the schema refused it, so a blockwise-FP8 case could not be
    searched and the explorer's search of one ranked tensorwise layouts): the candidates' cases carry it, and
    it needs precision fp8 as in a case file."""
    from rapidllm.explore.search_hook import search_spec
    spec = {**MOE, "precision": "fp8", "fp8_recipe": "blockwise"}
    assert {c.base.fp8_recipe for c in load_search(spec).candidates} == {"blockwise"}
    assert {c.base.fp8_recipe for c in load_search({**MOE, "precision": "fp8"}).candidates} == {"tensorwise"}
    with pytest.raises(SpecError, match="fp8_recipe: .*allowed: fp8_recipe only with precision fp8"):
        load_search({**MOE, "fp8_recipe": "blockwise"})
    case = {k: spec[k] for k in ("model", "hardware", "network", "workload", "precision", "fp8_recipe")}
    assert search_spec(case, 16, "step_time_s")["fp8_recipe"] == "blockwise"


def test_zero3_bound_of_a_two_kind_model_stays_below_the_simulation() -> None:
    """DeepSeek-V2-Lite (a dense layer and 26 MoE layers) under full_shard: the composer exposes one gather
    and one reduce-scatter per chunk whatever its layer kinds, so the refined bound adds one floor per chunk
    too (it added one per kind, 3% above the simulated step, and pruning could drop the best layout)."""
    case = resolve_case({"model": "deepseek-v2-lite", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16, "micro_batch": 1},
                         "parallelism": {"dp": 16, "fsdp": "full_shard"}}, "test")
    assert refinable(case)
    cost = CommCost(case)
    spans = template_spans(case, cost) or shard_work(case)
    floor = layer_floor(case, cost)
    assert floor[0] > 0
    bound = optimistic_record(case, spans, stage_profile(case, spans, floor), step_tail(case, cost, True))
    assert bound["step_time_s"] <= predict(case).to_dict()["step_time_s"]


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_group_level_objectives_read_only_what_the_group_shares(mode: str) -> None:
    """A group-level objective is derived on the group's case for every layout of the group, so it must give
    the same value on any of them. Inference throughput per GPU reads the layout's dp (a record's rate is one
    replica's): on the group's case a dp 2 layout's bound was halved (or doubled) and pruning could drop it."""
    from rapidllm.search.objectives import NAMED, objective_from_spec
    spec = {**INFERENCE, "gpus": 8, "space": {"batch": [8], "attention_impl": ["flash"], "dp": [1, 2]}} \
        if mode == "inference" else {**DENSE, "gpus": 8}
    loaded = load_search(spec)
    cases = [lay.case for cand in loaded.candidates for lay in layouts(loaded, cand, 8) if lay.case is not None]
    assert len({c.parallelism.dp for c in cases}) > 1
    rec = {"tokens_per_s": 1000.0, "step_time_s": 1.0, "mfu": 0.5, "e2e_latency_s": 1.0, "ttft_s": 0.1,
           "itl_s": 0.01}
    for name in NAMED[mode]:
        obj = objective_from_spec(name, mode, 1e9, "test")
        if obj.group_level:
            assert len({obj.derive(rec, c) for c in cases}) == 1, name
        else:
            assert len({obj.derive(rec, c) for c in cases}) > 1, name


@pytest.mark.parametrize("switch", ["tp_comm_overlap", "overlap_param_gather"])
def test_overlap_true_is_on_wherever_it_applies(switch: str) -> None:
    """`space.SWITCH: [true]` turns the switch on in exactly the layouts it applies to (Megatron-Bridge's
    `tp_comm_overlap = TP > 1` with sp) and leaves every other layout as it was, off; [false, true] adds one
    layout per applicable one. Before, a fixed `parallelism.SWITCH: true` made every other layout invalid."""
    from rapidllm.spec.case import overlap_applies
    from rapidllm.spec.layout import Parallelism

    base = {**DENSE, "space": {**DENSE["space"], "zero": [0, 1, 2, 3], "sp": [True, False]}}
    keys = {}
    for values in ([False], [True], [False, True]):
        loaded = load_search({**base, "space": {**base["space"], switch: values}})
        cand = loaded.candidates[0]
        keys[tuple(values)] = [(lay.columns, lay.reason) for g in loaded.gpus for lay in layouts(loaded, cand, g)]
    off, on, both = keys[(False,)], keys[(True,)], keys[(False, True)]
    assert len(on) == len(off)
    applies = 0
    for (c_off, r_off), (c_on, r_on) in zip(off, on):
        par = Parallelism(**{k: c_off[k] for k in ("dp", "tp", "pp", "cp", "sp", "zero", "fsdp")})
        assert c_on[switch] == overlap_applies(switch, par, True)
        assert {**c_on, switch: False} == c_off and not c_off[switch]
        assert r_on.split(":")[0] == r_off.split(":")[0]          # no layout made invalid by the switch
        applies += c_on[switch]
    assert 0 < applies < len(off) and len(both) == len(off) + applies
    df = search({**base, "gpus": [8], "space": {**base["space"], switch: [True]}}, top=2)
    for row in df.itertuples():                    # a ranked row is the case with the switch as its column says
        par = {k: getattr(row, k) for k in ("dp", "tp", "pp", "cp", "sp", "zero", "recompute", "schedule",
                                           "virtual_stages", switch)}
        case = {k: DENSE[k] for k in ("model", "hardware", "network")}
        case.update(workload={**DENSE["workload"], "micro_batch": int(row.micro_batch)},
                    attention_impl=row.attention_impl, parallelism={k: v.item() if hasattr(v, "item") else v
                                                                     for k, v in par.items()})
        assert predict(case).step_time_s == row.step_time_s


def test_exact_ties_rank_by_lower_peak_memory() -> None:
    """Of two layouts that step equally fast (ZeRO-1 and ZeRO-2 often do), the one needing less memory ranks
    first; the ZeRO-1 row with 13-25 GiB more ranked above by enumeration order (user trial 3, P5)."""
    from rapidllm.search.run import rank

    df = pd.DataFrame({"candidate": ["c"] * 3, "gpus": [8] * 3, "group_rank": [1, 2, 3],
                       "step_time_s": [2.0, 2.0, 1.0], "peak_memory_bytes": [9e10, 6e10, 7e10],
                       "layout_index": [0, 1, 2]})
    assert list(rank(df, "step_time_s", "min").layout_index) == [2, 1, 0]
    spec = {**DENSE, "space": {**DENSE["space"], "zero": [1, 2]}, "top": 6}
    ranked = search(spec)
    pd.testing.assert_frame_equal(ranked, search(spec, prune=False))
    ties = 0
    for _, group in ranked.groupby(["gpus", "step_time_s"]):
        assert list(group.peak_memory_bytes) == sorted(group.peak_memory_bytes)
        ties += len(group) > 1 and group.peak_memory_bytes.nunique() > 1
    assert ties            # the space has exact ties (ZeRO-1 / ZeRO-2) that memory tells apart


def test_filter_bounds_take_units() -> None:
    """`peak_memory_bytes: {max: 70 GiB}` was refused ("not of type number"); a *_bytes or *_s column's bound
    now takes units like every other quantity of a spec, and means the same as the number."""
    given = load_search({**DENSE, "constraints": {"filters": {"peak_memory_bytes": {"max": "70 GiB"},
                                                              "step_time_s": {"min": "5 ms"}}}})
    assert given.filters == {"peak_memory_bytes": (-float("inf"), 70 * 2**30), "step_time_s": (5e-3, float("inf"))}
    assert search({**DENSE, "constraints": {"filters": {"peak_memory_bytes": {"max": "30 GiB"}}}}).equals(
        search({**DENSE, "constraints": {"filters": {"peak_memory_bytes": {"max": 30 * 2**30}}}}))


def test_systems_pair_each_device_with_its_own_fabric() -> None:
    """`systems` lists (hardware, network) pairs: a candidate per pair, each running on its own fabric only
    (hardware and network lists cross every device with every fabric: user trial 3 put the B200 on an
    NVLink-4 SuperPOD). A pair's rows are exactly the crossed search's rows of that pair, and each is the
    case `predict` runs on that pair."""
    pairs = [(p["hardware"], p["network"]) for p in SYSTEMS["systems"]]
    spec = load_search(SYSTEMS)
    assert [(c.base.hardware.name, c.network.name) for c in spec.candidates] == pairs
    crossed_spec = {**{k: v for k, v in SYSTEMS.items() if k != "systems"},
                    "hardware": [h for h, _ in pairs], "network": [n for _, n in pairs]}
    assert len(load_search(crossed_spec).candidates) == 4
    labels = [f"llama3.1-8b / {h} / {n}" for h, n in pairs]
    df, crossed = search(SYSTEMS), search(crossed_spec)
    assert set(df.candidate) == set(labels)
    mine = df.sort_values(["candidate", "group_rank"]).drop(columns=["rank", "layout_index"])
    theirs = crossed[crossed.candidate.isin(labels)].sort_values(["candidate", "group_rank"])
    pd.testing.assert_frame_equal(mine.reset_index(drop=True),
                                  theirs.drop(columns=["rank", "layout_index"]).reset_index(drop=True))
    for row in df.itertuples():
        hardware, network = pairs[labels.index(row.candidate)]
        case = {"model": "llama3.1-8b", "hardware": hardware, "network": network, "workload":
                {**SYSTEMS["workload"], "micro_batch": int(row.micro_batch)}, "attention_impl": row.attention_impl,
                "parallelism": {"dp": int(row.dp), "tp": int(row.tp), "pp": int(row.pp), "sp": bool(row.sp),
                                "zero": int(row.zero), "recompute": row.recompute, "schedule": row.schedule,
                                "virtual_stages": int(row.virtual_stages)}}
        assert predict(case).step_time_s == row.step_time_s
        other = next(n for _, n in pairs if n != network)     # the other pair's fabric gives another step
        assert predict({**case, "network": other}).step_time_s != row.step_time_s


@pytest.mark.parametrize("systems, key, said", [
    ([{"hardware": "h100-sxm5-80gb"}], "systems.0", "missing key 'network'"),
    ([{"hardware": "h100-sxm5-80gb", "network": "dgx-h100", "fabric": "x"}], "systems.0", "unknown key(s) 'fabric'"),
    ([{"hardware": "h100-sxm5-80gb", "network": "dgx-h100"}] * 2, "systems", "non-unique"),
    ([{"hardware": "h100", "network": "dgx-h100"}], "hardware", "did you mean h100-sxm5-80gb"),
    ("dgx-h100", "systems", "not of type"),
])
def test_bad_systems_are_one_line(systems: object, key: str, said: str) -> None:
    plain = {k: v for k, v in SYSTEMS.items() if k != "systems"}
    with pytest.raises(SpecError) as err:
        load_search({**plain, "systems": systems}, "spec.yaml")
    assert len(err.value.lines) == 1 and f"spec.yaml: {key}" in err.value.lines[0] and said in err.value.lines[0]


@pytest.mark.parametrize("drop", [(), ("network",), ("hardware", "network")])
def test_systems_or_hardware_and_network_one_form_only(drop: tuple[str, ...]) -> None:
    """Both forms, or neither whole, are refused in one line that names both."""
    spec = {k: v for k, v in {**SYSTEMS, "hardware": "b200", "network": "dgx-h100"}.items() if k not in drop}
    if len(drop) == 2:
        spec.pop("systems")
    with pytest.raises(SpecError) as err:
        load_search(spec, "spec.yaml")
    assert len(err.value.lines) == 1 and "(top level): needs hardware and network" in err.value.lines[0]
    assert "or systems" in err.value.lines[0]


def test_cost_objective_prices_each_system_and_names_its_key() -> None:
    """A cost objective prices each pair's device once; a device without cost inputs is named by its key in
    `systems`; the spec's basis travels with the ranking, with the one-line caveat of a GPU-price basis
    (user trial 3 P7), and a rental rate has none."""
    cost = {"objective": {"column": "usd_per_million_tokens", "direction": "min"}}
    spec = load_search({**SYSTEMS, **cost})
    assert sorted(spec.costs) == ["a100-sxm4-80gb", "h100-sxm5-80gb"]
    assert {hw: c.operating.basis for hw, c in spec.costs.items()} == {"a100-sxm4-80gb": "system_share",
                                                                        "h100-sxm5-80gb": "gpu"}
    note = spec.cost_note()       # two bases, two caveats, each named by its device
    assert note.startswith("a100-sxm4-80gb: a server's price share") and "h100-sxm5-80gb: the GPU's price" in note
    assert "usd_per_gpu_hour: RATE" in note
    df = search({**SYSTEMS, **cost, "systems": SYSTEMS["systems"][1:]})
    assert df.attrs["objective"]["cost_basis"] == {"h100-sxm5-80gb": "gpu"}
    assert "without servers, network and facility" in df.attrs["objective"]["cost_note"]
    rented = load_search({**SYSTEMS, **cost, "usd_per_gpu_hour": 2.49})
    assert rented.cost_note() is None and {c.operating.basis for c in rented.costs.values()} == {"rental"}
    assert load_search(SYSTEMS).costs == {} and load_search(SYSTEMS).cost_note() is None
    device, _ = resolve_named("hardware", "h100-sxm5-80gb", "test", "hardware")
    uncosted = {**{k: v for k, v in device.items() if k != "cost"}, "name": "my-gpu"}
    with pytest.raises(SpecError) as err:
        load_search({**SYSTEMS, **cost, "systems": [*SYSTEMS["systems"],
                                                    {"hardware": uncosted, "network": "dgx-h100"}]}, "spec.yaml")
    assert len(err.value.lines) == 1 and err.value.lines[0].startswith("spec.yaml: systems.2.hardware: cost")


def test_search_spec_names_files_by_path(tmp_path) -> None:
    """A search spec file names a device or fabric by a path to its file, read relative to the spec's folder
    (as case and experiment files do; user trial 3 P8), at the top level and in `systems`: it searches as the
    same spec with the file's mapping inline. A mapping has no folder, so there a path is one line."""
    device, _ = resolve_named("hardware", "h100-sxm5-80gb", "test", "hardware")
    device = {**device, "name": "my-h100", "hbm_capacity": "96 GiB"}
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "my-h100.yaml").write_text(yaml.safe_dump(device))
    inline = {**SYSTEMS, "systems": [{"hardware": device, "network": "dgx-h100"}]}
    by_path = tmp_path / "s.yaml"
    by_path.write_text(yaml.safe_dump({**inline, "systems": [{"hardware": "devices/my-h100.yaml",
                                                              "network": "dgx-h100"}]}))
    expected = search(inline)
    assert expected.capacity_bytes.iloc[0] == 96 * 2**30
    pd.testing.assert_frame_equal(search(by_path), expected)
    top = tmp_path / "t.yaml"
    plain = {k: v for k, v in inline.items() if k != "systems"}
    top.write_text(yaml.safe_dump({**plain, "hardware": "devices/my-h100.yaml", "network": "dgx-h100"}))
    pd.testing.assert_frame_equal(search(top), search({**plain, "hardware": device, "network": "dgx-h100"}))
    # the pipeline's inputs (workflow/rules/common.smk) include a file named by path (review 17, finding 3)
    from rapidllm.search.spec import referenced_spec_files
    for spec in (by_path, top):
        files = referenced_spec_files(spec)
        assert str(tmp_path / "devices" / "my-h100.yaml") in files and "config/networks/dgx-h100.yaml" in files
    missing = tmp_path / "m.yaml"
    missing.write_text(yaml.safe_dump({**inline, "systems": [{"hardware": "nope.yaml", "network": "dgx-h100"}]}))
    with pytest.raises(SpecError) as err:
        load_search(missing)
    assert len(err.value.lines) == 1 and "systems.0.hardware: nope.yaml: file not found" in err.value.lines[0]
    with pytest.raises(SpecError) as err:
        load_search({**plain, "hardware": "devices/my-h100.yaml", "network": "dgx-h100"}, "spec")
    assert len(err.value.lines) == 1 and "not from a mapping" in err.value.lines[0]


def test_breakdown_names_the_axes_whose_values_differ() -> None:
    """The summary line of a removal names the axes whose values lose different shares of their layouts
    (here tp: every tp 1 layout, no tp 2 one), not an axis whose values all lose the same share (zero), with
    runs of equal shares joined, and the checks that removed them; the same counts give the same line."""
    from rapidllm.search.counts import breakdown_lines

    counts = {"layouts": 40, "out_of_memory": 20, "invalid": 0, "invalid_by_rule": {},
              "out_of_memory_by_check": {"persistent_state": 15, "first_last_stage": 5, "worst_stage": 0},
              "by_axis": {"layouts": {"tp": {"1": 20, "2": 20}, "zero": {"0": 20, "1": 20},
                                      "pp": {"1": 10, "2": 10, "4": 10, "8": 10}, "ep": {"1": 40}},
                          "out_of_memory": {"tp": {"1": 20}, "zero": {"0": 10, "1": 10},
                                            "pp": {"1": 10, "2": 10}, "ep": {"1": 20}},
                          "invalid": {}}}
    line, = breakdown_lines(counts)
    assert line == ("out of memory: 20 of 40 layouts (weights, gradients and optimizer state alone 15, with "
                    "activations, first or last stage 5); share of each value's layouts: tp 1 100%, 2 0%; "
                    "pp 1-2 100%, 4-8 0%")
    assert breakdown_lines(json.loads(json.dumps(counts))) == [line]


def test_cli_prints_the_breakdown_and_writes_it(tmp_path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(MOE))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "search", str(spec), "--quiet", "--out",
                          str(tmp_path / "o")], capture_output=True, text=True, check=True)
    counts = json.loads((tmp_path / "o" / "counts.json").read_text())["counts"]
    from rapidllm.search.counts import breakdown_lines
    lines = breakdown_lines(counts)
    assert [line.split(":")[0] for line in lines] == ["invalid", "out of memory"]
    assert all(line in run.stdout.splitlines() for line in lines)
    assert counts["out_of_memory_by_check"]["persistent_state"] > 0
    assert counts["invalid_by_rule"] == {"parallelism.ep": 51}


def test_cli_cost_objective_prints_the_basis_caveat(tmp_path) -> None:
    """A search ranked by a cost column without a rate prints the basis caveat once below the table, naming
    the spec's key for a rate; counts.json's objective carries the basis per device and the same line."""
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**SYSTEMS, "systems": SYSTEMS["systems"][1:], "top": 1,
                                    "objective": {"column": "usd_per_million_tokens", "direction": "min"}}))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "search", str(spec), "--quiet", "--out",
                          str(tmp_path / "o")], capture_output=True, text=True, check=True)
    notes = [line for line in run.stdout.splitlines() if line.startswith("note: ")]
    objective = json.loads((tmp_path / "o" / "counts.json").read_text())["objective"]
    assert len(notes) == 1 and "usd_per_gpu_hour: RATE" in notes[0]
    assert objective["cost_basis"] == {"h100-sxm5-80gb": "gpu"} and notes[0] == f"note: {objective['cost_note']}"
