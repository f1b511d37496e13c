"""Activation liveness over the operator model's own per-layer operator lists.

Every forward operator allocates its output; a tensor is freed after its last forward consumer unless a
backward operator needs it. What backward needs is derived from the operator's kind and its `inputs`:
a GEMM keeps its input (for the weight gradient), attention keeps Q/K/V, its output and the softmax
statistics (plus the s² score/softmax tensors when it is not FlashAttention), a norm and an activation
keep their input, the loss keeps its fp32 probabilities; residual adds, rotary and token permutes keep
nothing. Sequence-parallel norms produce sequence-sharded tensors, which is what the following GEMM keeps
(Megatron re-gathers them in backward), so SP and CP sharding come from the operator shapes themselves.
A framework may instead keep the all-gathered input (`keep_gathered`: nanotron's column-parallel linear with
`tp_recompute_allgather` off).
Two layouts of the same layer keep more than the operator list says (`Conventions`, memory/state.py):
`unfused_glu`: the gated activation runs as separate autograd ops, act(gate) * up (nanotron's
GLUActivation: `F.silu` then a multiply), so the multiply saves act(gate) beside the gate/up projection
output that the activation saves (PyTorch's derivatives.yaml: silu's backward reads its input, mul's reads
both operands); one extra tensor of the activation's output size. `kv_copy`: multi-head attention
(as many KV as query heads) builds its keys and values as a separate contiguous [K, V] tensor for the
rotary kernel while the query, a view of the permuted QKV tensor, keeps all of that tensor alive; the
attention kernel saves both (nanotron's non-GQA path of CausalSelfAttention; flash-attn saves q, k, v as
passed), so the K and V bytes are kept twice. `loss_grad_in_place`: the loss's backward turns the
probabilities it saved into their gradient in place (nanotron's vocab-parallel cross entropy), so it
allocates only its input's gradient.
FP8 training (`fp8_inputs`): Transformer Engine saves the columnwise FP8 copy of an FP8 GEMM's input for
the weight gradient, 1 byte per element, not the BF16 tensor ("input in FP8 saved for backward", TE docs,
features/low_precision_training/performance_considerations, "Memory usage"); by default that copy is
kept even when another operator keeps the BF16 tensor too (TE's `save_original_input=False`), so the two
are counted apart. GEMMs that FP8 recipes keep in BF16 (`ops.workload.fp8_gemm`) save BF16 as before.
Recompute: `selective` drops what its modules' operators keep (Megatron-Core --recompute-modules; the
default, core_attn, drops what the attention core keeps besides its inputs and output), and backward
holds them again while it runs that layer; `full` keeps only each layer's input and rematerializes one
layer at a time during backward.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.ops.operators import ATTENTION, GEMM, Operator
from rapidllm.ops.workload import LAYER_INPUT, fp8_gemm, recomputed

NORMS = ("norm1", "norm2", "final_norm", "latent_norm")


@dataclass(frozen=True)
class LayerLiveness:
    """Activation bytes of one layer (or head) for one micro-batch on one rank."""
    stored: float            # kept from the forward until this layer's backward
    forward_peak: float      # extra bytes alive at the worst moment of the forward (beyond stored)
    backward_peak: float     # extra bytes alive at the worst moment of the backward (beyond stored)
    input_bytes: float       # the layer input (what full recompute keeps)


def _size(op: Operator) -> float:
    return op.out_bytes * op.count


def _residual(name: str) -> bool:
    """Whether `name` is a residual add (of a layer, or of an MTP module's layer: `mtp{k}_residual1`)."""
    return name.rsplit("_", 1)[-1].startswith("residual")


def _saved_inputs(op: Operator) -> tuple[str, ...]:
    """Names of tensors the backward of `op` reads (derived from its kind, name and inputs)."""
    inputs = op.inputs or (LAYER_INPUT,)
    if op.kind in (GEMM, ATTENTION):
        return inputs
    if op.name in NORMS or op.name.endswith("_act"):
        return inputs
    return ()


def attention_extra(op: Operator, flash: bool, recompute: str, dropout: bool) -> float:
    """Bytes the attention core keeps beyond Q/K/V and its output: softmax stats or the s² tensors."""
    a = op.attention
    assert a is not None
    rows = a.batch * a.q_heads * a.q_len
    if flash or recompute in ("selective", "full"):
        return 4.0 * rows if flash else 0.0          # fp32 log-sum-exp per query row
    scores = rows * a.kv_len
    per = op.dtype_bytes * scores                     # softmax output
    if dropout:
        per += scores + op.dtype_bytes * scores       # dropout mask (1 B) and dropout output
    return per


def kv_copy_bytes(op: Operator) -> float:
    """Bytes of the separate [K, V] copy multi-head attention keeps (`kv_copy`); none under GQA/MQA."""
    a = op.attention
    assert a is not None
    if a.kv_heads != a.q_heads:
        return 0.0
    return op.dtype_bytes * a.batch * a.kv_heads * a.q_len * (a.head_dim_qk + a.head_dim_v) * op.count   # own tokens


def layer_liveness(ops: list[Operator], flash: bool = True, recompute: str = "none",
                   dropout: bool = False, keep_gathered: bool = False,
                   modules: tuple[str, ...] = ("core_attn",), fp8_inputs: bool = False,
                   unfused_glu: bool = False, kv_copy: bool = False,
                   loss_grad_in_place: bool = False) -> LayerLiveness:
    """Walk one layer's forward operators in order: allocate outputs, free after the last consumer."""
    fwd = [o for o in ops if o.phase == "fwd"]
    sizes = {o.name: _size(o) for o in fwd}
    first = fwd[0]
    in_bytes = _size(first) if first.name in NORMS else float(first.out_bytes)
    sizes[LAYER_INPUT] = in_bytes
    saved: dict[tuple[str, bool], float] = {}          # (tensor, kept as its FP8 copy) -> bytes
    extra = 0.0
    for o in fwd:
        fp8_copy = fp8_inputs and o.kind == GEMM and fp8_gemm(o.name)
        for name in _saved_inputs(o):
            size = sizes.get(name, 0.0)
            if keep_gathered and o.kind == GEMM and o.gemm and name in NORMS:
                size = max(size, o.gemm[1] * o.gemm[3] * o.dtype_bytes)   # all-gathered SP input kept
            if fp8_copy:
                size /= o.dtype_bytes                   # one byte per element
            saved[name, fp8_copy] = max(saved.get((name, fp8_copy), 0.0), size)
        if o.kind == ATTENTION:
            saved[o.name, False] = sizes[o.name]
            core = recompute if recomputed(o.name, recompute, modules) else "none"
            extra += attention_extra(o, flash, core, dropout)
            if kv_copy:
                extra += kv_copy_bytes(o)
        if unfused_glu and o.name.endswith("_act") and sizes.get(o.inputs[0], 0.0) > sizes[o.name]:
            saved[o.name + ":gate", False] = sizes[o.name]    # act(gate), kept by the multiply
        if dropout and o.name.startswith("residual"):
            extra += sizes[o.name] / o.dtype_bytes    # 1-byte mask of the residual dropout
        if o.name == "cross_entropy":
            saved[o.name, False] = sizes[o.name]
    stored_full = sum(saved.values()) + extra
    fwd_extra = _walk(fwd, sizes, {name for name, fp8 in saved if not fp8})   # an FP8 copy frees its BF16 source
    # Backward: the gradient w.r.t. an output and w.r.t. its input are alive together, plus a GEMM's
    # half-precision weight gradient before it is added into the gradient buffer.
    bwd_extra = 0.0
    for o in reversed(fwd):
        grads = [sizes.get(n, 0.0) for n in (o.inputs or (LAYER_INPUT,))]
        # a residual add hands its output's gradient to both inputs as it is: one tensor, not one each
        grad_in = max(grads) if _residual(o.name) else sum(grads)
        wgrad = 0.0
        if o.kind == GEMM and o.gemm:
            g, _, n, k = o.gemm
            wgrad = g * n * k * o.dtype_bytes * o.count
        # a loss that writes its gradient into the probabilities it saved allocates none for its output
        own = 0.0 if loss_grad_in_place and o.name == "cross_entropy" else sizes[o.name]
        bwd_extra = max(bwd_extra, own + grad_in + wgrad)
    if recompute == "full":
        # Only the layer input is kept; backward rematerializes this layer's stored tensors first.
        return LayerLiveness(in_bytes, fwd_extra + stored_full, stored_full - in_bytes + bwd_extra, in_bytes)
    # Selective modules: what their own operators produced is not kept (a module keeps its inputs, which
    # other operators produced) and comes back for this layer's backward.
    dropped = sum(v for (name, _), v in saved.items()
                  if name != "attn" and recomputed(name.split(":")[0], recompute, modules))
    return LayerLiveness(stored_full - dropped, fwd_extra, bwd_extra + dropped, in_bytes)


def _walk(fwd: list[Operator], sizes: dict[str, float], keep: set[str]) -> float:
    """Largest sum of alive tensors not in `keep`, allocating outputs and freeing after last use."""
    last_use: dict[str, int] = {}
    for i, o in enumerate(fwd):
        for name in o.inputs or (LAYER_INPUT,):
            last_use[name] = i
    live: dict[str, float] = {LAYER_INPUT: sizes[LAYER_INPUT]}
    peak = 0.0
    for i, o in enumerate(fwd):
        live[o.name] = sizes[o.name]
        peak = max(peak, sum(v for k, v in live.items() if k not in keep))
        for name in o.inputs or (LAYER_INPUT,):
            if last_use.get(name) == i and name not in keep:
                live.pop(name, None)
    return peak


def forward_working_set(ops: list[Operator]) -> float:
    """Inference: largest set of tensors alive at once in one forward pass (nothing kept for backward)."""
    fwd = [o for o in ops if o.phase == "fwd"]
    sizes = {o.name: _size(o) for o in fwd}
    sizes[LAYER_INPUT] = float(fwd[0].out_bytes * fwd[0].count)
    return _walk(fwd, sizes, set())
