"""Closed-form per-rank memory: the baseline model and the oracle of the liveness walk's tests.

Persistent state follows Rajbhandari et al. 2020 (ZeRO): mixed-precision Adam keeps 2 bytes of bf16
weights, 2 of gradients and 12 of fp32 master weights + two moments per parameter (16 in total), ZeRO-1
shards the 12, ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights. Activations follow Korthikanti et
al. 2023, Table 2 (bytes per layer per micro-batch at 16-bit), with FlashAttention dropping the
5·a·s²·b score term.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rapidllm.memory.kv_pool import KV_BLOCK_TOKENS, Admission
from rapidllm.ops import foundry
from rapidllm.ops.price import local_embedding_head, local_parameters
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload


@dataclass(frozen=True)
class MemoryResult:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    framework: float
    capacity: float
    step_transient: float = 0.0    # bytes alive only in the optimizer step (ZeRO buffers), beside persistent
    stage: int = 0                 # pipeline stage these bytes belong to (the worst one by default)
    # a serving engine's admission (memory/kv_pool.py); None for training and static batching. `kv_cache`
    # then holds the admitted sequences' cache (one prefill batch's where the pool holds fewer)
    admission: Admission | None = None
    batch: int = 1                 # requests one prefill batch admits: the pool must hold that many

    @property
    def persistent(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.kv_cache

    @property
    def optimizer_phase(self) -> float:
        """Allocated bytes at the optimizer step, after the activations are gone (framework excluded)."""
        return self.weights + self.gradients + self.optimizer + self.step_transient

    @property
    def peak(self) -> float:
        return self.persistent + max(self.activations, self.step_transient) + self.framework

    @property
    def feasible(self) -> bool:
        return self.peak <= self.capacity and (self.admission is None or self.admission.kv_sequences >= self.batch)

    @property
    def reason(self) -> str:
        if self.feasible:
            return ""
        a = self.admission
        if self.peak <= self.capacity and a is not None:
            return (f"the KV-cache pool ({a.pool_bytes / 2**30:.2f} GiB, kv_cache_fraction of the HBM left after "
                    f"weights {self.weights / 2**30:.1f}, activations {self.activations / 2**30:.1f} and framework "
                    f"{self.framework / 2**30:.1f} GiB) holds {a.kv_sequences} requests of "
                    f"{a.request_bytes / 2**30:.3f} GiB (prompt + output in blocks of {KV_BLOCK_TOKENS} tokens); "
                    f"a prefill batch needs {self.batch}")
        return (f"needs {self.peak / 2**30:.1f} GiB per GPU (weights {self.weights / 2**30:.1f}, grads "
                f"{self.gradients / 2**30:.1f}, optimizer {self.optimizer / 2**30:.1f}, activations "
                f"{self.activations / 2**30:.1f}, KV {self.kv_cache / 2**30:.1f}) > {self.capacity / 2**30:.1f} GiB HBM")

    def verdict(self) -> dict[str, Any]:
        """The memory columns every prediction record ends with (`VERDICT_KEYS`): peak bytes, whether they
        fit, and why not."""
        return dict(zip(VERDICT_KEYS, (self.peak, self.feasible, self.reason), strict=True))


VERDICT_KEYS = ("peak_memory_bytes", "feasible", "infeasible_reason")


def state_bytes_per_param(precision: str, fp32_grad_accum: bool, optimizer_state: float = 4.0
                          ) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per parameter for Adam at this precision, each optimizer-state
    tensor (master weight, moment) `optimizer_state` bytes wide (`Parallelism.optimizer_state_bytes`)."""
    if precision in ("fp32", "tf32"):
        return 4.0, 4.0, 2 * optimizer_state
    return float(DTYPE_BYTES[precision]), 4.0 if fp32_grad_accum else 2.0, 3 * optimizer_state


def reduced_gradient_bytes(case: Case) -> float:
    """Bytes per parameter of the data-parallel gradient reduction: the gradient's own, except under
    llm-foundry's FSDP (any sharding strategy), which Composer reduces in fp32 (ops/foundry.py). One home
    for the engine's collectives and the alpha-beta baseline's (graph/comm_nodes.py)."""
    p = case.parallelism
    if case.framework == "llm-foundry" and p.fsdp != "none":
        return float(foundry.reduce_bytes(case))
    return state_bytes_per_param(case.weight_precision, p.fp32_grad_accum)[1]


