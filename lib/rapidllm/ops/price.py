"""Price every operator of a case: the `price` stage of the pipeline.

A case becomes sections (one layer of each kind, the first/last pipeline stage extras, the optimizer
step, and for inference prefill plus the first and last decode step); each section lists its operators
for one micro-batch on one rank with a time per launch. The engine multiplies sections by how often
they run, so pricing stays independent of the schedule.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from rapidllm.caches import current
from rapidllm.ops import foundry
from rapidllm.ops import workload as wl
from rapidllm.ops.attention import attention_backward, attention_forward
from rapidllm.ops.attention_per_head import per_head_decode
from rapidllm.ops.gemm import kernel_params, price_gemms, roofline_gemm_time
from rapidllm.ops.operators import ATTENTION, GEMM, Operator
from rapidllm.ops.params import mtp_params, parameter_counts
from rapidllm.ops.roofline import roofline_times
from rapidllm.ops.tiles import mma_style
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES, GEMM_PRECISIONS, HardwareSpec, packed_bytes
from rapidllm.spec.layout import InferenceWorkload, Parallelism

if TYPE_CHECKING:
    import pandas as pd

OPERATOR_COLUMNS = ["section", "name", "kind", "phase", "count", "flops", "bytes", "out_bytes",
                    "batch", "m", "n", "k", "time_s"]


def local_parameters(case: Case) -> float:
    """Parameters held by one rank before ZeRO/FSDP sharding (TP/PP/EP split; embeddings counted once;
    MLA's latent projections whole on every TP rank; MTP modules spread like layers)."""
    p = case.parallelism
    c = parameter_counts(case.model)
    split = c.attention - c.attention_replicated + c.dense_mlp + c.shared_experts + c.norms
    dense = split / (p.tp * p.pp) + c.attention_replicated / p.pp + mtp_params(case.model)[0] / (p.tp * p.pp)
    return dense + local_expert_parameters(case) + local_embedding_head(case)


def local_embedding_head(case: Case) -> float:
    """Token embedding and output head parameters of one rank in `local_parameters`: split over tp, and
    over the first and last stage when pp > 1 (counted as their mean over the two)."""
    c, p = parameter_counts(case.model), case.parallelism
    return (c.embedding + c.lm_head) / p.tp / (2 if p.pp > 1 else 1)


def local_expert_parameters(case: Case) -> float:
    """Routed-expert parameters of one rank (MTP modules' included): split over pp x ep x etp ranks, with
    the redundant replicas of an inference deployment on top."""
    p = case.parallelism
    experts = parameter_counts(case.model).experts + mtp_params(case.model)[1]
    return experts * case.expert_replication / (p.expert_tp * p.pp * p.ep)


def _layer_sections(case: Case, shard: wl.Shard, prefix: str, training: bool) -> list[tuple[str, Operator]]:
    model, out = case.model, []
    kinds = {"dense": False}
    if model.moe:
        kinds = {"moe": True} if model.moe_layer_count() == model.layers else {"dense": False, "moe": True}
    for kind, is_moe in kinds.items():
        if training:
            par = case.parallelism
            ops = _scaled(case, wl.layer_training(model, shard, is_moe, par.recompute, par.recompute_modules))
            if case.framework == "llm-foundry":
                ops = foundry.layer_kernels(case, ops, is_moe)
        else:
            ops = wl.layer_forward(model, shard, is_moe)
        out += [(f"{prefix}layer_{kind}", o) for o in ops]
    return out


def case_sections(case: Case) -> list[tuple[str, Operator]]:
    """(section, operator) pairs of a case, in execution order within each section."""
    model = case.model
    if case.training:
        return _training_sections(case) + step_sections(case)
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    out = []
    passes = [("prefill_", wl.prefill_shard(case))]
    if w.output_tokens:          # an encoder's inference (output_tokens 0) is the prefill pass alone
        passes += [("decode_first_", wl.decode_shard(case, w.prompt_tokens)),
                   ("decode_last_", wl.decode_shard(case, w.prompt_tokens + w.output_tokens - 1))]
    for prefix, shard in passes:
        out += _layer_sections(case, shard, prefix, False)
        out += [(f"{prefix}head", o) for o in wl.embedding_forward(model, shard) + wl.head_forward(model, shard)]
    return out


def _training_sections(case: Case) -> list[tuple[str, Operator]]:
    """Layer, first-stage (embedding) and last-stage (head) sections of a training case."""
    model, shard = case.model, wl.training_shard(case)
    out = _layer_sections(case, shard, "", True)
    emb = wl.embedding_forward(model, shard)
    head = wl.head_forward(model, shard)
    out += [("first_stage", o) for o in emb + [b for o in emb for b in wl.backward_of(o)]]
    out += [("last_stage", o) for o in _scaled(case, head + [b for o in reversed(head) for b in wl.backward_of(o)])]
    return out


def _scaled(case: Case, ops: list[Operator]) -> list[Operator]:
    """Training operators with TE's FP8 casts under `precision: fp8` (ops/workload.py), else as they are."""
    return wl.with_fp8_casts(ops) if case.precision == "fp8" else ops


def step_sections(case: Case) -> list[tuple[str, Operator]]:
    """Once-per-step work, the only training section that depends on dp, pp and ZeRO/FSDP sharding: the
    optimizer step and, under FP8, the cast of the rank's GEMM weights."""
    # half weights and grads (2 + 2 B), the master weight and two Adam moments (`optimizer_state_bytes` each)
    state_bytes = 4.0 + 3 * case.parallelism.optimizer_state_bytes
    out = [("optimizer", wl.optimizer_step(_optimizer_parameters(case), state_bytes))]
    if case.precision == "fp8":
        out.append(("optimizer", wl.fp8_weight_cast(_gemm_weights(case))))
    return out


def _gemm_weights(case: Case) -> float:
    """Weights one rank's GEMMs read: its parameters less the embedding, output head and norms (the
    router's, part of shared_experts, are few)."""
    p = case.parallelism
    c = parameter_counts(case.model)
    return local_parameters(case) - local_embedding_head(case) - c.norms / (p.tp * p.pp)


def _optimizer_parameters(case: Case) -> float:
    """Parameters one rank's optimizer updates: a sharded optimizer splits the dense ones over dp x cp and the
    routed experts over the expert-data-parallel group (Megatron's distributed optimizer)."""
    p = case.parallelism
    if not (p.zero >= 1 or p.fsdp != "none"):
        return local_parameters(case)
    experts = local_expert_parameters(case)
    return (local_parameters(case) - experts) / p.dp_cp + experts / p.edp


def operator_times(case: Case, ops: list[Operator], method: str = "tiles") -> np.ndarray:
    """Seconds per launch: the GEMM tile model and FlashAttention kernels, or the plain roofline.

    Pointwise operators are priced by the roofline either way; `method="roofline"` is the Fig 10 ablation.
    """
    hw, dtype = case.hardware, case.activation_precision
    gemm_dtypes = [_gemm_dtype(case, o.name) if o.kind == GEMM else "" for o in ops]
    times = roofline_times(hw, ops, dtype)
    for d in sorted(set(gemm_dtypes) - {"", dtype}):    # FP8 GEMMs: FP8 rate, FP8 inputs, BF16 output
        idx = [i for i, g in enumerate(gemm_dtypes) if g == d]
        shapes = np.array([ops[i].gemm for i in idx], dtype=np.int64)
        times[idx] = roofline_gemm_time(hw, shapes[:, 1], shapes[:, 2], shapes[:, 3], d, shapes[:, 0])
    if method == "roofline":
        return times
    blockwise = case.precision == "fp8" and case.fp8_recipe == "blockwise"
    acc = [blockwise and bool(g) and _accumulates(o.name) for g, o in zip(gemm_dtypes, ops)]
    for d, a in sorted(set(zip(gemm_dtypes, acc)) - {("", False)}):
        idx = [i for i, (g, x) in enumerate(zip(gemm_dtypes, acc)) if g == d and x == a]
        times[idx] = _gemm_times(hw, d, [ops[i].gemm for i in idx], a)
    for i, o in enumerate(ops):
        if o.kind == ATTENTION and o.attention is not None:
            a = o.attention
            kv_dtype = case.kv_precision if a.decode else dtype    # prefill reads K/V from its QKV output
            if a.decode and case.decode_attention == "per_head":
                times[i] = per_head_decode(hw, a.batch, a.q_heads, a.kv_heads, a.kv_len, a.head_dim_qk,
                                           a.head_dim_v, dtype, kv_dtype).time_s
                continue
            fn = attention_backward if o.phase == "bwd" else attention_forward
            kwargs = {} if o.phase == "bwd" else {"training": case.training, "kv_dtype": kv_dtype}
            times[i] = fn(hw, a.batch, a.q_heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim_qk, a.head_dim_v,
                          a.causal, dtype, case.attention_impl, kv_shared=a.kv_shared, cp=a.cp, **kwargs).time_s
    return times


def _gemm_dtype(case: Case, name: str) -> str:
    """Input type of one GEMM: the case precision, but BF16 for the GEMMs FP8 recipes and FP4 checkpoints
    keep high (router, LM head: `workload.HIGH_PRECISION_GEMMS`)."""
    return case.precision if case.precision not in GEMM_PRECISIONS or wl.fp8_gemm(name) else case.activation_precision


def _accumulates(name: str) -> bool:
    """Whether a GEMM of a blockwise-FP8 case adds into the FP32 main gradient in HBM (D = C + A @ B,
    `gemm.kernel_params`): its FP8 weight-gradient GEMMs. DeepSeek-V3's fine-grained FP8 wgrad kernel accumulates
    into the FP32 gradient in its epilogue (profile-data train.json: `fp8_dptp128c_acc` kernels under
    `LinearWithGradAccumulationFP8`; DeepGEMM's published wgrad kernel, fp8_wgrad_gemm.cuh: D = C + A @ B, FP32
    C loaded by TMA after the k-loop and waited on before the add). Tensorwise cases keep the BF16-output
    wgrad, as calibrated, though Megatron's gradient_accumulation_fusion (TE Linear's fuse_wgrad_accumulation:
    out=main_grad, FP32, accumulate=True) accumulates the same way: an open item (docs/fp8.md)."""
    return name.endswith("_wgrad") and wl.fp8_gemm(name)


_GEMM_LIMIT = 200_000


def _gemm_times(hw, dtype: str, shapes: list, accumulate: bool = False) -> np.ndarray:
    """`price_gemms(...).time_s` for (batch, m, n, k) shapes, remembered across cases per device kernel
    parameters and tile catalog (`Caches.gemm_times`, keyed by the kernel's parameter vector and what the
    catalog is built from): the kernel prices every shape on its own, so a shape priced for an earlier
    case of a sweep has the same time now. Only the shapes not seen yet go to the kernel."""
    if dtype not in DTYPE_BYTES:                      # let price_gemms raise its error
        arr = np.array(shapes, dtype=np.int64)
        return price_gemms(hw, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], dtype).time_s
    key = (kernel_params(hw, dtype, accumulate).tobytes(), hw.limits, DTYPE_BYTES[dtype], packed_bytes(dtype),
           mma_style(hw))
    table = current().gemm_times
    known = table.get(key)
    if known is None:
        known = table.put(key, {})
    missing = list(dict.fromkeys(tuple(s) for s in shapes if tuple(s) not in known))
    if missing:
        if len(known) + len(missing) > _GEMM_LIMIT:
            known.clear()
            missing = list(dict.fromkeys(tuple(s) for s in shapes))
        arr = np.array(missing, dtype=np.int64)
        priced = price_gemms(hw, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], dtype, accumulate)
        known.update(zip(missing, priced.time_s.tolist()))
    return np.array([known[tuple(s)] for s in shapes], dtype=np.float64)


