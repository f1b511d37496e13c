"""The communication nodes of a case, per scope, as the trace stage records them.

Scopes: `layer_dense`/`layer_moe` (per layer per traversal: TP all-reduces, CP key/value gather, EP
dispatch+combine), `pp` (per micro-batch per stage boundary), `dp` (per step, gradient reduction) and
`fsdp` (per micro-batch per traversal, parameter gathers). Counts follow Megatron-LM: two TP all-reduces
per layer per traversal (after attention and after the MLP; with SP a reduce-scatter + all-gather pair of
the same volume; none around routed experts that are not TP-sharded, etp 1), two all-to-alls per MoE
layer per traversal, none when inference keeps EP inside the TP group (the TP all-reduce combines). A
parallel block (`model.block`) reduces its two branches' partial sums once (`parallel_block_reductions`).
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.memory.closed_form import reduced_gradient_bytes
from rapidllm.network.mapping import RankMapping
from rapidllm.ops.moe_routing import expected_units
from rapidllm.ops.price import local_expert_parameters, local_parameters
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload


@dataclass(frozen=True)
class CommNode:
    scope: str
    axis: str
    op: str
    nbytes: float
    count: float          # occurrences per scope unit
    # the forward operator whose recompute runs it again (`engine.baseline.recompute_passes`); "": its axis's
    rerun: str = ""


def expected_distinct(experts: int, top_k: int, groups: int) -> float:
    """Expected number of the `groups` equal expert groups (ranks, nodes) a token's top_k experts fall in
    under unrestricted balanced routing: g·(1 - C(E - E/g, k)/C(E, k)) (`ops.moe_routing.expected_units`).
    For E >> k this tends to g·(1 - (1 - 1/g)^k), the value for k independent picks.
    """
    return expected_units(experts, top_k, groups)


def ep_nodes(case: Case) -> int:
    """Nodes (distinct coordinates beyond the first network dimension) the first EP group spans."""
    p = case.parallelism
    mapping = RankMapping(case.network, {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp})
    return len({mapping.dim_coords(r)[1:] for r in mapping.expert_groups(0, p.ep, p.expert_tp)[0]})


def dispatch_copies(case: Case) -> float:
    """Copies of each routed token one rank's dispatch (and combine) sends, self included.

    alltoall (Megatron-Core's dispatcher): one per selected expert, top_k. capacity (GShard's fixed expert
    capacity): top_k x the model's capacity_factor, the padded buffer. deepep (DeepEP, DeepSeek-AI
    2025, github.com/deepseek-ai/DeepEP; DeepSeek-V3 report §3.2.2): a token crosses the inter-node fabric
    once per destination node (RDMA to the same-index GPU there, then NVLink forwarding to the GPUs that
    hold its experts), and inside one node goes once per destination rank. So the copies are the expected
    distinct destination nodes when the EP group spans several, else the distinct ranks. Priced as one
    all-to-all over the EP group, this puts exactly DeepEP's RDMA volume on the inter-node links: a copy
    leaves the node with probability (nodes - 1)/nodes in both. The NVLink forward is not a separate
    transfer: DeepEP pipelines it behind the RDMA receives, at ~9x the per-GPU bandwidth on DGX H100.
    Group-limited routing (DeepSeek-V3's node-limited routing, `moe.group_limit`) caps the destinations:
    with one expert group per node a token reaches at most group_limit nodes (ops/moe_routing.py).
    """
    moe, p = case.model.moe, case.parallelism
    assert moe is not None
    if p.moe_dispatcher == "alltoall":
        return float(moe.top_k)
    if p.moe_dispatcher == "capacity":
        # GShard (Lepikhin et al. 2021) / the Optimus extension's Eq. 3: every rank sends full expert
        # buffers of E x C tokens, C = capacity_factor x top_k x tokens / E, padded whether filled or not
        return float(moe.top_k) * moe.capacity_factor
    nodes = ep_nodes(case)
    if nodes > 1:
        return expected_units(moe.experts, moe.top_k, nodes, moe.expert_groups, moe.group_limit)
    # inside one node a token goes to every rank holding a shard of one of its experts: with expert TP
    # the flex dispatcher routes over the TP x EP group, each expert's etp shards on etp ranks
    # (`routed_tp_copies`)
    ranks = expected_units(moe.experts, moe.top_k, p.ep, moe.expert_groups, moe.group_limit)
    return ranks * (p.expert_tp if routed_tp_in_dispatcher(case) else 1)


def dispatch_bytes(case: Case, tokens: int) -> float:
    """Bytes one rank sends in a MoE dispatch (= combine) all-to-all (nccl-tests size: the send buffer).

    `tokens` is the TP-gathered layer input. Under sequence parallelism every rank dispatches its own s/tp
    shard, whatever etp: Megatron-Core's alltoall dispatcher sends the permuted local tokens over the EP group
    and only then, with etp > 1, all-gathers the received tokens in the expert-TP group
    (token_dispatcher.py, `MoEAlltoAllTokenDispatcher`: all_to_all, then gather_from_sequence_parallel_region
    over the expert TP group), priced as its own collective after this one (`routed_tp_copies`).
    """
    m, p = case.model, case.parallelism
    routed = tokens // p.tp if p.sp else tokens
    return float(routed * m.hidden * DTYPE_BYTES[case.activation_precision]) * dispatch_copies(case)


def routed_tp_in_dispatcher(case: Case) -> bool:
    """Whether the token dispatcher itself moves the routed tokens of TP-sharded experts: training with
    sequence parallelism, etp = tp > 1 and an EP all-to-all, or ep 1 with the alltoall dispatcher (alltoall,
    capacity). Megatron-Core's dispatchers then take each rank's s/tp shard and never gather the sequence
    before the experts (token_dispatcher.py at d98e8a64): the alltoall dispatcher all-gathers the tokens
    it received in the expert-TP group after the all-to-all (`dispatch_postprocess`) and reduce-scatters
    the experts' output before the combine (`combine_preprocess`), and with ep 1 does the same, its
    all-to-all over the one-rank EP group returning its input (tensor_parallel/mappings.py `_AllToAll`:
    world_size 1 returns the input), so the gather carries the rank's permuted top_k copies; the flex
    (DeepEP) dispatcher replicates the routing map over the expert-TP ranks and dispatches over the TP x EP
    group (`MoEFlexTokenDispatcher._initialize_metadata`). At ep 1 that dispatch sends each token once to
    each TP rank, the bytes of a sequence all-gather, which the model prices as that gather (`routed_on_sequence`)."""
    p = case.parallelism
    moves = moe_all_to_all(case) or (p.ep == 1 and p.moe_dispatcher != "deepep")
    return bool(case.model.moe) and case.training and p.sp and p.expert_tp == p.tp > 1 and moves


def routed_tp_copies(case: Case) -> float:
    """Size of the expert-TP all-gather after the dispatch (and of the reduce-scatter before the combine) in
    multiples of the layer's sequence bytes; 0 where there is none.

    The alltoall dispatcher gathers what the EP all-to-all delivered: under balanced routing each rank
    receives its s/tp shard's top_k copies' worth (top_k x capacity_factor padded, `dispatch_copies`), so
    the gathered tensor over etp = tp ranks is top_k x the sequence, not the sequence. The flex dispatcher
    has no gather: its TP x EP dispatch carries those copies (`dispatch_copies`)."""
    if not routed_tp_in_dispatcher(case) or case.parallelism.moe_dispatcher == "deepep":
        return 0.0
    return dispatch_copies(case)


def moe_tp_collectives(case: Case) -> bool:
    """Whether an MoE layer's MLP position keeps the sequence's TP collectives (gather before, reduce after).

    Routed experts with etp < tp take each rank's sequence shard and need none; with etp = tp the
    dispatcher moves their tokens (`routed_tp_in_dispatcher`), except without SP or with DeepEP at ep 1,
    where the experts run on the TP group's whole sequence. Shared experts are ordinary
    TP-sharded MLPs on the gathered sequence and keep them. Experts inside the TP group (inference, ep x
    etp = tp) see every token of the group and leave partial sums for the TP all-reduce.
    """
    m = case.model
    return routed_on_sequence(case) or bool(m.moe and m.moe.shared_experts)


def routed_on_sequence(case: Case) -> bool:
    """Whether the routed experts (and the router) read the TP group's gathered sequence (`moe_tp_collectives`
    less the shared experts): etp = tp where the dispatcher does not move the routed tokens itself, or EP
    inside the TP group. Otherwise the router reads each rank's sequence shard, and a gather of the
    sequence serves the shared experts alone."""
    p = case.parallelism
    return (p.expert_tp == p.tp and not routed_tp_in_dispatcher(case)) or moe_dispatch_free(case)


def moe_all_to_all(case: Case) -> bool:
    """Whether an MoE layer dispatches and combines its tokens by all-to-all over the EP group: ep > 1, unless
    EP lives inside the TP group (`moe_dispatch_free`)."""
    return bool(case.model.moe) and case.parallelism.ep > 1 and not moe_dispatch_free(case)


def moe_dispatch_free(case: Case) -> bool:
    """Inference with EP inside the TP group (`Parallelism.ep_in_tp`): each rank computes its whole experts
    on the routed tokens of all the tokens the group holds (no sequence parallelism in serving), so nothing
    is dispatched and the TP all-reduce that follows the MoE block sums the experts' partial outputs
    (TensorRT-LLM's moe_tp x moe_ep = tp; vLLM's --enable-expert-parallel at dp 1)."""
    return case.parallelism.ep_in_tp(case.training)


def expert_grad_weight(case: Case) -> float:
    """Per-rank reduction volume of an expert gradient byte, relative to a dense one on the DP group.

    Expert gradients are reduced over the edp ranks holding the same experts, dense ones over dp; a ring
    reduce-scatter (or all-reduce) moves (n - 1)/n of the buffer per rank, so an expert byte weighs
    ((edp - 1)/edp) / ((n - 1)/n) when both are priced on the DP group's links, n = dp x cp of them (0 when
    edp is 1).
    """
    p = case.parallelism
    return (1.0 - 1.0 / p.edp) / (1.0 - 1.0 / p.dp_cp) if p.dp_cp > 1 else 0.0


def dp_reduced_parameters(case: Case, params: float, experts: float) -> float:
    """Parameters whose gradients the DP group reduces, expert ones weighted by `expert_grad_weight`
    (params itself when there are no routed experts)."""
    return params - experts * (1.0 - expert_grad_weight(case)) if experts else params


def parallel_block_reductions(case: Case) -> float:
    """TP all-reduces (or reduce-scatter + all-gather pairs under SP) per traversal of a parallel block
    (graph/templates.py `parallel_block_rules`): one forward, one per norm backward, so in training
    (1 + parallel_norms) / 2 on average over the forward and backward traversals the baseline counts;
    inference runs the forward alone."""
    return (1 + case.model.parallel_norms) / 2 if case.training else 1.0


def layer_nodes(case: Case, tokens: int, scope: str) -> list[CommNode]:
    m, p = case.model, case.parallelism
    b = DTYPE_BYTES[case.activation_precision]
    act = tokens * m.hidden * b
    nodes = []
    moe = scope.endswith("moe") and m.moe is not None
    if p.tp > 1 and m.block == "parallel":
        nodes.append(CommNode(scope, "tp", "all_reduce", act, parallel_block_reductions(case)))
    elif p.tp > 1:
        # the attention's pair, and the MLP position's, which a checkpoint of the module holding it runs
        # again (Megatron-Core recompute_modules mlp / moe / shared_experts re-run the module's forward,
        # its fc1 gather and fc2 reduce-scatter included; `mlp_module`)
        nodes.append(CommNode(scope, "tp", "all_reduce", act, 1))
        if not moe or moe_tp_collectives(case):
            nodes.append(CommNode(scope, "tp", "all_reduce", act, 1, rerun=mlp_module(case, moe)[0]))
        copies = routed_tp_copies(case) if moe else 0.0
        if copies:     # the expert-TP gather / reduce-scatter pair, as one all-reduce, gathered again where the
            # experts are recomputed (the graph's recompute weaves it before them)
            nodes.append(CommNode(scope, "tp", "all_reduce", act * copies, 1, rerun="expert_up"))
    if p.cp > 1:
        nodes.append(CommNode(scope, "cp", "all_gather", float(m.cp_kv_dim) * b * tokens * p.cp / p.tp, 1))
    if moe and moe_all_to_all(case):
        nodes.append(CommNode(scope, "ep", "all_to_all", dispatch_bytes(case, tokens), 2))
    return nodes


def mlp_module(case: Case, moe: bool) -> tuple[str, str]:
    """First and last operator of the module whose forward runs a layer's MLP-position TP collectives (the
    gather before it, the reduction after it), which a checkpoint of that module runs again: the dense MLP
    (fc1, fc2); in an MoE layer the MoE block where the routed experts read the gathered sequence (router,
    combine: `routed_on_sequence`), else the shared experts, whose gather serves them alone (recompute_modules
    shared_experts re-runs it as moe does). `CommNode.rerun` names the first, `templates.Rule.owner` the last."""
    if not moe:
        return "mlp_up", "mlp_down"
    return ("router", "unpermute") if routed_on_sequence(case) else ("shared_up", "shared_down")


def communication_nodes(case: Case) -> list[CommNode]:
    m, p = case.model, case.parallelism
    w = case.workload
    b = DTYPE_BYTES[case.activation_precision]
    if isinstance(w, TrainingWorkload):
        tokens = w.micro_batch * w.seq_len // p.cp
    else:
        assert isinstance(w, InferenceWorkload)
        tokens = w.batch * w.prompt_tokens
    nodes = layer_nodes(case, tokens, "layer_dense") + layer_nodes(case, tokens, "layer_moe")
    if p.pp > 1:
        nodes.append(CommNode("pp", "pp", "send_recv", tokens * m.hidden * b / (p.tp if p.sp else 1), 2))
    if isinstance(w, TrainingWorkload) and p.dp_cp > 1:       # CP ranks reduce their gradients too
        reduced = dp_reduced_parameters(case, local_parameters(case), local_expert_parameters(case))
        grads = reduced * reduced_gradient_bytes(case)
        if p.zero >= 2 or p.fsdp != "none":
            nodes += [CommNode("dp", "dp", "reduce_scatter", grads, 1), CommNode("dp", "dp", "all_gather", grads, 1)]
        else:
            nodes.append(CommNode("dp", "dp", "all_reduce", grads, 1))
        if p.zero == 3 or p.fsdp == "full_shard":
            weights = local_parameters(case) * DTYPE_BYTES[case.weight_precision]
            nodes.append(CommNode("fsdp", "dp", "all_gather", weights, 1))
    return nodes
