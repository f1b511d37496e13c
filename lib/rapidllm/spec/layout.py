"""A parallel layout and a workload: the plain value types a `Case` holds (spec/case.py resolves and checks
them) and the pipeline split they imply. No validation here: `spec.case.check_layout` decides what is allowed."""
from __future__ import annotations

import functools
from dataclasses import dataclass


@functools.lru_cache(maxsize=4096)
def chunk_split(pp: int, v: int, layers: int, embedding_in_split: bool, loss_in_split: bool
                ) -> tuple[tuple[int, ...], ...]:
    """Layers of each (stage, chunk): the layers, plus one slot each for the embedding and the loss when
    they count in the split, go over the pp x v model chunks as evenly as possible, earlier chunks taking
    the remainder (Megatron-Core itself only accepts slot counts that divide; the remainder rule extends
    it). The embedding slot comes off the first model chunk, the loss slot off the last. Model chunk k runs
    on stage k mod pp as that stage's chunk k // pp (Megatron's interleaved placement). Cached: sweeps and
    the memory model ask for the same few splits thousands of times.
    """
    n = pp * v
    base, extra = divmod(layers + embedding_in_split + loss_in_split, n)
    flat = [base + (k < extra) for k in range(n)]
    flat[0] -= embedding_in_split
    flat[-1] -= loss_in_split
    return tuple(tuple(flat[c * pp + s] for c in range(v)) for s in range(pp))


@functools.lru_cache(maxsize=4096)
def stage_split(pp: int, v: int, layers: int, embedding_in_split: bool, loss_in_split: bool) -> tuple[int, ...]:
    """Layers per pipeline stage: `chunk_split` summed over each stage's chunks."""
    return tuple(sum(c) for c in chunk_split(pp, v, layers, embedding_in_split, loss_in_split))


