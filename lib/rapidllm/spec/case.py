"""Case spec: model + hardware + network + workload + parallel layout, resolved and checked.

`resolve_case` turns a user mapping (names or inline specs) into a frozen `Case` with SI units, or raises
SpecError naming the file, the key and what is allowed. Impossible layouts (tp not dividing heads, a world
size the network cannot hold, ...) are errors here, so every later stage can trust a Case.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rapidllm.caches import current
from rapidllm.spec.case_id import hash_fields, json_text, key_text, plain, spec_json
from rapidllm.spec.errors import SpecError
from rapidllm.spec.frameworks import framework_parallelism
from rapidllm.spec.hardware import GEMM_PRECISIONS, HardwareSpec, locked_clock
from rapidllm.spec.layout import InferenceWorkload, Parallelism, TrainingWorkload
from rapidllm.spec.model import ModelSpec
from rapidllm.spec.named import inline_spec_files, resolve_named, validate_by_key
from rapidllm.spec.network import FaultSpec, NetworkSpec
from rapidllm.spec.paths import display, spec_path
from rapidllm.spec.schema import load_yaml


@dataclass(frozen=True)
class Case:
    model: ModelSpec
    hardware: HardwareSpec
    network: NetworkSpec
    workload: TrainingWorkload | InferenceWorkload
    parallelism: Parallelism
    precision: str = "bf16"
    attention_impl: str = "flash"
    moe_hot_expert_factor: float = 1.0   # 1.0 = balanced routing
    framework: str = "megatron"          # software stack: what each one changes, spec/frameworks.py
    name: str = ""
    fp8_recipe: str = "tensorwise"       # FP8 training GEMM kernels: TE per-tensor scaling, or DeepSeek-V3's
                                         # fine-grained "blockwise" kernels (docs/fp8.md)
    decode_attention: str = "grouped"    # generation-step attention kernel: one CTA per KV head ("grouped":
                                         # FlashAttention, FlashInfer, XQA) or per query head ("per_head":
                                         # 2023 engines' masked MHA, ops/attention_per_head.py)
    kv_cache_precision: str = "auto"     # element type of the inference KV cache: "auto" (the activation
                                         # precision, vLLM's and TensorRT-LLM's `auto`) or "fp8" (docs/fp8.md)

    HASH_OMITTED_DEFAULTS = ("fp8_recipe", "decode_attention", "kv_cache_precision")

    @property
    def training(self) -> bool:
        return isinstance(self.workload, TrainingWorkload)

    @property
    def activation_precision(self) -> str:
        """What everything but the GEMMs runs and moves in: under `precision: fp8` BF16, as Transformer
        Engine runs FP8 training (only its Linear/GroupedLinear GEMMs take FP8 inputs; attention, norms,
        softmax, residuals and communication stay BF16; TE user guide, "Using FP8 with Transformer
        Engine") and FP8 serving engines run inference (TensorRT-LLM FP8: GEMMs FP8, KV cache BF16
        unless kv_cache_dtype fp8 is configured: `kv_precision`); so does `fp4` serving (NVFP4 checkpoints:
        only the linear layers of the blocks are quantized, docs/fp4.md). Other precisions: the precision
        itself."""
        return activation_of(self.precision)

    @property
    def kv_precision(self) -> str:
        """Element type of the KV cache: FP8 where the case sets `kv_cache_precision: fp8` (TensorRT-LLM's
        FP8_KV_CACHE, vLLM's and SGLang's --kv-cache-dtype fp8: K and V quantized with a per-tensor scale
        as they are written, dequantized in the attention kernel), else the activation precision."""
        return self.activation_precision if self.kv_cache_precision == "auto" else self.kv_cache_precision

    @property
    def expert_replication(self) -> float:
        """Routed-expert weights held per expert: (experts + redundant_experts) / experts (1 without replicas)."""
        moe, r = self.model.moe, self.parallelism.redundant_experts
        return (moe.experts + r) / moe.experts if moe and r else 1.0

    @property
    def weight_precision(self) -> str:
        """Element type of the stored weights: FP8 serving checkpoints hold FP8 weights (per-tensor
        scales), FP4 ones NVFP4 weights with their block scales; FP8 training keeps BF16 weights with FP32
        master copies and casts them per step (TE)."""
        return self.precision if not self.training else self.activation_precision

    @property
    def embedding_precision(self) -> str:
        """Element type of the stored token embedding and LM head: the activation precision. FP8 and NVFP4
        serving checkpoints quantize "only the weights and activations of the linear operators within
        transformers blocks" (TensorRT Model Optimizer's model cards, e.g. nvidia/Llama-3.1-405B-Instruct-FP4
        and -FP8): both stay BF16, and the LM head GEMM runs BF16 (`workload.HIGH_PRECISION_GEMMS`); training
        keeps every weight at the activation precision (`weight_precision`)."""
        return self.activation_precision

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @functools.cached_property
    def case_id(self) -> str:
        """Stable hash of the fully resolved case (name excluded: it is a label, not physics).

        Hashes the same JSON text as `case_id_reference` (`dataclasses.asdict` less the HASH_OMITTED_DEFAULTS
        fields at their defaults), built without asdict's deep copies; computed once per Case (the case is
        frozen). The text is written field by field in sorted order, as `json.dumps(sort_keys=True)` writes
        the whole; the model, hardware and network, shared by thousands of cases of a sweep, reuse their
        text (`case_id.spec_json`).
        """
        parts = []
        for name, default, omit in hash_fields(Case):
            v = getattr(self, name)
            if name == "name" or (omit and v == default):
                continue
            parts.append((name, spec_json(v) if name in _SHARED_SPECS else json_text(plain(v))))
        blob = "{" + ",".join(key_text(k) + text for k, text in sorted(parts)) + "}"
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_SHARED_SPECS = ("model", "hardware", "network")
# case keys a search spec (search/spec.py) and the explorer's search (explore/search_hook.py) carry to every
# searched case beside precision and framework: kernel options, not layout axes
SEARCH_CASE_KEYS = ("fp8_recipe", "decode_attention", "kv_cache_precision")


def activation_of(precision: str) -> str:
    """The activation precision of a case precision (`Case.activation_precision`): BF16 under the GEMM-only
    precisions fp8 and fp4."""
    return "bf16" if precision in GEMM_PRECISIONS else precision


def _spec(cls: Any, value: Any, mapping: dict, source: str) -> Any:
    """cls.from_mapping, shared across cases when the spec came from a named file (frozen, so safe): kept
    in `Caches.named_specs` under (class, name) with the file's mapping it was built from, and rebuilt when
    that mapping differs (the file changed), with its plain form (`Caches.plain_specs`)."""
    if not isinstance(value, str):
        return cls.from_mapping(mapping, source)
    caches = current()
    key = (cls, value)
    hit = caches.named_specs.get(key)
    if hit is None or not (hit[0] is mapping or hit[0] == mapping):
        spec = cls.from_mapping(mapping, source)
        hit = caches.named_specs.put(key, (mapping, spec))
        caches.plain_specs.put((cls, getattr(spec, "name", None)), (spec, plain(spec)))
    return hit[1]


# Bounds on products of keys, which a schema cannot state (docs/limits.md gives the reasons).
MAX_WORLD = 2**17                  # GPUs: the largest training jobs reported run on ~100k GPUs
MAX_MICROBATCHES = 2**16           # gradient-accumulation steps per replica (the graph holds each one)
MAX_MICROBATCH_TOKENS = 2**24      # micro_batch x seq_len: 16.7M tokens, 64x Llama 3's 8k x 32 micro-batch
MAX_INFERENCE_TOKENS = 2**26       # batch x (prompt + output): the KV cache of 64k 1k-token requests
MAX_SERVING_WORK = 2**24           # concurrency x output_tokens of the simulated serving loop (~1 s of it)
MAX_SERVING_ITERATIONS = 2**20     # concurrency x output_tokens / sequences in flight: the simulated loop's
                                   # iterations per window of C requests (~1 us each, 10 windows at most)
MAX_PIPELINE_TASKS = 2**21         # pp x virtual stages x micro-batches: the pipeline graph's tasks (2^20 built in
                                   # 1.4 s and 1 GB, 2^22 took 3.7 GB; 2^28 allocated past 8 GB into a MemoryError)


def _check_bounds(hardware: HardwareSpec, par: Parallelism, workload: Any, precision: str, source: str,
                  recipe: str = "tensorwise") -> None:
    """Limits on products of keys (work and memory that would explode), fp8 and fp4 only where the device
    has their tensor units (an FP8 recipe only when the case runs FP8), fp4 in inference only, and 16-bit
    optimizer state only beside half-precision weights."""
    if par.world > MAX_WORLD:
        raise SpecError.at(source, "parallelism", f"dp x tp x pp x cp = {par.world} GPUs; allowed: at most {MAX_WORLD}")
    if isinstance(workload, TrainingWorkload) and workload.microbatches(par.dp) > MAX_MICROBATCHES:
        raise SpecError.at(source, "workload.global_batch", f"global_batch / (dp x micro_batch) = "
                           f"{workload.microbatches(par.dp)} micro-batches per step; allowed: at most {MAX_MICROBATCHES}")
    if isinstance(workload, TrainingWorkload) and workload.micro_batch * workload.seq_len > MAX_MICROBATCH_TOKENS:
        raise SpecError.at(source, "workload.micro_batch", f"micro_batch x seq_len = "
                           f"{workload.micro_batch * workload.seq_len} tokens; allowed: at most {MAX_MICROBATCH_TOKENS}")
    if isinstance(workload, InferenceWorkload):
        tokens = max(workload.batch, workload.concurrency) * (workload.prompt_tokens + workload.output_tokens)
        if tokens > MAX_INFERENCE_TOKENS:
            raise SpecError.at(source, "workload", f"max(batch, concurrency) x (prompt_tokens + output_tokens) = "
                               f"{tokens} tokens requested at once; allowed: at most {MAX_INFERENCE_TOKENS}")
        work = workload.concurrency * workload.output_tokens
        if workload.serving == "simulated" and work > MAX_SERVING_WORK:
            raise SpecError.at(source, "workload.serving", f"simulated serving of concurrency x output_tokens = "
                               f"{work} tokens; allowed: at most {MAX_SERVING_WORK} (or serving: steady_state)")
    if recipe != "tensorwise" and precision != "fp8":
        raise SpecError.at(source, "fp8_recipe", f"{recipe} scales FP8 GEMMs, and precision is {precision}; "
                           "allowed: fp8_recipe only with precision fp8")
    if precision in GEMM_PRECISIONS and precision not in hardware.tensor_flops:
        raise SpecError.at(source, "precision", f"{hardware.name} has no {precision} tensor units; allowed: "
                           f"{', '.join(sorted(hardware.tensor_flops))}")
    if par.optimizer_state != "fp32" and precision in ("fp32", "tf32"):
        raise SpecError.at(source, "parallelism.optimizer_state", f"16-bit Adam state keeps a 2-byte master copy "
                           f"of half-precision weights; precision {precision} trains FP32 weights without one; "
                           "allowed with fp32 / tf32: fp32")
    if precision == "fp4" and isinstance(workload, TrainingWorkload):
        raise SpecError.at(source, "precision", "fp4 is a serving precision (NVFP4 checkpoints for inference); "
                           "FP4 training recipes are not modelled; allowed in training: "
                           f"{', '.join(sorted(set(hardware.tensor_flops) - {'fp4'}))}")


def expert_tp_of(par: Parallelism, training: bool) -> int:
    """The expert TP width a layout runs: `parallelism.etp` when set; else tp in training (Megatron-Core's
    --expert-tensor-parallel-size default) and, in inference, tp / ep when ep divides tp: serving engines
    carve EP out of the TP group, moe_tp x moe_ep = tp (TensorRT-LLM, "Expert Parallelism in TensorRT-LLM";
    vLLM's --enable-expert-parallel places whole experts over the TP x DP ranks), so `tp: 8, ep: 8` holds
    one whole expert in eight per GPU, not an eighth of each of them split again eight ways."""
    if par.etp is not None:
        return par.etp
    if not training and par.ep > 1 and par.tp % par.ep == 0:
        return par.tp // par.ep
    return par.tp


def expert_grid(par: Parallelism, workload: Any) -> Parallelism:
    """`par` with the expert TP width it runs written out (`expert_tp_of`), so that weights, operators and
    collectives, and the case id, all see it; unchanged where the default already is tp."""
    etp = expert_tp_of(par, isinstance(workload, TrainingWorkload))
    return par if etp == par.expert_tp else dataclasses.replace(par, etp=etp)


def check_attention(model: ModelSpec, attention_impl: str, source: str, kv_cache: str = "auto") -> None:
    """flash_triton runs equal q/k/v head dims of at most 128 (flash_attn_triton.py L591-593): a case or a
    searched layout asking it of an MLA model or wider heads is bad input, not a failure of the kernel's price.
    An FP8 cache (`kv_cache`, the stored `kv_cache_precision`) is read by fused serving kernels (XQA,
    FlashAttention, FlashInfer); unfused attention would read it through GEMMs priced at the activation type."""
    if attention_impl == "flash_triton" and (model.attention == "mla" or model.head_dim > 128):
        raise SpecError.at(source, "attention_impl", f"flash_triton (the 2023 Triton FlashAttention) runs equal "
                           f"q/k/v head dims of at most 128, not {model.name}'s; allowed: flash, flash3, naive")
    if kv_cache == "fp8" and attention_impl not in ("flash", "flash3"):
        raise SpecError.at(source, "attention_impl", f"{attention_impl} does not read an FP8 KV cache (fused "
                           "kernels do: XQA, FlashAttention, FlashInfer); allowed with kv_cache_precision fp8: "
                           "flash, flash3")


def check_decode_attention(model: ModelSpec, workload: Any, kernel: str, source: str) -> None:
    """per_head prices the generation steps of a GQA/MHA decoder's inference: training has no decode step,
    MLA's absorbed decode runs grouped kernels only (FlashMLA), and per-query-head kernels take one query
    token per sequence (TensorRT-LLM: only XQA runs multi_query_tokens), so no speculative drafts."""
    if kernel == "grouped":
        return
    if not isinstance(workload, InferenceWorkload) or not workload.output_tokens:
        raise SpecError.at(source, "decode_attention", "per_head is the attention kernel of inference decode "
                           "steps, which this case has none of; allowed: grouped (the default)")
    if model.attention == "mla":
        raise SpecError.at(source, "decode_attention", f"{model.name} uses MLA, whose absorbed decode runs "
                           "grouped kernels (FlashMLA); allowed: grouped")
    if workload.draft_tokens:
        raise SpecError.at(source, "decode_attention", "per-query-head decode kernels take one query token "
                           "per sequence, not draft tokens; allowed with draft_tokens > 0: grouped")


def kv_cache_option(model: ModelSpec, workload: Any, precision: str, value: str, source: str) -> str:
    """The stored `kv_cache_precision` of a case: "auto" for the activation precision (named or not, so the
    case id of a case that names it is that of one that does not), or "fp8". FP8 caches are an inference
    option of a GQA/MHA decoder's cache (the kernels that read one: `check_attention`): training keeps no
    cache, and FlashMLA's dense decode reads BF16 latents only (its FP8 cache, 656 B per token with per-128
    scales and a BF16 rope part, serves DeepSeek-V3.2's sparse decode, not modelled)."""
    activation = activation_of(precision)
    if value in ("auto", activation):
        return "auto"
    if value != "fp8":
        raise SpecError.at(source, "kv_cache_precision", f"{value} is neither the activation precision "
                           f"({activation}) nor fp8; allowed: auto, {activation}, fp8")
    if not isinstance(workload, InferenceWorkload) or not model.causal:
        raise SpecError.at(source, "kv_cache_precision", "fp8 stores the KV cache of inference decode, which "
                           f"this case keeps none of; allowed: auto or {activation}")
    if model.attention == "mla":
        raise SpecError.at(source, "kv_cache_precision", f"{model.name} uses MLA: FlashMLA's dense decode reads "
                           "a BF16 latent cache (its FP8 cache serves DeepSeek-V3.2's sparse decode, not modelled); "
                           f"allowed: auto or {activation}")
    return "fp8"


# The framework overlap switches that apply to some layouts only (Megatron-Core's conditions, below): the
# case rules refuse one set where it has nothing to overlap, and a search turns it on only where it applies
# (search/space.py, docs/search.md "Overlap switches")
OVERLAP_SWITCHES = ("tp_comm_overlap", "overlap_param_gather", "moe_a2a_overlap")


def overlap_applies(switch: str, par: Parallelism, training: bool) -> bool:
    """Whether the overlap switch `switch` (one of OVERLAP_SWITCHES) has something to overlap in layout `par`:
    tp_comm_overlap the sequence-parallel all-gathers and reduce-scatters of training (Transformer Engine's
    userbuffers: tp > 1 with sp; Megatron-Bridge recipes set `tp_comm_overlap = TP > 1` with sp),
    overlap_param_gather a sharded optimizer's parameter all-gather (ZeRO-1/2, fsdp shard_grad_op; ZeRO-3
    gathers per layer already), moe_a2a_overlap the EP all-to-alls of merged 1F1B steps (ep > 1)."""
    if switch == "tp_comm_overlap":
        return training and par.tp > 1 and par.sp
    if switch == "overlap_param_gather":
        return training and (par.zero in (1, 2) or par.fsdp == "shard_grad_op")
    assert switch == "moe_a2a_overlap", switch
    return training and par.ep > 1 and par.schedule in ("1f1b", "interleaved")


def check_layout(model: ModelSpec, par: Parallelism, workload: Any, source: str) -> None:
    def bad(key: str, msg: str) -> SpecError:
        return SpecError.at(source, key, msg)

    if model.heads % par.tp:
        raise bad("parallelism.tp", f"tp {par.tp} does not divide heads {model.heads} of {model.name}; allowed: "
                  f"{', '.join(str(d) for d in range(1, model.heads + 1) if model.heads % d == 0)}")
    if model.kv_heads % par.tp and par.tp % model.kv_heads:
        raise bad("parallelism.tp", f"tp {par.tp} and kv_heads {model.kv_heads} of {model.name}: one must divide the other")
    slots = model.layers + par.embedding_in_split + par.loss_in_split
    if par.pp * par.chunks_per_stage > slots:
        raise bad("parallelism.pp", f"pp x virtual_stages = {par.pp * par.chunks_per_stage} exceeds the {slots} "
                  f"layer slots of {model.name} (layers, plus embedding / loss when they count in the split)")
    chunked = par.virtual_stages > 1
    if chunked != (par.schedule == "interleaved" and par.pp > 1) and (chunked or par.pp > 1):
        raise bad("parallelism.virtual_stages", f"{par.virtual_stages} model chunks per stage with schedule "
                  f"{par.schedule!r} and pp {par.pp}; allowed: >= 2 with schedule 'interleaved' and pp > 1, else 1")
    if par.ep > 1:
        if not model.moe:
            raise bad("parallelism.ep", f"ep {par.ep} needs a MoE model; {model.name} is dense")
        slots = model.moe.experts + par.redundant_experts
        if slots % par.ep:
            raise bad("parallelism.ep", f"ep {par.ep} does not divide experts {model.moe.experts}"
                      + (f" + redundant_experts {par.redundant_experts}" if par.redundant_experts else "")
                      + "; allowed: a divisor of the expert slots (inference may add parallelism.redundant_experts)")
        if (par.dp * par.cp * par.tp) % par.ep:
            raise bad("parallelism.ep", f"ep {par.ep} must divide dp x cp x tp = {par.dp * par.cp * par.tp} (experts are placed across data-parallel ranks)")
    stage_ranks = par.dp * par.cp * par.tp
    etp = expert_tp_of(par, isinstance(workload, TrainingWorkload))
    moe = model.moe
    widths = [("tp", "ffn", model.ffn, par.tp)]
    if moe:
        widths += [("etp", "moe.expert_ffn", moe.expert_ffn, etp)]
        if moe.shared_experts:
            widths += [("tp", "shared experts' ffn", (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts,
                        par.tp)]
    for axis, what, width, ways in widths:      # ffn // ways = 0 priced a zero-width GEMM: ZeroDivisionError
        if width < ways:
            raise bad(f"parallelism.{axis}", f"{axis} {ways} exceeds the {what} {width} of {model.name}: a rank "
                      f"would hold no MLP column; allowed: {axis} at most {width}")
    if par.ep > 1 and isinstance(workload, TrainingWorkload) and stage_ranks % (par.ep * etp):
        # Megatron-Core's expert grid, etp x ep x edp = tp x cp x dp ranks of a stage: more expert shards
        # than ranks would price each GPU with a fraction of an expert it cannot hold
        raise bad("parallelism.ep", f"ep {par.ep} x etp {etp} = {par.ep * etp} expert shards "
                  f"do not tile the dp x cp x tp = {stage_ranks} ranks of a pipeline stage (Megatron-Core: etp x "
                  f"ep x edp = tp x cp x dp); allowed: ep x etp dividing {stage_ranks} (etp defaults to tp; "
                  "with sp, parallelism.etp: 1)")
    if isinstance(workload, InferenceWorkload):
        inside = {par.tp // par.ep} if par.ep > 1 and par.tp % par.ep == 0 else set()
        allowed = sorted(inside | {par.tp})
        if etp not in allowed:
            raise bad("parallelism.etp", f"etp {etp} with tp {par.tp}, ep {par.ep}: inference splits each expert "
                      f"over tp / ep ranks (EP inside the TP group) or over tp (vLLM's DP + EP at tp > 1 is not "
                      f"modelled); allowed: {' or '.join(map(str, allowed))}")
        if par.ep > 1 and stage_ranks % (par.ep * etp):
            raise bad("parallelism.ep", f"ep {par.ep} x etp {etp} = {par.ep * etp} expert shards do not tile the "
                      f"dp x cp x tp = {stage_ranks} ranks of a stage (vLLM's DP + EP at tp > 1 is not modelled); allowed: ep "
                      f"dividing tp {par.tp} (whole experts inside the TP group, etp = tp / ep: TensorRT-LLM's "
                      f"moe_tp x moe_ep = tp), or ep x tp dividing {stage_ranks} (experts over data-parallel "
                      "ranks, etp = tp)")
    if par.redundant_experts and not (model.moe and isinstance(workload, InferenceWorkload)):
        raise bad("parallelism.redundant_experts", "redundant expert replicas are an inference deployment of a MoE "
                  "model (DeepSeek's EPLB); allowed: 0 for training or a dense model")
    if par.redundant_experts and par.ep == 1:
        raise bad("parallelism.redundant_experts", "replicas of hot experts balance the load of expert-parallel "
                  "ranks; with ep 1 every GPU holds every expert already; allowed: 0, or set parallelism.ep > 1")
    if model.moe and par.redundant_experts > model.moe.experts * (par.ep - 1):
        raise bad("parallelism.redundant_experts", f"{par.redundant_experts} replicas of {model.moe.experts} experts "
                  f"over ep {par.ep} put one expert twice on a rank; allowed: at most experts x (ep - 1) = "
                  f"{model.moe.experts * (par.ep - 1)}")
    if par.microbatch_overlap > 1 and not (isinstance(workload, InferenceWorkload) and par.pp == 1):
        raise bad("parallelism.microbatch_overlap", "the two-micro-batch overlap splits an inference forward "
                  "pass on one pipeline stage; allowed: 1 for training or pp > 1")
    if isinstance(workload, InferenceWorkload) and workload.prompt_tokens + workload.output_tokens > model.max_seq_len:
        # servers refuse such a request (vLLM's max_model_len, TensorRT-LLM's max_seq_len default to the
        # model's context window); training may run longer sequences (context extension), so it is not checked
        raise bad("workload.prompt_tokens", f"prompt_tokens + output_tokens = "
                  f"{workload.prompt_tokens + workload.output_tokens} exceeds the {model.max_seq_len}-token context "
                  f"window of {model.name}; allowed: at most max_seq_len (an inline model mapping may set it)")
    if isinstance(workload, InferenceWorkload) and workload.draft_tokens and not (model.causal and model.vocab):
        raise bad("workload.draft_tokens", f"{model.name} is an encoder: it generates no tokens to draft; allowed: 0")
    if isinstance(workload, InferenceWorkload) and workload.draft_tokens > model.mtp_depth:
        raise bad("workload.draft_tokens", f"draft_tokens {workload.draft_tokens} needs as many MTP modules; "
                  f"{model.name} has mtp_depth {model.mtp_depth}; allowed: 0 to {model.mtp_depth} (an inline "
                  "model mapping may set mtp_depth)")
    if isinstance(workload, InferenceWorkload) and workload.draft_tokens and workload.serving == "simulated":
        raise bad("workload.draft_tokens", "speculative decoding is modelled with static batching and serving "
                  "steady_state or disaggregated; allowed with serving simulated: 0")
    if isinstance(workload, InferenceWorkload) and workload.draft_acceptance and not workload.draft_tokens:
        raise bad("workload.draft_acceptance", "is the acceptance of draft tokens; set workload.draft_tokens "
                  "(allowed without it: 0)")
    if isinstance(workload, TrainingWorkload) and par.expert_tp not in (1, par.tp):
        raise bad("parallelism.etp", f"etp {par.expert_tp} must be 1 or tp {par.tp}: expert TP groups inside the TP group are not modelled")
    if isinstance(workload, TrainingWorkload) and par.expert_tp < par.tp and not par.sp:
        raise bad("parallelism.etp", "etp < tp is modelled for training with sequence parallelism (the experts "
                  "take each rank's sequence shard; Megatron-Core requires SP with EP and TP)")
    training = isinstance(workload, TrainingWorkload)
    if par.moe_a2a_overlap and not overlap_applies("moe_a2a_overlap", par, training):
        raise bad("parallelism.moe_a2a_overlap", "the EP all-to-all overlap merges 1F1B steps: it needs training "
                  "with ep > 1 and schedule 1f1b or interleaved")
    if par.recompute_modules != ("core_attn",) and par.recompute != "selective":
        raise bad("parallelism.recompute_modules", "names what recompute 'selective' recomputes; set "
                  f"parallelism.recompute: selective (it is {par.recompute!r})")
    if par.overlap_param_gather and not overlap_applies("overlap_param_gather", par, training):
        raise bad("parallelism.overlap_param_gather", "overlaps a sharded optimizer's parameter all-gather: it "
                  "needs training with zero 1 or 2 (or fsdp shard_grad_op); ZeRO-3 / full_shard gathers per "
                  "layer already")
    if par.tp_comm_overlap and not overlap_applies("tp_comm_overlap", par, training):
        raise bad("parallelism.tp_comm_overlap", "Transformer Engine's userbuffers overlap the sequence-parallel "
                  "all-gathers and reduce-scatters of training: it needs tp > 1 and sp: true")
    if par.optimizer_state != "fp32" and not isinstance(workload, TrainingWorkload):
        raise bad("parallelism.optimizer_state", "the optimizer's state exists in training only; allowed in "
                  "inference: fp32 (the default)")
    if par.zero and par.fsdp != "none":
        raise bad("parallelism.fsdp", "set either zero or fsdp, not both (fsdp full_shard is ZeRO-3, shard_grad_op is ZeRO-2)")
    if isinstance(workload, TrainingWorkload):
        if workload.seq_len % par.cp:
            raise bad("parallelism.cp", f"cp {par.cp} does not divide seq_len {workload.seq_len}")
        if par.sp and workload.seq_len % par.tp:
            raise bad("parallelism.sp", f"sequence parallel needs tp {par.tp} to divide seq_len {workload.seq_len}")
        if workload.global_batch % (par.dp * workload.micro_batch):
            raise bad("workload.global_batch", f"global_batch {workload.global_batch} is not a multiple of "
                      f"dp x micro_batch = {par.dp} x {workload.micro_batch}; allowed: a multiple of "
                      f"{par.dp * workload.micro_batch}")
        tasks = par.pp * par.chunks_per_stage * workload.microbatches(par.dp)
        if tasks > MAX_PIPELINE_TASKS:        # last: a layout another rule refuses keeps that rule's reason
            raise bad("parallelism.pp", f"pp x virtual stages x micro-batches = {tasks} pipeline tasks per step; "
                      f"allowed: at most {MAX_PIPELINE_TASKS} (fewer micro-batches: a larger micro_batch or dp)")
    else:
        _check_inference(model, par, workload, bad)


def _check_inference(model: ModelSpec, par: Parallelism, workload: InferenceWorkload, bad: Any) -> None:
    """An encoder (causal: false) keeps no KV cache and generates nothing: its inference is one forward
    pass over the batch (output_tokens 0), which a decoder's is not."""
    if par.pp > 1 and par.schedule == "interleaved":
        raise bad("parallelism.schedule", "inference does not use interleaved pipeline schedules")
    if par.cp > 1:      # docs/limits.md: what the engines' prefill / decode context parallelism would need
        raise bad("parallelism.cp", f"{par.cp}: context parallelism is modelled for training only (an inference "
                  "pass would not split its prompt, so cp GPUs would only add communication); allowed: 1 "
                  "(more GPUs for inference: tp, pp or replicas)")
    if not model.causal and workload.output_tokens:
        raise bad("workload.output_tokens", f"{model.name} is an encoder (causal: false): it has no KV-cache "
                  f"decode; allowed: 0 (inference is one forward pass over the batch), not {workload.output_tokens}")
    if model.causal and not workload.output_tokens:
        raise bad("workload.output_tokens", f"0 (a forward pass only) is for encoder models (causal: false); "
                  f"{model.name} is a decoder: allowed >= 1")
    if workload.serving == "disaggregated" and workload.concurrency <= workload.batch:
        raise bad("workload.serving", f"disaggregated decode instances hold more sequences than one request "
                  f"batch; allowed: concurrency > batch ({workload.batch}), else static batching applies "
                  f"(serving: steady_state)")
    if not model.causal and workload.concurrency > workload.batch:
        raise bad("workload.concurrency", f"in-flight batching interleaves decode steps, which the encoder "
                  f"{model.name} has none of; allowed: concurrency <= batch ({workload.batch})")
    if workload.max_batch_size < workload.batch:
        raise bad("workload.max_batch_size", f"{workload.max_batch_size} sequences in flight cannot run a batch of "
                  f"{workload.batch}; allowed: {workload.batch} to 65536")
    admission = {"kv_cache_fraction": "sizes the KV-cache pool", "max_batch_size": "caps the sequences in flight"}
    for key, what in admission.items():
        if getattr(workload, key) != getattr(InferenceWorkload, key) and workload.concurrency <= workload.batch:
            raise bad(f"workload.{key}", f"{what} of a serving engine (concurrency > batch); static batching "
                      f"(concurrency {workload.concurrency} <= batch {workload.batch}) runs its batch whole; "
                      "allowed: leave it unset, or concurrency > batch")
    if workload.serving == "disaggregated" and workload.output_tokens < 2:
        raise bad("workload.output_tokens", "disaggregated decode instances generate tokens 2 .. output_tokens "
                  "(the first comes from the prefill instances); allowed with serving disaggregated: >= 2")


def resolve_case(mapping: Any, source: str) -> Case:
    """Validate a case mapping against workflow/schemas/case and resolve names into specs."""
    validate_by_key(mapping, "case", source)
    model_m, model_src = resolve_named("model", mapping["model"], source, "model", copy_named=False)
    hw_m, hw_src = resolve_named("hardware", mapping["hardware"], source, "hardware", copy_named=False)
    net_m, net_src = resolve_named("network", mapping["network"], source, "network", copy_named=False)
    model = _spec(ModelSpec, mapping["model"], model_m, model_src)
    hardware = _spec(HardwareSpec, mapping["hardware"], hw_m, hw_src)
    if "clock" in mapping:
        hardware = locked_clock(hardware, hw_m, hw_src, mapping["clock"], source, "clock")
    network = _spec(NetworkSpec, mapping["network"], net_m, net_src)
    w = dict(mapping["workload"])
    if w.get("draft_tokens") and "draft_acceptance" not in w:
        raise SpecError.at(source, "workload.draft_acceptance", f"draft_tokens {w['draft_tokens']} needs the "
                           "probability each draft is accepted; allowed: a number 0 to 1 (DeepSeek-V3 reports "
                           "0.85-0.9 for its MTP draft)")
    mode = w.pop("mode")
    if mode == "training":
        workload: TrainingWorkload | InferenceWorkload = TrainingWorkload(**w)
    else:
        w.setdefault("concurrency", w.get("batch", 1))
        workload = InferenceWorkload(**w)
    par_m = dict(mapping.get("parallelism", {}))
    if par_m.get("virtual_stages", 1) > 1 and "schedule" not in par_m and mode == "training":
        par_m["schedule"] = "interleaved"   # as Megatron-LM infers it from a virtual pipeline size
    if "recompute_modules" in par_m:
        par_m["recompute_modules"] = tuple(par_m["recompute_modules"])
    par = Parallelism(**par_m)
    _check_bounds(hardware, par, workload, mapping.get("precision", "bf16"), source,
                  mapping.get("fp8_recipe", "tensorwise"))
    check_layout(model, par, workload, source)
    kv_cache = kv_cache_option(model, workload, mapping.get("precision", "bf16"),
                               mapping.get("kv_cache_precision", "auto"), source)
    check_attention(model, mapping.get("attention_impl", "flash"), source, kv_cache)
    check_decode_attention(model, workload, mapping.get("decode_attention", "grouped"), source)
    par = framework_parallelism(mapping, expert_grid(par, workload), source)
    network = sized_network(network, par.world, source)
    extra = tuple(FaultSpec.from_mapping(f) for f in mapping.get("faults", []))
    if extra:
        network = dataclasses.replace(network, faults=network.faults + extra)
    routing = mapping.get("moe_routing", "balanced")
    hot = 1.0 if routing == "balanced" else float(routing["hot_expert_factor"])
    return Case(model=model, hardware=hardware, network=network, workload=workload, parallelism=par,
                precision=mapping.get("precision", "bf16"), attention_impl=mapping.get("attention_impl", "flash"),
                moe_hot_expert_factor=hot, framework=mapping.get("framework", "megatron"),
                name=mapping.get("name", ""), fp8_recipe=mapping.get("fp8_recipe", "tensorwise"),
                decode_attention=mapping.get("decode_attention", "grouped"), kv_cache_precision=kv_cache)


def layout_case(base: Case, sized: NetworkSpec, par: Parallelism, workload: TrainingWorkload | InferenceWorkload,
                attention_impl: str) -> Case:
    """`base` with another layout, workload and attention kernel, for a layout that `check_layout` and
    `check_attention` passed, on its fabric from `sized_network`: a search checks every layout and builds the
    cases of the few it bounds or simulates, with what the base's framework always runs written out."""
    par = framework_parallelism({"framework": base.framework}, expert_grid(par, workload), "layout")
    return dataclasses.replace(base, parallelism=par, workload=workload, attention_impl=attention_impl, network=sized)


def sized_network(network: NetworkSpec, world: int, source: str) -> NetworkSpec:
    """The fabric sized for `world` ranks, shared through `Caches.sized_networks` with its plain form
    registered for `case_id`: a search sizes one fabric for a few world sizes thousands of times, and hashing
    an unshared sized fabric's plain form walked it every time."""
    caches = current()
    key = (network, world)
    sized = caches.sized_networks.get(key)
    if sized is None:
        sized = caches.sized_networks.put(key, network.sized_for(world, source))
    shared = caches.plain_specs.get((NetworkSpec, sized.name))
    if shared is None or shared[0] is not sized:
        caches.plain_specs.put((NetworkSpec, sized.name), (sized, plain(sized)))
    return sized


def load_case(path: str | Path) -> Case:
    """Read and resolve a case YAML file; a model, hardware or network given as a path to a .yaml file is
    read relative to the case file's folder (`named.inline_spec_files`)."""
    path = spec_path(path, "load_case")
    source = display(path)
    return resolve_case(inline_spec_files(load_yaml(path), path.parent, source), source)