class OperatorTable:
    """The priced operators of a case as rows (OPERATOR_COLUMNS), without pandas.

    The engine reads a table by section (graph/templates.py: `OpsView`), so one prediction needs no
    DataFrame: building one (~1 ms) and importing pandas (~0.4 s) were most of a sweep case's pricing and
    of `rapidllm predict`'s start-up. `frame()` is the DataFrame `price_case` returns, for code that edits
    or stores the table (measured-time adjusters, the baseline engine, pipeline stages)."""

    def __init__(self, rows: list[tuple], shared: list[tuple] | None = None) -> None:
        """`shared`: the leading rows when other tables begin with this same list (`price_table`'s priced
        layer sections from `Caches.priced_layers`), so what is read from them alone can be remembered
        across tables (`graph.templates.compute_durations`)."""
        self.rows = rows
        self.shared = shared

    def column(self, name: str) -> list:
        """One column's values in row order, as the rows hold them."""
        j = OPERATOR_COLUMNS.index(name)
        return [r[j] for r in self.rows]

    def frame(self) -> pd.DataFrame:
        """The rows as the DataFrame `price_case` returns."""
        return _frame(self.rows)


def as_frame(ops: pd.DataFrame | OperatorTable) -> pd.DataFrame:
    """A priced table as a DataFrame (an `OperatorTable` is converted, a DataFrame passed through)."""
    return ops.frame() if isinstance(ops, OperatorTable) else ops