@dataclass(frozen=True)
class Parallelism:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    # Megatron-Core --expert-tensor-parallel-size; None = tp (its default). Experts are sharded over
    # ep x etp ranks and their gradients reduced over the expert-data-parallel group (`edp`)
    etp: int | None = None
    # token dispatcher of the MoE layers: alltoall (Megatron's, one copy per selected expert) or deepep
    # (DeepEP: one copy per destination node, or per destination rank inside a node)
    moe_dispatcher: str = "alltoall"
    # Megatron-Core --overlap-moe-expert-parallel-comm: in the steady 1F1B phase the forward of one
    # micro-batch and the backward of another run merged, each one's EP all-to-alls beside the other's compute
    moe_a2a_overlap: bool = False
    # Megatron-Core --overlap-param-gather (off by default there, as here): a sharded optimizer's parameter
    # all-gather runs bucket by bucket behind the next step's forward instead of after the optimizer
    overlap_param_gather: bool = False
    # data-parallel gradient buckets reduced during the last micro-batch's backward (Megatron-Core
    # --overlap-grad-reduce, PyTorch DDP, FSDP's shard_grad_op); false: after the whole backward
    # (Megatron-LM 2021-22's default local DDP, `allreduce_gradients()` after the pipeline schedule)
    overlap_grad_reduce: bool = True
    # pipeline sends overlapped with compute (Megatron's overlap_p2p_comm: isend/irecv waited just before
    # use) or blocking batched send/recv; None = Megatron's default: overlapped under the interleaved
    # schedule only (megatron/training/arguments.py forces it off for the others)
    overlap_p2p_comm: bool | None = None
    # Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers, needs sp): the TP all-gathers run
    # as ring exchanges inside the GEMM that consumes them, the reduce-scatters pipelined behind GEMM
    # chunks (engine/tp_overlap.py); off by default there, as here
    tp_comm_overlap: bool = False
    sp: bool = False
    zero: int = 0
    fsdp: str = "none"               # none | full_shard | shard_grad_op
    recompute: str = "none"          # none | selective | full
    # what `selective` recomputes, by Megatron-Core --recompute-modules name (its default: core_attn)
    recompute_modules: tuple[str, ...] = ("core_attn",)
    schedule: str = "1f1b"           # gpipe | 1f1b | interleaved
    virtual_stages: int = 1
    fp32_grad_accum: bool = False
    # Width of the optimizer's master weights and Adam moments: fp32 (mixed-precision Adam, 4 + 8 B per
    # parameter) or bf16 (2 + 4 B: Apex DistributedFusedAdam with dtype=torch.bfloat16, as NeMo-Framework-
    # Launcher 24.07 trains Nemotron-4 340B; Megatron-Core --use-precision-aware-optimizer with 16-bit
    # --main-params-dtype / --exp-avg-dtype / --exp-avg-sq-dtype). Hashed only when set.
    optimizer_state: str = "fp32"
    # Megatron-Core --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
    # embedding and the loss (LM head) each take one layer's slot in the split over pipeline chunks
    embedding_in_split: bool = False
    loss_in_split: bool = False
    # Redundant routed-expert replicas of an inference deployment (DeepSeek's EPLB, num_redundant_experts):
    # experts + redundant_experts slots over the ep ranks, the replicas of an expert sharing its tokens
    # (ops/moe_routing.eplb_rank_loads). Hashed only when set, so older case ids stay as they were.
    redundant_experts: int = 0
    # Inference micro-batch overlap (DeepSeek's dual micro-batch overlap, SGLang --enable-two-batch-overlap,
    # vLLM --enable-dbo; off by default in both): 2 splits each forward pass into two micro-batches whose
    # communication runs beside the other's compute (engine/microbatch.py); 1 = off. Hashed only when set.
    microbatch_overlap: int = 1

    # added after cases were first hashed: left out of case_id while at their defaults (see `_plain`)
    HASH_OMITTED_DEFAULTS = ("overlap_p2p_comm", "tp_comm_overlap", "redundant_experts", "microbatch_overlap",
                             "optimizer_state")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def optimizer_state_bytes(self) -> float:
        """Bytes per parameter of one optimizer-state tensor: a master weight or one Adam moment."""
        return 4.0 if self.optimizer_state == "fp32" else 2.0

    @property
    def p2p_overlapped(self) -> bool:
        """Whether pipeline sends overlap compute: the explicit choice, else Megatron's default (the
        interleaved schedule only)."""
        return self.schedule == "interleaved" if self.overlap_p2p_comm is None else self.overlap_p2p_comm

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel width of each expert (etp, defaulting to tp as Megatron-Core does; an inference case
        has its serving engines' default written out by `expert_grid`)."""
        return self.tp if self.etp is None else self.etp

    def ep_in_tp(self, training: bool) -> bool:
        """Whether the experts live inside the TP group (inference with ep x etp = tp, ep > 1): every rank of
        the group holds the group's tokens, so no all-to-all dispatches them (TensorRT-LLM's moe_ep x moe_tp
        = tp; vLLM's --enable-expert-parallel at dp 1), and the TP all-reduce after the MoE block combines."""
        return not training and self.ep > 1 and self.ep * self.expert_tp == self.tp

    @property
    def edp(self) -> int:
        """Expert data parallelism: ranks of a stage holding the same experts, world / (pp x ep x etp)."""
        return max(self.dp * self.cp * self.tp // (self.ep * self.expert_tp), 1)

    @property
    def chunks_per_stage(self) -> int:
        """Model chunks per pipeline stage: the virtual stages of the interleaved schedule, else 1."""
        return self.virtual_stages if self.schedule == "interleaved" and self.pp > 1 else 1

    def stage_chunk_layers(self, layers: int) -> tuple[tuple[int, ...], ...]:
        """Transformer layers of each (stage, chunk), so uneven splits are explicit (see `chunk_split`)."""
        return chunk_split(self.pp, self.chunks_per_stage, layers, self.embedding_in_split, self.loss_in_split)

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Transformer layers per pipeline stage (sum over its chunks)."""
        return stage_split(self.pp, self.chunks_per_stage, layers, self.embedding_in_split, self.loss_in_split)

    def size(self, axis: str) -> int:
        return getattr(self, axis)

    @property
    def dp_cp(self) -> int:
        """Ranks that reduce a dense gradient and shard a distributed optimizer: dp x cp (Megatron-Core's
        data-parallel group with context parallelism; CP ranks hold the same weights, each the gradient of
        its part of the sequence)."""
        return self.dp * self.cp


@dataclass(frozen=True)
class TrainingWorkload:
    seq_len: int
    global_batch: int                # sequences per optimizer step
    micro_batch: int = 1
    mode: str = "training"

    def microbatches(self, dp: int) -> int:
        """Micro-batches per data-parallel replica per step (gradient-accumulation steps)."""
        return self.global_batch // (dp * self.micro_batch)


@dataclass(frozen=True)
class InferenceWorkload:
    prompt_tokens: int
    output_tokens: int
    batch: int = 1
    concurrency: int = 1
    # serving (concurrency > batch): "steady_state" mean formula, its "disaggregated" decode-instance form
    # (prefills run elsewhere) or the "simulated" closed-loop iteration
    # simulator, and the tokens one iteration may schedule (TensorRT-LLM's default max_num_tokens); see
    # docs/engine.md, "Serving"
    serving: str = "steady_state"
    max_num_tokens: int = 8192
    mode: str = "inference"
    # Speculative decoding with the model's multi-token-prediction modules (DeepSeek-V3 §5.4.3): each
    # decode step verifies `draft_tokens` drafted tokens per sequence (1 + draft_tokens queries) and runs
    # the MTP modules for the next draft; each draft token is accepted with probability `draft_acceptance`
    # given the previous one was. Hashed only when set.
    draft_tokens: int = 0
    draft_acceptance: float = 0.0
    # A serving engine's admission (concurrency > batch; docs/serving-capacity.md): at most `max_batch_size`
    # sequences in flight (TensorRT-LLM's BuildConfig default, 2048), and only as many as the KV-cache pool
    # holds, `kv_cache_fraction` of the memory left after weights and activations (TensorRT-LLM's
    # KvCacheConfig.free_gpu_memory_fraction, 0.9); the other clients queue. Hashed only when set.
    max_batch_size: int = 2048
    kv_cache_fraction: float = 0.9

    # added after cases were first hashed: left out of case_id while at their defaults (see `_plain`)
    HASH_OMITTED_DEFAULTS = ("draft_tokens", "draft_acceptance", "max_batch_size", "kv_cache_fraction")

    @property
    def step_queries(self) -> int:
        """Query tokens per sequence in one decode step: the last token and the drafts it verifies."""
        return 1 + self.draft_tokens

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decode step emits per sequence: the verified token plus each draft token
        accepted with all before it, 1 + p + ... + p^d (1 + p for one MTP module)."""
        return sum(self.draft_acceptance ** i for i in range(self.draft_tokens + 1))

    @property
    def rate_tokens(self) -> int:
        """Tokens a request batch's throughput counts: those generated, or for an encoder's forward pass
        (output_tokens 0) those it encodes."""
        return self.batch * (self.output_tokens or self.prompt_tokens)