def korthikanti_layer_activations(s: int, b: int, h: int, a: int, t: int, sp: bool, recompute: str,
                                  flash: bool) -> float:
    """Activation bytes of one transformer layer for one micro-batch (Korthikanti et al. 2023, Table 2)."""
    score = 0.0 if flash else 5.0 * a * s / h
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    if recompute == "selective":
        score = 0.0
    if sp:
        return s * b * h / t * (34.0 + score)
    return s * b * h * (10.0 + 24.0 / t + score / t)


def inflight_microbatches(case: Case) -> float:
    """Micro-batches whose activations the first pipeline stage holds at its peak."""
    p, w = case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    m = w.microbatches(p.dp)
    if p.pp == 1:
        return 1.0
    if p.schedule == "gpipe":
        return float(m)
    inflight = float(min(m, p.pp))
    if p.schedule == "interleaved":
        inflight *= 1.0 + (p.pp - 1) / (p.pp * p.virtual_stages)
    return inflight


def closed_form_memory(case: Case) -> MemoryResult:
    p, hw, model = case.parallelism, case.hardware, case.model
    params = local_parameters(case)
    wb, gb, ob = state_bytes_per_param(case.weight_precision, p.fp32_grad_accum, p.optimizer_state_bytes)
    stage = 3 if p.fsdp == "full_shard" else 2 if p.fsdp == "shard_grad_op" else p.zero
    if case.training:
        w = case.workload
        assert isinstance(w, TrainingWorkload)
        weights = params * wb / (p.dp if stage >= 3 else 1)
        grads = params * gb / (p.dp if stage >= 2 else 1)
        optim = params * ob / (p.dp if stage >= 1 else 1)
        per_layer = korthikanti_layer_activations(w.seq_len // p.cp, w.micro_batch, model.hidden, model.heads,
                                                  p.tp, p.sp, p.recompute, case.attention_impl != "naive")
        acts = per_layer * max(p.stage_layers(model.layers)) * inflight_microbatches(case)
        return MemoryResult(weights, grads, optim, acts, 0.0, hw.framework_memory, hw.hbm_capacity)
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    weights = params * wb + local_embedding_head(case) * (DTYPE_BYTES[case.embedding_precision] - wb)
    return MemoryResult(weights, 0.0, 0.0, inference_transient_bytes(case), kv_cache_bytes(case),
                        hw.framework_memory, hw.hbm_capacity)


def kv_cache_bytes(case: Case) -> float:
    """Per-rank KV cache at the end of generation: 2 (K and V) x layers x kv heads x head dim x tokens x the
    cache's element size (`Case.kv_precision`); none for an encoder (causal: false), which generates nothing."""
    w, p, m = case.workload, case.parallelism, case.model
    assert isinstance(w, InferenceWorkload)
    if not m.causal:
        return 0.0
    tokens = w.batch * (w.prompt_tokens + w.output_tokens)
    layers = float(max(p.stage_layers(m.layers)))         # the heaviest stage
    if m.attention == "mla" and m.mla:
        per_token = (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    else:
        per_token = 2 * max(m.kv_heads // p.tp, 1) * m.head_dim
    return per_token * layers * tokens * DTYPE_BYTES[case.kv_precision]


def inference_transient_bytes(case: Case) -> float:
    """Largest prefill buffers alive at once: layer input, QKV and the MLP intermediate of one layer."""
    w, p, m = case.workload, case.parallelism, case.model
    assert isinstance(w, InferenceWorkload)
    tokens = w.batch * w.prompt_tokens
    width = 2 * m.hidden + (m.q_dim + 2 * m.kv_dim) / p.tp + 2 * m.ffn / p.tp
    return tokens * width * DTYPE_BYTES[case.activation_precision] + tokens * m.vocab / p.tp * 4 / max(w.prompt_tokens, 1)
