"""Expert tensor parallelism (etp) and the DeepEP dispatcher: closed forms the MoE model must meet."""
from __future__ import annotations

import itertools

import pytest

from rapidllm.graph.comm_nodes import dispatch_bytes, dispatch_copies, ep_nodes, expected_distinct, layer_nodes, \
    routed_tp_copies
from rapidllm.graph.templates import layer_rules
from rapidllm.memory.state import state_bytes
from rapidllm.ops import workload as wl
from rapidllm.ops.price import local_expert_parameters
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.errors import SpecError

SEQ = 4096


def mapping(tp: int = 2, ep: int = 32, pp: int = 8, dp: int = 16, **par) -> dict:
    """Qwen3-235B-A22B on DGX H100 nodes (8 GPUs per node), by default the layout of the ModelZoo's rows 0/1
    (which also set etp 1: pass etp=1 for their exact layout; etp = tp needs ep x tp to divide dp x tp)."""
    return dict(model="qwen3-235b-a22b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                workload=dict(mode="training", seq_len=SEQ, global_batch=2048, micro_batch=1),
                parallelism=dict(tp=tp, ep=ep, pp=pp, dp=dp, sp=True, **par))


def qwen3(**par) -> Case:
    return resolve_case(mapping(**par), "test")


def test_every_etp_dispatches_the_sequence_shard() -> None:
    """Under SP each rank's all-to-all carries its own s/tp shard's top_k copies, with etp 1 or etp = tp
    (Megatron-Core gathers the received tokens in the expert-TP group after the all-to-all); until
    2026-12-02 etp = tp dispatched the gathered sequence, tp x the bytes, over the EP group's InfiniBand."""
    for tp in (2, 4):           # ep 16 over 64 ranks a stage: room for etp = tp (a Megatron-Core grid)
        full, shard = qwen3(tp=tp, ep=16, dp=64 // tp), qwen3(tp=tp, ep=16, dp=64 // tp, etp=1)
        m = full.model
        assert dispatch_bytes(full, SEQ) == SEQ // tp * m.hidden * 2 * m.moe.top_k == dispatch_bytes(shard, SEQ)


def test_etp1_experts_are_whole_and_see_the_group_tokens() -> None:
    case = qwen3(etp=1)
    moe, s = case.model.moe, wl.training_shard(case)
    ops = {o.name: o for o in wl.layer_forward(case.model, s, True)}
    tokens = SEQ // 2 * 32 * moe.top_k // moe.experts          # SP shard x ep ranks x top_k / experts
    assert ops["expert_up"].gemm == (moe.experts // 32, tokens, 2 * moe.expert_ffn, case.model.hidden)
    assert ops["expert_up"].count == 1                               # one grouped GEMM over the local experts
    assert ops["router"].gemm[1] == SEQ // 2
    legacy = {o.name: o for o in wl.layer_forward(case.model, wl.training_shard(qwen3(ep=16)), True)}
    assert legacy["expert_up"].gemm[2] == moe.expert_ffn             # etp = tp: FFN split over tp = 2


def test_etp1_drops_tp_collectives_around_the_experts() -> None:
    def tp_ops(case: Case, backward: bool) -> int:
        return sum(r.axis == "tp" for r in layer_rules(case, SEQ, True, backward))
    for backward in (False, True):
        # backward adds the re-gather of the attention input for qkv_wgrad (sequence parallelism)
        assert tp_ops(qwen3(ep=16), backward) == 4 + backward
        assert tp_ops(qwen3(ep=16, etp=1), backward) == 2 + backward


def test_expert_parameters_per_rank() -> None:
    case = qwen3(etp=1)
    m, p = case.model, case.parallelism
    per_expert = 3 * m.hidden * m.moe.expert_ffn
    assert local_expert_parameters(case) == m.moe_layer_count() * m.moe.experts * per_expert / (32 * 1 * 8)
    assert local_expert_parameters(qwen3(ep=16)) == local_expert_parameters(case)    # 32 shards either way
    assert p.edp == 1 and qwen3(tp=4, ep=8, dp=8, etp=1).parallelism.edp == 4
    # ZeRO-1 shards expert optimizer state over edp (here 4), dense state over dp (8)
    row4 = qwen3(tp=4, ep=8, dp=8, etp=1, zero=1)
    assert state_bytes(row4).optimizer < state_bytes(qwen3(tp=4, ep=8, dp=8, etp=1)).optimizer / 3


@pytest.mark.parametrize("experts,top_k,groups", [(4, 1, 2), (4, 2, 2), (8, 2, 4), (8, 3, 2), (12, 4, 3),
                                                  (12, 5, 6), (16, 8, 4)])
def test_expected_distinct_groups_matches_enumeration(experts: int, top_k: int, groups: int) -> None:
    size = experts // groups
    picks = list(itertools.combinations(range(experts), top_k))
    mean = sum(len({e // size for e in pick}) for pick in picks) / len(picks)
    assert expected_distinct(experts, top_k, groups) == pytest.approx(mean, rel=1e-12)


def test_expected_distinct_tends_to_independent_picks() -> None:
    """For E >> k the hypergeometric miss probability tends to (1 - 1/g)^k."""
    g, k = 4, 8
    assert expected_distinct(2 ** 16, k, g) == pytest.approx(g * (1 - (1 - 1 / g) ** k), rel=1e-3)


def test_deepep_sends_no_more_than_alltoall() -> None:
    layouts = [(dict(), 4), (dict(tp=4, ep=8, dp=8), 1), (dict(ep=8, pp=1, dp=128), 1)]   # (layout, EP nodes)
    for layout, nodes in layouts:
        plain, deep = qwen3(etp=1, **layout), qwen3(etp=1, moe_dispatcher="deepep", **layout)
        assert ep_nodes(deep) == nodes
        assert dispatch_bytes(deep, SEQ) <= dispatch_bytes(plain, SEQ)
        moe = deep.model.moe
        units = nodes if nodes > 1 else deep.parallelism.ep
        assert dispatch_bytes(deep, SEQ) / dispatch_bytes(plain, SEQ) == pytest.approx(
            expected_distinct(moe.experts, moe.top_k, units) / moe.top_k)


@pytest.mark.parametrize("par,key", [(dict(tp=4, dp=8, ep=8, etp=2), "etp 2 must be 1 or tp"),
                                     (dict(), "ep 32 x etp 2 = 64 expert shards do not tile the "
                                                      "dp x cp x tp = 32 ranks"),
                                     (dict(etp=1, sp=False), "sequence parallelism")])
def test_bad_etp_layouts(par: dict, key: str) -> None:
    m = mapping()
    m["parallelism"].update(par)
    with pytest.raises(SpecError, match=key):
        resolve_case(m, "test")


def test_a2a_overlap_hides_all_to_all_time_within_its_bounds() -> None:
    """Megatron's merged 1F1B steps: the step gets shorter, by no more than the EP all-to-all time a step
    exposes without overlap (they hide only EP time), and the compute is untouched."""
    from rapidllm.prediction import evaluate
    base = dict(tp=2, ep=32, pp=8, dp=16, etp=1, moe_dispatcher="deepep", schedule="interleaved",
                virtual_stages=4, embedding_in_split=True, loss_in_split=True, zero=1)
    plain, merged = evaluate(qwen3(**base)), evaluate(qwen3(**base, moe_a2a_overlap=True))
    assert merged["step_time_s"] < plain["step_time_s"]
    assert merged["compute_time_s"] == pytest.approx(plain["compute_time_s"], rel=1e-12)
    assert plain["step_time_s"] - merged["step_time_s"] <= plain["exposed_comm_s"] + 1e-9


def test_deepep_sms_shrink_what_the_overlap_hides(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepEP's kernels hold 20 of the H100's 132 SMs while the partner's compute runs beside them. Every
    merged step then saves min(share x EP time, compute) with share = 112/132, so the step's saving lies
    between share x and 1 x the saving of an SM-free dispatcher (the step is a max of sums of steps)."""
    from rapidllm.engine import composer
    from rapidllm.engine.engine import training_record
    from rapidllm.ops.price import price_case
    base = dict(tp=2, ep=32, pp=8, dp=16, etp=1, moe_dispatcher="deepep", schedule="interleaved",
                virtual_stages=4, zero=1)
    plain, merged = qwen3(**base), qwen3(**base, moe_a2a_overlap=True)
    ops = price_case(merged)

    def step(case: Case) -> float:
        return training_record(case, ops)["step_time_s"]
    t_plain, t_merged = step(plain), step(merged)
    monkeypatch.setattr(composer, "DEEPEP_SMS", 0)
    t_free = step(merged)
    share = 1 - 20 / merged.hardware.sm_count
    assert t_free < t_merged
    assert share * (t_plain - t_free) - 1e-9 <= t_plain - t_merged <= t_plain - t_free


@pytest.mark.parametrize("par,why", [
    (dict(tp=8, ep=1, pp=8, dp=4), "needs training with ep > 1"),
    (dict(schedule="gpipe", etp=1), "schedule 1f1b or interleaved"),
])
def test_a2a_overlap_needs_ep_and_a_1f1b_schedule(par: dict, why: str) -> None:
    with pytest.raises(SpecError, match=f"parallelism.moe_a2a_overlap: .*{why}"):
        qwen3(**{**par, "moe_a2a_overlap": True})


def _expert_ops(case: Case, shard: wl.Shard) -> dict:
    return {o.name: o for o in wl.layer_forward(case.model, shard, True) if o.name.startswith("expert")}


def test_grouped_experts_carry_exactly_the_routed_flops() -> None:
    """Balanced routing: the grouped GEMMs compute top_k expert MLPs per routed token, no more, no less."""
    case = qwen3(tp=4, ep=8, dp=8, etp=1)
    m, moe, s = case.model, case.model.moe, wl.training_shard(case)
    ops = _expert_ops(case, s)
    rank_tokens = s.moe_tokens * 8 * moe.top_k // 8                  # the EP group's copies over its ranks
    assert ops["expert_up"].flops + ops["expert_down"].flops == 2 * rank_tokens * 3 * m.hidden * moe.expert_ffn
    assert ops["expert_up"].gemm[0] == moe.experts // 8


def test_grouped_gemm_is_never_slower_than_its_experts_one_by_one() -> None:
    """Pooling the tiles of 16 experts into one launch fills the waves single small GEMMs leave empty."""
    from rapidllm.ops.gemm import price_gemms
    hw = qwen3(etp=1).hardware
    for m in (64, 512, 4096):
        grouped = price_gemms(hw, [16], [m], [3072], [4096], "bf16").time_s[0]
        alone = price_gemms(hw, [1], [m], [3072], [4096], "bf16").time_s[0]
        assert grouped <= 16 * alone


def test_decode_reads_only_the_experts_its_tokens_reach() -> None:
    """A decode step of 4 sequences routes 32 expert picks over 128 experts: about 23% of them are hit,
    and the grouped GEMM reads those experts' weights only; a prefill of 4 x 2048 tokens hits them all.
    tp 8 ep 8 in inference keeps EP inside the TP group: the 8 ranks hold the same 4 tokens and whole
    experts (etp 1)."""
    m = dict(mapping(tp=1, ep=1, pp=1, dp=1), workload=dict(mode="inference", prompt_tokens=2048,
                                                             output_tokens=128, batch=4))
    m["network"] = "dgx-h100"
    m["parallelism"] = dict(tp=8, ep=8)
    case = resolve_case(m, "test")
    moe = case.model.moe
    local = moe.experts // 8
    decode = _expert_ops(case, wl.decode_shard(case, 2048))["expert_up"]
    hit = 1 - (1 - moe.top_k / moe.experts) ** 4                # the TP group's 4 tokens, routed once
    assert decode.gemm[0] == round(1 + (local - 1) * hit) < local
    assert decode.gemm[2] == 2 * moe.expert_ffn                   # whole experts
    assert _expert_ops(case, wl.prefill_shard(case))["expert_up"].gemm[0] == local


def test_a_hot_expert_never_speeds_a_step_up() -> None:
    """Skewed routing (one expert at 2x the mean, total conserved) loads its rank more: the step can only
    get longer."""
    from rapidllm.engine.engine import training_record
    from rapidllm.ops.price import price_case
    base = mapping(tp=4, ep=8, pp=2, dp=32, etp=1)
    base["workload"] = dict(mode="training", seq_len=SEQ, global_batch=256, micro_batch=1)
    balanced = resolve_case(base, "test")
    skewed = resolve_case(dict(base, moe_routing={"hot_expert_factor": 2.0}), "test")
    t = [training_record(c, price_case(c))["step_time_s"] for c in (balanced, skewed)]
    assert t[1] > t[0]


def test_expert_groups_follow_megatron_expert_grid() -> None:
    """Megatron-Core orders a stage's ranks etp, ep, edp for the experts: the ep ranks of a group lie etp
    apart. With etp = tp = 8 on 8-GPU nodes an EP group is one GPU of each of 8 nodes (its dispatch crosses
    InfiniBand); consecutive ranks (the TP group, one NVLink switch) priced it at NVLink speed."""
    from rapidllm.engine.comm_cost import CommCost
    wide = qwen3(tp=8, ep=8, pp=4, dp=8)                      # etp defaults to tp in training
    narrow = qwen3(tp=8, ep=8, pp=4, dp=8, etp=1)
    cost = CommCost(wide)
    ep0, tp0 = cost.groups("ep", 0)[0], cost.groups("tp", 0)[0]
    assert ep0 == tuple(range(0, 64, 8)) and len(set(ep0) & set(tp0)) == 1
    assert ep_nodes(wide) == 8 and ep_nodes(narrow) == 1
    assert CommCost(narrow).groups("ep", 0)[0] == tuple(range(8))
    # every rank of the stage is in exactly one EP group under both grids
    for case in (wide, narrow):
        groups = CommCost(case).groups("ep", 1)
        assert sorted(r for g in groups for r in g) == list(range(64, 128))
    # the dispatch then moves (ep - 1)/ep of its bytes through one 400 Gb/s NIC per GPU: at least that over
    # the NIC's rate (x the device's network utilization), and not 1.5x more
    nbytes = 64e6
    nic = 50e9 * wide.hardware.utilization.network
    t = cost.time("ep", "all_to_all", nbytes)
    assert 7 / 8 * nbytes / nic < t < 1.5 * 7 / 8 * nbytes / nic


def _tp_rules(case: Case, backward: bool) -> list:
    return [r for r in layer_rules(case, SEQ, True, backward) if r.axis in ("tp", "ep")]


def test_etp_tp_gathers_the_routed_copies_after_the_dispatch() -> None:
    """etp = tp, alltoall: Megatron-Core gathers the tokens the all-to-all delivered in the expert-TP group
    (top_k x the sequence's bytes under balanced routing; x capacity_factor padded), and reduce-scatters the
    experts' output before the combine; the sequence itself is not gathered before the router."""
    h = qwen3(ep=16).model.hidden
    for dispatcher, copies in (("alltoall", 8.0), ("capacity", 8.0 * qwen3(ep=16).model.moe.capacity_factor)):
        case = qwen3(ep=16, moe_dispatcher=dispatcher)
        routed = SEQ * h * 2 * copies
        assert routed_tp_copies(case) == copies
        rules = _tp_rules(case, False)[2:]
        fwd = [(r.axis, r.op, r.nbytes, r.launch, r.consumer) for r in rules]
        assert fwd == [("ep", "all_to_all", dispatch_bytes(case, SEQ), "permute", "+permute"),
                       ("tp", "all_gather", routed, "permute", ("expert_up_fp8_cast", "expert_up")),
                       ("tp", "reduce_scatter", routed, "expert_down", "unpermute"),
                       ("ep", "all_to_all", dispatch_bytes(case, SEQ), "expert_down", "unpermute")]
        assert [r.follows for r in rules] == [None, rules[0], None, rules[2]]
        bwd = _tp_rules(case, True)
        gather, scatter = (r for r in bwd if r.nbytes == routed)
        assert (gather.op, gather.follows.axis, scatter.op, scatter.follows) == \
            ("all_gather", "ep", "reduce_scatter", None)
        # the baseline engine: the attention pair at the sequence's bytes, the routed pair at copies x
        tp_nodes = [(n.nbytes, n.count) for n in layer_nodes(case, SEQ, "layer_moe") if n.axis == "tp"]
        assert tp_nodes == [(SEQ * h * 2, 1), (routed, 1)]


@pytest.mark.parametrize("dispatcher", ["alltoall", "capacity"])
def test_ep1_alltoall_gathers_the_routed_copies(dispatcher: str) -> None:
    """ep 1, etp = tp = 2, SP: Megatron-Core's alltoall dispatcher runs its all-to-all over a one-rank EP group
    (returns its input) and all-gathers the rank's permuted top_k copies in the expert-TP group, then
    reduce-scatters the experts' output (token_dispatcher.py `dispatch_postprocess`/`combine_preprocess`):
    top_k x the sequence's bytes (x capacity_factor padded), no all-to-all, no sequence gather before the
    router. Until 2026-12-02 ep 1 gathered the sequence once, as the allgather dispatcher does."""
    from rapidllm.graph.templates import COMM, layer_templates, ops_view
    from rapidllm.ops.price import price_case
    case = qwen3(ep=1, dp=16, moe_dispatcher=dispatcher)
    moe, h = case.model.moe, case.model.hidden
    copies = moe.top_k * (moe.capacity_factor if dispatcher == "capacity" else 1)
    routed = SEQ * h * 2 * copies
    assert routed_tp_copies(case) == copies
    rules = layer_rules(case, SEQ, True, False)
    assert [(r.op, r.nbytes, r.launch) for r in rules[2:]] == [("all_gather", routed, "permute"),
                                                                ("reduce_scatter", routed, "expert_down")]
    assert rules[2].follows.axis == "ep" and rules[2].follows not in rules     # its all-to-all: not run at ep 1
    assert all(r.axis == "tp" for r in layer_rules(case, SEQ, True, True))
    assert [(n.nbytes, n.count) for n in layer_nodes(case, SEQ, "layer_moe")] == [(SEQ * h * 2, 1), (routed, 1)]
    fwd_t = next(t for t in layer_templates(case, ops_view(price_case(case)))
                 if t.part == "fwd" and t.section == "layer_moe")
    names = [n.name for n in fwd_t.nodes]
    gather = next(i for i, n in enumerate(fwd_t.nodes)
                  if n.kind == COMM and n.nbytes == routed and n.op == "all_gather")
    assert fwd_t.nodes[gather].deps == (names.index("permute"),)
    assert not [d for d in fwd_t.nodes[names.index("router")].deps if fwd_t.nodes[d].kind == COMM]


def test_baseline_reruns_the_expert_tp_pair_with_the_experts() -> None:
    """Recompute of the MoE block reruns the dispatcher, the expert-TP gather included: the event engine's
    recompute weaves the gather before the recomputed experts, and the alpha-beta ablation counts the pair
    once more exactly then (it counted it twice whatever the recompute, as for the attention's TP pair)."""
    from rapidllm.engine.baseline import recompute_passes
    from rapidllm.graph.templates import COMM, COMPUTE, layer_templates, ops_view
    from rapidllm.ops.price import price_case
    for par, passes in ((dict(recompute_modules=["moe_act"]), 2), (dict(recompute_modules=["moe"]), 3),
                        (dict(recompute="full"), 3), (dict(recompute="none"), 2)):
        case = qwen3(ep=16, **{"recompute": "selective", **par})
        routed = [n for n in layer_nodes(case, SEQ, "layer_moe") if n.axis == "tp"][-1]
        assert routed.nbytes == SEQ * case.model.hidden * 2 * routed_tp_copies(case)
        assert recompute_passes(case, routed.axis, routed.rerun) == passes
        bwd = next(t for t in layer_templates(case, ops_view(price_case(case)))
                   if t.section == "layer_moe" and t.part == "bwd")
        first_bwd = next(i for i, n in enumerate(bwd.nodes) if n.kind == COMPUTE and n.phase == "bwd")
        again = [n for n in bwd.nodes[:first_bwd] if n.kind == COMM and (n.axis, n.op) == ("tp", "all_gather")
                 and n.nbytes == routed.nbytes]
        assert len(again) == passes - 2


def test_chained_collective_waits_for_the_all_to_all() -> None:
    """The gather reads what the all-to-all delivered: its node depends on the all-to-all's node, and the
    experts on both."""
    from rapidllm.graph.templates import layer_templates, ops_view
    from rapidllm.ops.price import price_case
    case = qwen3(ep=16)
    fwd = next(t for t in layer_templates(case, ops_view(price_case(case))) if t.part == "fwd")
    names = [(n.axis, n.op) if n.kind == "comm" else n.name for n in fwd.nodes]
    a2a, gather = names.index(("ep", "all_to_all")), names.index(("tp", "all_gather"), names.index("permute"))
    assert a2a in fwd.nodes[gather].deps
    assert {a2a, gather} <= set(fwd.nodes[names.index("expert_up")].deps)


def test_a_followed_rule_runs_where_its_follower_does() -> None:
    """`Rule.follows` names the collective a rule waits for. Where that rule's own consumer is not among the
    operators (dropped from a recompute, say), it still runs, ahead of its follower, with no operator
    waiting for it; a rule that follows one not in the list waits for nothing but its launch, never for
    the rule listed before it (the positional `chained` flag of 2026-12-01 took rule k - 1, whatever it
    was, and lost the chain when that rule was dropped)."""
    from rapidllm.graph.templates import Rule, weave
    ops = [("permute", "fwd"), ("expert_up", "fwd"), ("unpermute", "fwd")]
    a2a = Rule("permute", "absent", "ep", "all_to_all", 1.0)
    other = Rule("permute", "unpermute", "tp", "all_gather", 3.0)
    gather = Rule("permute", "expert_up", "tp", "all_gather", 2.0, follows=a2a)
    nodes = weave(ops, [a2a, other, gather])
    at = {n.nbytes: i for i, n in enumerate(nodes) if n.kind == "comm"}
    assert nodes[at[1.0]].deps == (0,) and nodes[at[3.0]].deps == (0,)
    assert nodes[at[2.0]].deps == (0, at[1.0])
    assert at[1.0] not in {d for n in nodes for d in n.deps if n.kind == "compute"}
    op = {n.name: n for n in nodes if n.kind == "compute"}
    assert at[2.0] in op["expert_up"].deps and at[3.0] in op["unpermute"].deps
    alone = weave(ops, [other, gather])         # no all-to-all in this case: nothing to wait for
    assert [n.deps for n in alone if n.nbytes == 2.0] == [(0,)]
    # a follower run only by its owner (a recomputed module's reduction) still brings what it follows
    owned = Rule("permute", "absent", "tp", "reduce_scatter", 4.0, follows=a2a, owner="expert_up")
    chain = [n for n in weave(ops, [a2a, owned]) if n.kind == "comm"]
    assert [n.nbytes for n in chain] == [1.0, 4.0]
    with pytest.raises(ValueError, match="follows a rule listed after it"):
        weave(ops, [gather, a2a])


def test_fp8_cast_of_the_gathered_tokens_waits_for_the_gather() -> None:
    """FP8 training: TE's GroupedLinear casts the expert input (and, backward, the incoming gradient) that the
    dispatcher gathered in BF16, so the cast, the first operator reading the gathered tensor and sized as
    all of it, waits for the expert-TP gather as well as the all-to-all (it waited for the all-to-all alone:
    the cast of top_k x the sequence ran beside the gather of those very tokens)."""
    from rapidllm.graph.templates import COMM, layer_templates, ops_view
    from rapidllm.ops.price import price_case
    case = resolve_case({**mapping(ep=16), "precision": "fp8"}, "test")
    for t in layer_templates(case, ops_view(price_case(case))):
        if t.section != "layer_moe" or t.part not in ("fwd", "bwd"):
            continue
        nodes = t.nodes
        names = [n.name for n in nodes]
        cast = names.index("expert_up_fp8_cast" if t.part == "fwd" else "expert_down_dgrad_fp8_cast")
        gather = max(i for i in nodes[cast].deps if nodes[i].kind == COMM)
        assert (nodes[gather].axis, nodes[gather].op, nodes[gather].nbytes) == \
            ("tp", "all_gather", SEQ * case.model.hidden * 2 * case.model.moe.top_k)
        a2a = [i for i in nodes[gather].deps if nodes[i].kind == COMM]
        assert [(nodes[i].axis, nodes[i].op) for i in a2a] == [("ep", "all_to_all")]
        assert a2a[0] in nodes[cast].deps


@pytest.mark.parametrize("par, routed_gathered", [(dict(etp=1), False), (dict(), False), (dict(ep=1, dp=8), False),
                                                   (dict(ep=1, dp=8, moe_dispatcher="deepep"), True)])
def test_sequence_gather_of_the_shared_experts(par: dict, routed_gathered: bool) -> None:
    """Qwen2-57B-A14B (a shared expert), tp 2 + SP: where the router reads the rank's shard (etp 1; etp = tp
    with the dispatcher moving the routed tokens), the sequence is gathered for the shared expert alone
    (Megatron-Core's SharedExpertMLP, TE column-parallel fc1 / row-parallel fc2): the router does not wait
    for it, nor does the combine's backward for the gather of the output gradient; the shared expert's GEMMs
    do. So does ep 1 with the alltoall dispatcher (its gather moves the routed copies); with DeepEP at ep 1
    (a dispatch over the TP group, priced as the sequence gather) the router reads the gathered sequence."""
    from rapidllm.graph.templates import COMM, layer_templates, ops_view
    from rapidllm.ops.price import price_case
    case = resolve_case({**mapping(), "model": "qwen2-57b-a14b",
                         "parallelism": {"tp": 2, "ep": 4, "pp": 1, "dp": 4, "sp": True, **par}}, "test")
    waits = {}
    for t in layer_templates(case, ops_view(price_case(case))):
        if t.section == "layer_moe" and t.part in ("fwd", "bwd"):
            for n in t.nodes:
                gathers = [(t.nodes[d].nbytes, t.nodes[d].op) for d in n.deps
                           if t.nodes[d].kind == COMM and t.nodes[d].axis == "tp" and t.nodes[d].op == "all_gather"]
                waits[t.part, n.name] = gathers
    gather = [(SEQ * case.model.hidden * 2.0, "all_gather")]
    assert waits["fwd", "router"] == waits["bwd", "unpermute_bwd"] == (gather if routed_gathered else [])
    if not routed_gathered:
        assert waits["fwd", "shared_up"] == waits["bwd", "shared_down_dgrad"] == gather


@pytest.mark.parametrize("par", [dict(etp=1), dict(), dict(ep=1, dp=8), dict(ep=1, dp=8, moe_dispatcher="deepep")])
def test_shared_expert_weight_gradient_regathers_its_input(par: dict) -> None:
    """Qwen2-57B-A14B, tp 2 + SP: the shared expert's fc1 is a column-parallel linear that keeps its input
    sequence-sharded and all-gathers it again in backward for its weight gradient (Megatron-Core
    tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication: saves the local `input`,
    backward `dist_all_gather_func(..., async_op=True)` under sequence_parallel; TE's Linear likewise), as
    the dense MLP's fc1 does: one all-gather of the sequence after shared_act_bwd, read by shared_up_wgrad
    (shared_up_dgrad beside it). Until 2026-12-02 only dense layers had it. Routed experts have none."""
    from rapidllm.graph.templates import COMM, layer_templates, ops_view
    from rapidllm.ops.price import price_case
    case = resolve_case({**mapping(), "model": "qwen2-57b-a14b",
                         "parallelism": {"tp": 2, "ep": 4, "pp": 1, "dp": 4, "sp": True, **par}}, "test")
    bwd = next(t for t in layer_templates(case, ops_view(price_case(case)))
               if t.section == "layer_moe" and t.part == "bwd")
    names = [n.name for n in bwd.nodes]
    gathers = [d for d in bwd.nodes[names.index("shared_up_wgrad")].deps
               if bwd.nodes[d].kind == COMM and (bwd.nodes[d].axis, bwd.nodes[d].op) == ("tp", "all_gather")]
    assert [bwd.nodes[d].nbytes for d in gathers] == [SEQ * case.model.hidden * 2.0]
    assert bwd.nodes[gathers[0]].deps == (names.index("shared_act_bwd"),)
    assert gathers[0] not in bwd.nodes[names.index("shared_up_dgrad")].deps
    for routed in ("expert_up_wgrad", "expert_down_wgrad"):
        assert not [d for d in bwd.nodes[names.index(routed)].deps
                    if bwd.nodes[d].kind == COMM and bwd.nodes[d].nbytes == SEQ * case.model.hidden * 2.0]


def test_flex_dispatcher_carries_expert_tp_in_its_dispatch() -> None:
    """DeepEP (flex) with etp = tp replicates the routing over the expert-TP ranks and dispatches over TP x
    EP: no TP collective at the MLP position; inside one node a token goes to etp x its distinct EP ranks."""
    case = qwen3(tp=2, ep=4, pp=8, dp=16, moe_dispatcher="deepep")       # EP ranks 2 apart: one node
    moe = case.model.moe
    assert ep_nodes(case) == 1 and routed_tp_copies(case) == 0.0
    assert dispatch_copies(case) == pytest.approx(2 * expected_distinct(moe.experts, moe.top_k, 4))
    assert [r.op for r in layer_rules(case, SEQ, True, False) if r.axis == "tp"] == ["all_gather", "reduce_scatter"]


def test_template_cache_tells_dispatchers_apart() -> None:
    """Mixtral over 8 nodes: DeepEP's distinct nodes equal top_k (2), so both dispatchers send equal bytes,
    but only alltoall gathers in the expert-TP group; a shared template table must not hand one the other's
    templates (it did on the first version of the etp = tp gather: the step depended on evaluation order)."""
    from rapidllm.caches import Caches
    from rapidllm.prediction import evaluate
    base = dict(model="mixtral-8x22b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                workload=dict(mode="training", seq_len=SEQ, global_batch=256, micro_batch=1),
                parallelism=dict(tp=8, ep=8, pp=4, dp=32, sp=True, zero=1))

    def step(dispatcher: str) -> float:
        m = {**base, "parallelism": {**base["parallelism"], "moe_dispatcher": dispatcher}}
        return evaluate(resolve_case(m, "test"))["step_time_s"]
    fresh = {}
    for d in ("alltoall", "deepep"):
        with Caches().active():
            fresh[d] = step(d)
    assert fresh["alltoall"] > fresh["deepep"]
    for order in (("alltoall", "deepep"), ("deepep", "alltoall")):
        with Caches().active():
            assert {d: step(d) for d in order} == fresh