def price_table(case: Case, method: str = "tiles") -> OperatorTable:
    """One row per operator launch shape with its time per launch.

    For training, every section but the optimizer step is a function of the layer shard (model, workload,
    tp/cp/ep/etp/sp, recompute, device, precision, kernels), not of dp, pp, ZeRO/FSDP or the schedule: a
    sweep over those reuses one priced set of rows (sweep-1000: 64 distinct of 1472 cases) and prices only
    the optimizer rows anew, once per distinct optimizer operator (`Caches.priced_steps`: the cases of a
    layout that differ in recompute or micro-batch share them). `price_case_reference` is the uncached
    definition; tests compare the two.
    """
    if not case.training:
        return OperatorTable(_rows(case, case_sections(case), method))
    key = _layer_pricing_key(case, method)
    caches = current()
    layers = caches.priced_layers.get(key)          # the layer sections' rows; ~20 kB each
    if layers is None:
        layers = caches.priced_layers.put(key, _rows(case, _training_sections(case), method))
    steps = step_sections(case)
    # what `_rows` reads of a training case besides the operators: the device, the precision (GEMM and
    # activation types), the attention kernel and the method; not the workload or recompute
    step_key = (_hardware_repr(case.hardware), case.precision, case.attention_impl, method, tuple(steps))
    step_rows = caches.priced_steps.get(step_key)
    if step_rows is None:
        step_rows = caches.priced_steps.put(step_key, _rows(case, steps, method))
    return OperatorTable(layers + step_rows, shared=layers)


