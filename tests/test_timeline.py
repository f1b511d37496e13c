"""The timeline export (`rapidllm predict CASE --timeline FILE`): valid Chrome trace-event JSON whose
slices are the engine's own schedule, adding up to the predicted step and its breakdown."""
import json
import math
from collections import defaultdict

import pytest

from rapidllm.cli import main
from rapidllm.explore.timeline import TimelineError, timeline
from rapidllm.prediction import evaluate, predict
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.paths import project_root

EXAMPLE = project_root() / "examples" / "gpt175b-tp8-pp8.yaml"
REL = 1e-9


def _tracks(doc: dict) -> tuple[dict[tuple[int, int], list[dict]], dict[tuple[int, int], str]]:
    """X events per (pid, tid) in file order, and thread names; checks the trace-event format on the way."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    slices, names = defaultdict(list), {}
    for e in doc["traceEvents"]:
        assert {"ph", "pid", "tid", "name"} <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            if e["name"] == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        assert e["ph"] == "X" and {"ts", "dur", "cat", "args"} <= e.keys(), e
        assert math.isfinite(e["ts"]) and e["ts"] >= 0 and e["dur"] > 0
        slices[(e["pid"], e["tid"])].append(e)
    for key, evs in slices.items():
        assert key in names, f"track {key} has no thread_name"
        for a, b in zip(evs, evs[1:]):      # monotone and non-overlapping on every track
            assert b["ts"] >= a["ts"], (names[key], a["name"], b["name"])
            assert a["ts"] + a["dur"] <= b["ts"] * (1 + 1e-12) + 1e-9, (names[key], a, b)
    return slices, names


def _track(slices, names, prefix):
    (key,) = [k for k, n in names.items() if n.startswith(prefix)]
    return slices[key]


def test_training_timeline_adds_up_to_the_step_and_breakdown(tmp_path):
    case = load_case(EXAMPLE)
    plain = evaluate(case)
    rec = evaluate(case, trace=True)
    assert {k: v for k, v in rec.items() if k != "schedule"} == plain        # tracing changes no number
    out = tmp_path / "step.json"
    assert main(["predict", str(EXAMPLE), "--timeline", str(out)]) == 0
    text = out.read_text()
    doc = json.loads(text)
    slices, names = _tracks(doc)
    crit = rec["critical_stage"]
    mine = _track(slices, names, f"stage {crit} compute")
    assert names[(mine[0]["pid"], mine[0]["tid"])].endswith("(critical)")
    tasks = [e for e in mine if e["cat"] in ("F", "B", "compute")]
    waits = [e for e in mine if e["cat"] == "exposed_comm"]
    bubbles = [e for e in mine if e["cat"] == "bubble"]
    assert len(tasks) + len(waits) + len(bubbles) == len(mine)
    us = 1e6
    assert math.isclose(sum(e["dur"] for e in mine) / us, rec["step_time_s"], rel_tol=REL)
    assert math.isclose((mine[-1]["ts"] + mine[-1]["dur"]) / us, rec["step_time_s"], rel_tol=REL)
    assert math.isclose(sum(e["args"]["compute_s"] for e in tasks), rec["compute_time_s"], rel_tol=REL)
    exposed = sum(e["args"]["exposed_comm_s"] for e in tasks) + sum(e["dur"] for e in waits) / us
    assert math.isclose(exposed, rec["exposed_comm_s"], rel_tol=REL)
    assert math.isclose(sum(e["dur"] for e in bubbles) / us, rec["bubble_s"], rel_tol=REL)
    assert rec["bubble_s"] > 0 and bubbles
    # every stage runs each micro-batch once forward and once backward (1F1B, 64 micro-batches)
    m = case.workload.microbatches(case.parallelism.dp)
    for s in range(case.parallelism.pp):
        ids = [(e["cat"], e["args"]["micro_batch"]) for e in _track(slices, names, f"stage {s} compute")
               if e["cat"] in ("F", "B")]
        assert sorted(ids) == sorted([(d, i) for d in "FB" for i in range(m)])
    sends = _track(slices, names, "stage 0 pp send fwd")
    assert len(sends) == m and all(e["args"]["bytes"] > 0 and e["args"]["link"] for e in sends)
    tp = [e for k, evs in slices.items() if names[k].startswith("tp collectives") for e in evs]
    assert tp and {e["args"]["op"] for e in tp} == {"all_gather", "reduce_scatter"}
    assert all(e["args"]["group_size"] == 8 and e["args"]["link"] == "nvlink" for e in tp)
    assert doc["otherData"]["step_time_s"] == rec["step_time_s"]
    assert json.dumps(timeline(predict(case, trace=True)), separators=(",", ":")) + "\n" == text   # deterministic


def _mapping(**over):
    base = {"model": "gpt-22b", "hardware": "a100-sxm4-80gb", "network": "superpod-hdr", "precision": "bf16",
            "workload": {"mode": "training", "seq_len": 2048, "global_batch": 32, "micro_batch": 1},
            "parallelism": {"tp": 8, "pp": 4, "dp": 2, "sp": True, "schedule": "interleaved",
                            "virtual_stages": 2, "zero": 1}}
    base.update(over)
    return base


def test_interleaved_data_parallel_timeline_keeps_the_breakdown():
    case = resolve_case(_mapping(), "<test>")
    rec = evaluate(case, trace=True)
    slices, names = _tracks(timeline(rec))
    mine = _track(slices, names, f"stage {rec['critical_stage']} compute")
    tasks = [e for e in mine if e["cat"] in ("F", "B", "compute")]
    assert math.isclose(sum(e["args"]["compute_s"] for e in tasks), rec["compute_time_s"], rel_tol=REL)
    assert math.isclose(sum(e["dur"] for e in mine if e["cat"] == "bubble") / 1e6, rec["bubble_s"], rel_tol=REL)
    assert math.isclose(sum(e["dur"] for e in mine) / 1e6, rec["step_time_s"], rel_tol=REL)
    assert any(e["name"].startswith("F c1 ") for e in tasks)                 # chunk ids with interleaving
    grads = [e for k, evs in slices.items() if "dp gradients" in names[k] for e in evs]
    assert {e["name"] for e in grads} == {"dp.reduce_scatter bucket", "dp.all_gather parameters"}


@pytest.mark.parametrize("over", [
    {"parallelism": {"tp": 8, "pp": 4, "dp": 2, "sp": True, "schedule": "gpipe"}},             # all-reduce buckets
    {"parallelism": {"tp": 8, "pp": 2, "dp": 2, "sp": True, "zero": 3}},                          # FSDP-style gathers
    {"parallelism": {"tp": 8, "pp": 4, "dp": 1, "sp": True},
     "faults": [{"link": [8, 36], "bandwidth_factor": 0.1}]},                   # rank 8's cable to its IB leaf
], ids=["gpipe-allreduce", "zero3", "degraded-ib-link"])
def test_breakdown_adds_up_across_schedules_and_faults(over):
    rec = evaluate(resolve_case(_mapping(**over), "<test>"), trace=True)
    slices, names = _tracks(timeline(rec))
    mine = _track(slices, names, f"stage {rec['critical_stage']} compute")
    tasks = [e for e in mine if e["cat"] in ("F", "B", "compute")]
    exposed = sum(e["args"]["exposed_comm_s"] for e in tasks) + sum(e["dur"] for e in mine
                                                                     if e["cat"] == "exposed_comm") / 1e6
    assert math.isclose(sum(e["args"]["compute_s"] for e in tasks), rec["compute_time_s"], rel_tol=REL)
    assert math.isclose(exposed, rec["exposed_comm_s"], rel_tol=REL, abs_tol=1e-15)
    assert math.isclose(sum(e["dur"] for e in mine if e["cat"] == "bubble") / 1e6, rec["bubble_s"],
                        rel_tol=REL, abs_tol=1e-15)
    assert math.isclose((mine[-1]["ts"] + mine[-1]["dur"]) / 1e6, rec["step_time_s"], rel_tol=REL)


def test_inference_timeline_is_prefill_then_decode_steps():
    case = resolve_case({"model": "llama2-13b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
                         "precision": "bf16", "parallelism": {"tp": 2, "pp": 2},
                         "workload": {"mode": "inference", "batch": 4, "prompt_tokens": 256,
                                      "output_tokens": 9}}, "<test>")
    rec = evaluate(case, trace=True)
    slices, names = _tracks(timeline(rec))
    req = _track(slices, names, "request")
    assert [e["name"] for e in req] == ["prefill"] + [f"decode {k}" for k in range(1, 9)]
    assert math.isclose(req[0]["dur"] / 1e6, rec["ttft_s"], rel_tol=REL)
    assert math.isclose(sum(e["dur"] for e in req[1:]) / 8 / 1e6, rec["itl_s"], rel_tol=REL)
    assert math.isclose((req[-1]["ts"] + req[-1]["dur"]) / 1e6, rec["e2e_latency_s"], rel_tol=REL)
    work = [e for k, evs in slices.items() if names[k].startswith("stage") and "compute" in names[k] for e in evs]
    assert math.isclose(sum(e["args"]["compute_s"] for e in work), rec["compute_time_s"], rel_tol=REL)
    assert _track(slices, names, "stage 0 pp send")


def test_no_timeline_is_one_clear_line(tmp_path, capsys):
    with pytest.raises(TimelineError, match="static-batching"):
        timeline(evaluate(load_case(EXAMPLE), engine="baseline", trace=True))
    assert main(["predict", str(EXAMPLE), "--engine", "baseline", "--timeline", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeline" in err[0] and EXAMPLE.name in err[0]
