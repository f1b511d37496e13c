"""MoE layer data flow in the memory liveness walk: permute -> expert GEMMs -> unpermute -> residual add.

A tensor that no operator names as an input stays alive to the end of the layer in the walk, so the
working set of a small MoE layer is checked against a peak computed by hand from the operator order, and
the stored activations (what backward reads) against their own closed form.
"""
from __future__ import annotations

from rapidllm.memory.liveness import forward_working_set, layer_liveness
from rapidllm.ops import workload as wl
from rapidllm.spec.model import MLASpec, ModelSpec, MoESpec

T, H, HEADS, E, K, F, FS, B = 64, 64, 4, 8, 2, 32, 32, 2   # tokens, hidden, heads, experts, top_k, ffns, bytes
SHARD = wl.Shard(tokens=T, batch=1, q_len=T, kv_len=T, tp=1, sp=False, ep=1, dtype_bytes=B, etp=1, causal=True)


def _model(shared: int = 1, **kw) -> ModelSpec:
    # learned positions: no rotary kernel, so every attention tensor has a reader
    return ModelSpec(name="tiny-moe", hidden=H, layers=2, heads=HEADS, kv_heads=HEADS, head_dim=H // HEADS,
                     ffn=4 * H, vocab=256, position="learned",
                     moe=MoESpec(experts=E, top_k=K, expert_ffn=F, shared_experts=shared, shared_expert_ffn=FS), **kw)


def test_moe_working_set_is_the_largest_simultaneous_live_set():
    # balanced routing of 64 tokens x top-2 over 8 experts: every expert gets 16 rows, all 8 are active
    assert wl.expert_load(_model(), SHARD) == (T * K // E, E)
    th = T * H * B
    x = norm1 = attn = o_proj = res1 = norm2 = s_down = res2 = th
    qkv, router = 3 * th, T * E * B
    permute = down = K * th
    unperm = th                                    # the combine writes one hidden vector per token
    up, act = T * K * 2 * F * B, T * K * F * B
    s_up, s_act = T * 2 * FS * B, T * FS * B
    live_after_each_allocation = [                 # freed after its last reader, the layer input by residual1
        x + norm1,                                 # norm1
        x + norm1 + qkv,                           # qkv
        x + qkv + attn,                            # attn
        x + attn + o_proj,                         # o_proj
        x + o_proj + res1,                         # residual1
        res1 + norm2,                              # norm2
        res1 + norm2 + router,                     # router
        res1 + norm2 + router + permute,           # permute (norm2 still read by the shared expert)
        res1 + norm2 + router + permute + up,      # expert_up
        res1 + norm2 + router + up + act,          # expert_act
        res1 + norm2 + router + act + down,        # expert_down
        res1 + norm2 + router + down + s_up,       # shared_up
        res1 + router + down + s_up + s_act,       # shared_act
        res1 + router + down + s_act + s_down,     # shared_down
        res1 + router + down + s_down + unperm,    # unpermute (combine reads the routing weights)
        res1 + s_down + unperm + res2,             # residual2
    ]
    ops = wl.layer_forward(_model(), SHARD, moe_layer=True)
    assert forward_working_set(ops) == max(live_after_each_allocation) == 50176
    # the dense layer of the same model: up/act/down of the 256-wide MLP, its output read by residual2
    mlp_up, mlp_act = T * 2 * 4 * H * B, T * 4 * H * B
    dense = forward_working_set(wl.layer_forward(_model(), SHARD, moe_layer=False))
    assert dense == max(x + norm1 + qkv, res1 + norm2 + mlp_up, res1 + mlp_up + mlp_act, res1 + mlp_act + th)


def test_moe_stored_activations_are_what_backward_reads():
    """Training keeps each GEMM's input (the routed experts: the permuted tokens), norm and activation
    inputs, Q/K/V and the attention output (+ fp32 log-sum-exp); permutes and residual adds keep nothing."""
    th = T * H * B
    lse = 4 * T * HEADS
    stored = (th + th + 3 * th + th + lse + th + th      # norm1 in, qkv in, q/k/v, attn out, norm2 in, router in
              + K * th + T * K * 2 * F * B + T * K * F * B     # expert_up in (permuted), act in, down in
              + T * 2 * FS * B + T * FS * B)                   # shared act in, shared down in
    lv = layer_liveness(wl.layer_forward(_model(), SHARD, moe_layer=True))
    assert lv.stored == stored
    # the gradient of the permuted tokens (the experts' dgrad output) is alive with the expert_up output's
    # gradient and its weight gradient
    assert lv.backward_peak >= T * K * 2 * F * B + K * th + E * H * 2 * F * B


def _unread(ops: list) -> set[str]:
    read = {n for o in ops for n in o.inputs}
    return {o.name for o in ops if o.name not in read}


def test_every_mlp_and_moe_tensor_has_a_reader():
    """From norm2 on, only the layer's output (residual2) has no reader in the layer: dense, GQA, MLA, encoder
    and the MTP modules' layers, whose head reads their layer's output."""
    mla = MLASpec(q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    models = [_model(), _model(shared=0), _model(causal=False), _model(attention="mla", mla=mla, mtp_depth=2)]
    for model in models:
        for moe_layer in (False, True):
            ops = wl.layer_forward(model, SHARD, moe_layer)
            block = [o.name for o in ops][[o.name for o in ops].index("norm2"):]
            assert _unread(ops) & set(block) == {"residual2"}, (model, moe_layer)
    head = wl.head_forward(models[-1], SHARD)
    by_name = {o.name: o for o in head}
    for depth in (1, 2):
        p = f"mtp{depth}_"
        assert by_name[p + "final_norm"].inputs == (p + "residual2",)
        assert by_name[p + "residual1"].inputs == (p + "proj", p + "o_proj")
        moe_tensors = {p + n for n in ("permute", "expert_down", "unpermute", "shared_down", "residual2")}
        assert not _unread(head) & moe_tensors