def price_case(case: Case, method: str = "tiles") -> pd.DataFrame:
    """`price_table` as a DataFrame (the table the `price` pipeline stage writes)."""
    return price_table(case, method).frame()


def price_case_reference(case: Case, method: str = "tiles") -> pd.DataFrame:
    """`price_case` without the cache: every section priced for this case."""
    return _frame(_rows(case, case_sections(case), method))


def _layer_pricing_key(case: Case, method: str) -> tuple:
    """Everything the non-optimizer sections depend on: the case with dp, pp, ZeRO/FSDP, the schedule and
    the network neutralized, i.e. the other fields of its parallelism (HardwareSpec holds dicts, so it
    enters as its repr, `_hardware_repr`)."""
    p = case.parallelism
    return (_hardware_repr(case.hardware), case.model, case.workload, tuple(getattr(p, f) for f in _PRICED_FIELDS),
            case.precision, case.attention_impl, case.moe_hot_expert_factor, case.framework, case.fp8_recipe, method)


# what the layer sections do not depend on (`_layer_pricing_key` leaves them out)
_NEUTRAL = ("dp", "pp", "zero", "fsdp", "schedule", "virtual_stages", "embedding_in_split", "loss_in_split")
_PRICED_FIELDS = tuple(f.name for f in dataclasses.fields(Parallelism) if f.name not in _NEUTRAL)


def _hardware_repr(hw: HardwareSpec) -> str:
    """repr(hw), kept by identity (`Caches.hardware_reprs`): a sweep's cases share a few devices, and their
    repr walks every dict."""
    return current().hardware_reprs.of((hw,), lambda: repr(hw))


def _rows(case: Case, pairs: list[tuple[str, Operator]], method: str) -> list[tuple]:
    """Table rows (OPERATOR_COLUMNS) of priced (section, operator) pairs."""
    times = operator_times(case, [o for _, o in pairs], method)
    rows = []
    for (section, o), t in zip(pairs, times):
        b, m, n, k = o.gemm if o.gemm else (0, 0, 0, 0)
        rows.append((section, o.name, o.kind, o.phase, o.count, o.flops, o.bytes, o.out_bytes, b, m, n, k, float(t)))
    return rows


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """`pd.DataFrame(rows, columns=OPERATOR_COLUMNS)` built column by column (a third of price_case's
    time went to pandas building and splitting a 2-D object array). Each column goes through the same
    object conversion pandas applies to the columns of the 2-D path, so dtypes and values are equal."""
    import pandas as pd
    from pandas._libs import lib as pd_lib

    if not rows:
        return pd.DataFrame(rows, columns=OPERATOR_COLUMNS)
    cols = list(zip(*rows))
    data = {}
    for name, col in zip(OPERATOR_COLUMNS, cols):
        arr = np.empty(len(col), dtype=object)
        arr[:] = col
        # the two conversions pandas' convert_object_array applies to each column of the 2-D path
        arr = pd_lib.maybe_convert_objects(arr, try_float=False, convert_to_nullable_dtype=False)
        if arr.dtype == np.dtype("O"):
            arr = pd_lib.maybe_convert_objects(arr, convert_numeric=False, convert_non_numeric=True,
                                               convert_to_nullable_dtype=False, dtype_if_all_nat=np.dtype("M8[s]"))
        data[name] = arr
    return pd.DataFrame(data, columns=OPERATOR_COLUMNS)
