"""The rapidllm explorer: a Streamlit page over the public API (`rapidllm explore` serves it on 127.0.0.1).

Streamlit reruns this script top to bottom on every interaction; each case on the page goes through
`rapidllm.predict(case, trace=True)` (cached per distinct case for the session's process, so moving a
control back is instant), and what the page shows is that prediction: the headline numbers, the
breakdown, memory against capacity, and the timeline drawn from the same replay. Form logic lives in
`explore/edits.py`, the search hook in `explore/search_hook.py`; this file only lays out widgets.
Options after `--` (passed by `rapidllm explore`): `--case FILE`, a case to start from.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import streamlit as st

import rapidllm
from rapidllm.explore import edits as E
from rapidllm.explore.plot import timeline_frame, vega_spec
from rapidllm.explore.search_hook import OBJECTIVES, case_axes, run_search, search_function, search_spec
from rapidllm.explore.timeline import TimelineError, timeline
from rapidllm.memory.state import FRAMEWORKS
from rapidllm.spec.case import resolve_case
from rapidllm.spec.named import inline_spec_files
from rapidllm.spec.errors import SpecError
from rapidllm.spec.layout import Parallelism
from rapidllm.units import parse_quantity

INLINE = "(inline, from the case)"
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")
LAYOUT_INTS = ("tp", "pp", "dp", "cp", "ep")


def start_cases() -> dict[str, Path]:
    """Case files to start from: `--case FILE` first (when given), then examples/*.yaml."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--case")
    args, _ = parser.parse_known_args(sys.argv[1:])
    out = {Path(args.case).name: Path(args.case)} if args.case else {}
    return {**out, **E.examples()}


@st.cache_resource(max_entries=128, show_spinner=False)
def predicted(case_json: str, engine: str) -> tuple[Any, dict | None, Any, str]:
    """(prediction, timeline document, its chart rows, why there is no timeline) of one case."""
    p = rapidllm.predict(json.loads(case_json), engine=engine, trace=True)
    try:
        doc = timeline(p)
    except TimelineError as err:
        return p, None, None, str(err)
    return p, doc, timeline_frame(doc), ""


def _reset_on_new_base(p: str, base: dict) -> None:
    """Forget a case's widget values when its starting case changes (defaults come from the new one)."""
    digest = hashlib.sha1(json.dumps(base, sort_keys=True, default=str).encode()).hexdigest()
    if st.session_state.get(f"{p}:base") != digest:
        for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(f"{p}.")]:
            del st.session_state[key]
        st.session_state[f"{p}:base"] = digest


def _spec_choice(p: str, kind: str, base: dict) -> Any:
    """A select box of config/ names (plus the case's inline spec); returns the name or the mapping."""
    value = base[kind]
    options = ([INLINE] if isinstance(value, dict) else []) + E.names(kind)
    index = options.index(value) if isinstance(value, str) and value in options else 0
    choice = st.selectbox(kind, options, index=index, key=f"{p}.{kind}")
    return value if choice == INLINE else choice


def _float(label: str, value: float, key: str, fmt: str = "%.4g") -> float:
    return float(st.number_input(label, min_value=0.0, value=float(value), format=fmt, key=key))


def _spec_controls(p: str, case: dict, ed: dict) -> None:
    """Model, hardware and network choices and their knobs."""
    with st.expander("Model", expanded=False):
        case["model"] = _spec_choice(p, "model", case)
        tag = case["model"] if isinstance(case["model"], str) else "inline"
        spec = E.spec_mapping(case, "model")
        ed["model"] = {k: int(st.number_input(k, min_value=1, value=int(spec[k]), step=1, key=f"{p}.model.{tag}.{k}"))
                       for k in E.MODEL_KNOBS if k in spec}
    with st.expander("Hardware", expanded=False):
        case["hardware"] = _spec_choice(p, "hardware", case)
        tag = case["hardware"] if isinstance(case["hardware"], str) else "inline"
        ed["hardware"] = {}
        for k, (quantity, scale, unit) in E.HARDWARE_KNOBS.items():
            v = _float(f"{k.replace('_', ' ')} ({unit})", E.spec_value(case, "hardware", k, quantity) / scale,
                       f"{p}.hw.{tag}.{k}")
            ed["hardware"][k] = v * scale
        clock = parse_quantity(case.get("clock") or E.spec_value(case, "hardware", "clock"), "frequency") / 1e9
        new = _float("SM clock (GHz)", clock, f"{p}.hw.{tag}.clock", "%.3f")
        if not math.isclose(new, clock, rel_tol=1e-9):
            ed["clock"] = f"{new} GHz"
    with st.expander("Network", expanded=False):
        case["network"] = _spec_choice(p, "network", case)
        tag = case["network"] if isinstance(case["network"], str) else "inline"
        ed["dimensions"] = {}
        for i, dim in enumerate(E.spec_mapping(case, "network")["dimensions"]):
            ed["dimensions"][i] = {
                k: _float(f"{dim['name']} {k.replace('_', ' ')} ({unit})", E.dimension_value(case, i, k) / scale,
                          f"{p}.net.{tag}.{i}.{k}") * scale
                for k, (_q, scale, unit) in E.DIMENSION_KNOBS.items()}


def _workload_controls(p: str, case: dict, ed: dict) -> None:
    """Precision, framework, workload and layout."""
    with st.expander("Workload and layout", expanded=True):
        c1, c2 = st.columns(2)
        prec = case.get("precision", "bf16")
        ed["precision"] = c1.selectbox("precision", PRECISIONS, index=PRECISIONS.index(prec), key=f"{p}.precision")
        fw = case.get("framework", "megatron")
        frameworks = list(FRAMEWORKS)
        ed["framework"] = c2.selectbox("framework", frameworks, index=frameworks.index(fw), key=f"{p}.framework")
        w = dict(case["workload"])
        keys = ("seq_len", "global_batch", "micro_batch") if w["mode"] == "training" else \
            ("batch", "prompt_tokens", "output_tokens", "concurrency")
        defaults = {"micro_batch": 1, "batch": 1, "concurrency": w.get("batch", 1)}
        cols = st.columns(len(keys))
        ed["workload"] = {}
        for col, k in zip(cols, keys):
            v = int(col.number_input(k, min_value=1, value=int(w.get(k, defaults.get(k, 1))), step=1,
                                     key=f"{p}.w.{k}"))
            if v != w.get(k, defaults.get(k)):
                ed["workload"][k] = v
        par = dict(case.get("parallelism", {}))
        ref = Parallelism()
        cols = st.columns(3) * 2
        ed["parallelism"] = {}
        for col, k in zip(cols, LAYOUT_INTS):
            v = int(col.number_input(k, min_value=1, value=int(par.get(k, getattr(ref, k))), step=1,
                                     key=f"{p}.{k}"))
            if v != par.get(k, getattr(ref, k)):
                ed["parallelism"][k] = v
        c1, c2 = st.columns(2)
        c3, c4 = st.columns(2)
        schedules = ("1f1b", "gpipe", "interleaved")
        schedule = c1.selectbox("schedule", schedules, index=schedules.index(E.schedule_of(par)), key=f"{p}.schedule")
        choices = {"recompute": (c2, ("none", "selective", "full")), "zero": (c3, (0, 1, 2, 3))}
        for k, (col, opts) in choices.items():
            cur = par.get(k, getattr(ref, k))
            v = col.selectbox(k, opts, index=opts.index(cur), key=f"{p}.{k}")
            if v != cur:
                ed["parallelism"][k] = v
        sp = c4.checkbox("sp", value=bool(par.get("sp", ref.sp)), key=f"{p}.sp")
        if sp != par.get("sp", ref.sp):
            ed["parallelism"]["sp"] = sp
        chunks = 1
        if schedule == "interleaved":
            chunks = int(st.number_input("virtual_stages", min_value=2, value=max(2, int(par.get("virtual_stages", 2))),
                                         key=f"{p}.virtual_stages"))
        ed["parallelism"].update(E.schedule_edits(par, schedule, chunks))


def _fault_controls(p: str, case: dict, ed: dict) -> None:
    """One degraded (or failed) cable, chosen among a rank's cables."""
    with st.expander("Faults", expanded=False):
        if not st.checkbox("degrade a link", value=bool(case.get("faults")), key=f"{p}.fault.on"):
            ed["faults"] = []
            return
        rank = int(st.number_input("at rank", min_value=0, value=0, step=1, key=f"{p}.fault.rank"))
        try:
            options = E.cables(E.apply_edits(case, ed), rank)
        except SpecError as err:
            st.error(str(err))
            return
        if not options:
            st.error(f"rank {rank} has no cable in this network (ranks 0..world-1)")
            return
        label = st.selectbox("cable", [o[0] for o in options], key=f"{p}.fault.cable")
        factor = st.slider("bandwidth factor", 0.01, 1.0, 0.25, 0.01, key=f"{p}.fault.factor")
        failed = st.checkbox("failed (removed from routing)", value=False, key=f"{p}.fault.failed")
        link = dict(options)[label]
        ed["faults"] = [{"link": link, "failed": True} if failed else {"link": link, "bandwidth_factor": factor}]


def case_controls(p: str, title: str, sources: dict[str, Path]) -> dict | None:
    """A case's widgets in the sidebar: where it starts from, then every control; the edited mapping."""
    st.sidebar.header(title)
    how = st.sidebar.radio("start from", ("case file", "pasted YAML"), horizontal=True, key=f"{p}:how")
    try:
        if how == "case file":
            name = st.sidebar.selectbox("case file", list(sources), key=f"{p}:file")
            # a device or fabric file the case names by path is read beside the case file (the server's
            # own files, chosen by whoever started it); pasted YAML has no folder, so a path there is refused
            base = inline_spec_files(E.parse_case_text(sources[name].read_text()), sources[name].parent, name)
        else:
            text = st.sidebar.text_area("case YAML", value=sources[next(iter(sources))].read_text(), height=220,
                                        key=f"{p}:text")
            base = E.parse_case_text(text)
        resolve_case(base, "case")
    except SpecError as err:
        st.sidebar.error(str(err))
        return None
    _reset_on_new_base(p, base)
    case, ed = dict(base), {}
    with st.sidebar:
        try:
            _spec_controls(p, case, ed)
            _workload_controls(p, case, ed)
            _fault_controls(p, case, ed)
        except (SpecError, KeyError, ValueError) as err:
            st.error(f"{title}: {err}")
            return None
    return E.apply_edits(case, ed)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.6g}"


def show(title: str, case: dict, engine: str) -> Any:
    """Headline numbers, breakdown, memory, timeline and YAML of one case; its prediction (None on error)."""
    st.subheader(title)
    try:
        p, doc, frame, why = predicted(json.dumps(case, sort_keys=True), engine)
    except SpecError as err:
        st.error(str(err))
        return None
    if not p.feasible:
        st.warning(f"does not fit in memory: {p.reason}")
    if not p.device_validated:      # the command line warns on stderr; the page had no sign of it
        st.warning("this device has no validation rows of its own: its constants are transferred from another "
                   "device or given with it, so its error is not measured (docs/transfer.md)")
    cols = st.columns(len(E.headline(p)))
    for col, (label, value) in zip(cols, E.headline(p).items()):
        col.metric(label, _fmt(value))
    left, right = st.columns(2)
    with left:
        st.caption("where the time goes (s)")
        if p.feasible:
            st.bar_chart(E.breakdown(p).set_index("part")["seconds"], horizontal=True, height=260)
    with right:
        st.caption("memory per GPU, worst stage (GiB) against capacity")
        st.bar_chart(E.memory_table(p).set_index("component")["GiB"], horizontal=True, height=260)
    if doc is None:
        st.info(why)
    else:
        st.vega_lite_chart(frame, vega_spec(doc, frame), width="stretch")
        st.download_button("timeline JSON (open in Perfetto or chrome://tracing)",
                           json.dumps(doc, separators=(",", ":")), file_name=f"{p.case_id}-timeline.json",
                           mime="application/json", key=f"dl-{title}")
    with st.expander("tables and case YAML"):
        if p.feasible:
            st.dataframe(E.breakdown(p), hide_index=True)
        st.dataframe(E.memory_table(p), hide_index=True)
        st.code(E.case_yaml(case), language="yaml")
    return p


def search_panel(case: dict) -> None:
    """A small layout search around case A, when the search is installed; otherwise why not."""
    st.header("Layout search")
    fn, why = search_function()
    if fn is None:
        st.info(why)
        return
    mode = case["workload"]["mode"]
    world = resolve_case(case, "case").parallelism.world
    c1, c2, c3 = st.columns(3)
    gpus = int(c1.number_input("GPUs", min_value=1, value=world, key="search.gpus"))
    objective = c2.selectbox("objective", OBJECTIVES[mode], key="search.objective")
    top = int(c3.number_input("top", min_value=1, max_value=50, value=10, key="search.top"))
    c1, c2 = st.columns(2)
    tp = c1.multiselect("tp values", [1, 2, 4, 8], default=[1, 2, 4, 8], key="search.tp")
    pp = c2.multiselect("pp values", [1, 2, 4, 8, 16], default=[1, 2, 4, 8], key="search.pp")
    keep = st.checkbox("keep case A's schedule, recompute, ZeRO, SP and micro-batch", value=True, key="search.keep")
    if st.button("run search", key="search.run"):
        try:
            space = {**(case_axes(case) if keep else {}), "tp": tp, "pp": pp}
            with st.spinner("searching ..."):
                ranked = run_search(search_spec(case, gpus, objective, space), top, fn)
            st.caption(f"layouts: {ranked.attrs.get('counts', {})}")
            st.dataframe(ranked, hide_index=True)
        except (SpecError, ValueError) as err:
            st.error(str(err))


def main() -> None:
    st.set_page_config(page_title="rapidllm explorer", layout="wide")
    st.title("rapidllm explorer")
    sources = start_cases()
    engine = st.sidebar.selectbox("engine", ("event", "baseline"), key="engine")
    two = st.sidebar.checkbox("compare with a second case", value=False, key="compare")
    case_a = case_controls("a", "Case A", sources)
    case_b = case_controls("b", "Case B", sources) if two else None
    if case_a is None:
        st.error("Case A is not valid: see the sidebar.")
        return
    if not two:
        show("Case A", case_a, engine)
    else:
        left, right = st.columns(2)
        with left:
            pa = show("Case A", case_a, engine)
        with right:
            pb = show("Case B", case_b, engine) if case_b is not None else None
        if pa is not None and pb is not None:
            st.header("A vs B")
            st.dataframe(E.compare(pa, pb), hide_index=True)
    search_panel(case_a)


main()
