"""The bad-input corpus: inputs a hostile or careless user gives the CLI, each of which must be refused with
exit 2, a short message on stderr naming what is wrong, nothing on stdout and no traceback.

One `Bad` per input, grouped by command in CORPUS. A case names the files it needs (`files`: name ->
YAML-dumped mapping, text, bytes, ("fifo",) for a named pipe, or ("edit-suite", ...) for an edited copy of
a validation suite; written into a fresh temporary folder) and the argv, where `{tmp}` is that folder. `expect` is a fragment the message must contain. To cover a new command (e.g.
`rapidllm search`), add a list of `Bad` under its name in CORPUS; tests/test_bad_inputs.py runs them all.

Classes (issue 20): quantity (absurd values accepted), crash (tracebacks), work (unbounded work or memory),
message (unclear or unsafe messages), file (I/O and YAML).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from rapidllm.spec.experiment import set_dotted
from rapidllm.spec.paths import config_dir

HW: dict[str, Any] = dict(
    name="toy-gpu", sm_count=100, clock="1 GHz", tensor_flops={"bf16": "100 TFLOP/s"}, vector_flops="10 TFLOP/s",
    hbm_capacity="80 GiB", hbm_bandwidth="2 TB/s", l2_size="40 MiB", kernel_launch_overhead="4 us",
    framework_memory="1 GiB",
    sm_limits=dict(max_threads=2048, max_registers=65536, max_shared_memory="164 KiB", max_blocks=32))
NET: dict[str, Any] = dict(dimensions=[dict(topology="switch", size=8, link_bandwidth="100 GB/s", latency="1 us"),
                                       dict(topology="fat_tree", size="auto", link_bandwidth="25 GB/s", latency="2 us")])
CASE: dict[str, Any] = dict(model="llama2-7b", hardware=HW, network=NET, precision="bf16",
                            workload=dict(mode="training", seq_len=2048, global_batch=8, micro_batch=1),
                            parallelism=dict(tp=1, pp=1, dp=1))
INFERENCE = dict(mode="inference", prompt_tokens=128, output_tokens=128, batch=1)
EXPERIMENT: dict[str, Any] = dict(name="bad", base={**CASE, "hardware": "a100-sxm4-80gb", "network": "dgx-a100"},
                                  cross={"parallelism.tp": [1, 2]})


@dataclass(frozen=True)
class Bad:
    id: str
    argv: tuple[str, ...]
    expect: str
    kind: str                                       # quantity | crash | work | message | file
    files: dict[str, Any] = field(default_factory=dict)


def with_key(base: dict, dotted: str, value: Any) -> dict:
    """A deep copy of `base` with one dotted key set (list items by index)."""
    out = copy.deepcopy(base)
    set_dotted(out, dotted, value)
    return out


def case_bad(id: str, dotted: str, value: Any, expect: str, kind: str = "quantity", base: dict = CASE) -> Bad:
    return Bad(id, ("predict", "{tmp}/case.yaml", "--json"), expect, kind, {"case.yaml": with_key(base, dotted, value)})


def raw_case(id: str, text: str | bytes, expect: str, kind: str = "file") -> Bad:
    return Bad(id, ("predict", "{tmp}/case.yaml"), expect, kind, {"case.yaml": text})


NAN, INF = float("nan"), float("inf")
BOMB = "".join(f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefg", "bcdefgh"))
BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + BOMB
VALID_CASE_TEXT = yaml.safe_dump(CASE)
TINY_DEEP = dict(hidden=64, layers=4096, heads=1, ffn=128, vocab=1000, max_seq_len=4096)   # a stage per layer is cheap
OPERATING = {k: {"value": v, "source": "assumption: test"} for k, v in dict(
    board_power_w=700, power_utilization=0.8, pue=1.2, energy_usd_per_kwh=0.08, capital_usd=30000, lifetime_years=4).items()}

PREDICT = [
    # quantities in the hardware spec
    case_bad("hbm-capacity-negative", "hardware.hbm_capacity", "-5 GB", "hbm_capacity: '-5 GB' is out of range"),
    case_bad("hbm-capacity-nan", "hardware.hbm_capacity", NAN, "hbm_capacity: nan is not a finite"),
    case_bad("hbm-capacity-zero", "hardware.hbm_capacity", "0 GB", "hbm_capacity: '0 GB' is out of range"),
    case_bad("hbm-bandwidth-overflow", "hardware.hbm_bandwidth", "1e400 GB/s", "not a finite bandwidth"),
    case_bad("hbm-bandwidth-zero", "hardware.hbm_bandwidth", "0 TB/s", "hbm_bandwidth: '0 TB/s' is out of range"),
    case_bad("hbm-bandwidth-negative", "hardware.hbm_bandwidth", "-2 TB/s", "out of range"),
    case_bad("hbm-bandwidth-inf", "hardware.hbm_bandwidth", INF, "not a finite bandwidth"),
    case_bad("clock-negative", "hardware.clock", "-1.4 GHz", "clock: '-1.4 GHz' is out of range"),
    case_bad("clock-zero", "hardware.clock", "0 GHz", "a frequency > 0"),
    case_bad("clock-bare-nan", "hardware.clock", NAN, "not a finite frequency"),
    case_bad("max-clock-below-clock", "hardware.max_clock", "0.9 GHz", "max_clock: 0.9 GHz is below clock 1 GHz"),
    case_bad("tensor-flops-zero", "hardware.tensor_flops.bf16", "0 TFLOP/s", "a FLOP rate > 0"),
    case_bad("tensor-flops-negative", "hardware.tensor_flops.bf16", "-1 TFLOP/s", "out of range"),
    case_bad("vector-flops-nan", "hardware.vector_flops", NAN, "vector_flops"),
    case_bad("l2-zero", "hardware.l2_size", "0 MiB", "l2_size: '0 MiB' is out of range"),
    case_bad("launch-overhead-negative", "hardware.kernel_launch_overhead", "-4 us", "a time >= 0"),
    case_bad("framework-memory-negative", "hardware.framework_memory", "-1 GiB", "a byte count >= 0"),
    case_bad("memory-latency-inf", "hardware.memory_latency", "1e999 ns", "not a finite time"),
    case_bad("smem-zero", "hardware.sm_limits.max_shared_memory", "0 KiB", "max_shared_memory"),
    case_bad("utilization-zero", "hardware.utilization", {"compute": 0, "hbm": 1, "network": 1}, "compute: 0 is out of range"),
    case_bad("utilization-above-one", "hardware.utilization", {"compute": 1.5, "hbm": 1, "network": 1}, "number > 0 and <= 1"),
    case_bad("utilization-nan", "hardware.utilization", {"compute": NAN, "hbm": 1, "network": 1}, "(finite)"),
    case_bad("sm-count-zero", "hardware.sm_count", 0, "sm_count: 0 is out of range"),
    case_bad("sm-count-huge", "hardware.sm_count", 10**9, "allowed: integer 1 to 65536"),
    case_bad("sm-count-fraction", "hardware.sm_count", 1.5, "is not of type integer"),
    case_bad("sm-count-bool", "hardware.sm_count", True, "is not of type integer"),
    case_bad("hbm-capacity-wrong-unit", "hardware.hbm_capacity", "80 GB/s", "is not a byte count"),
    # quantities in the network spec
    case_bad("link-bandwidth-negative", "network.dimensions.0.link_bandwidth", "-300 GB/s", "link_bandwidth: '-300 GB/s'"),
    case_bad("link-bandwidth-zero", "network.dimensions.1.link_bandwidth", "0 Gb/s", "a bandwidth > 0"),
    case_bad("latency-negative", "network.dimensions.0.latency", "-1 ms", "latency: '-1 ms' is out of range"),
    case_bad("latency-nan", "network.dimensions.0.latency", NAN, "not a finite time"),
    case_bad("dimension-size-zero", "network.dimensions.0.size", 0, "size"),
    case_bad("dimension-size-huge", "network.dimensions.0.size", 2**30, "size"),
    case_bad("fabric-too-large", "network.dimensions",
             [dict(topology="switch", size=1024, link_bandwidth="1 GB/s", latency="1 us")] * 3,
             "dimensions: the sizes multiply to 1073741824 ranks", "work"),
    case_bad("chunk-size-zero", "network.chunk_size", "0 B", "chunk_size: '0 B' is out of range"),
    case_bad("network-utilization-zero", "network.utilization", 0, "utilization: 0 is out of range"),
    case_bad("collective-latency-negative", "network.dimensions.0.collective_latency", "-1 us", "collective_latency"),
    case_bad("fault-factor-zero", "faults", [{"link": [0, 8], "bandwidth_factor": 0}], "bandwidth_factor"),
    case_bad("too-many-dimensions", "network.dimensions", [NET["dimensions"][0]] * 65, "65 entries; allowed: 1 to 64 entries"),
    # quantities and integers of the case itself
    case_bad("case-clock-negative", "clock", "-1.4 GHz", "clock: '-1.4 GHz' is out of range"),
    case_bad("case-clock-zero", "clock", "0 Hz", "a frequency > 0"),
    # a locked clock above the device's highest (toy-gpu: no max_clock, so its 1 GHz clock) scaled its rates up
    case_bad("case-clock-above-max", "clock", "1.5 GHz", "case.yaml: clock: 1.5 GHz is above toy-gpu's highest SM clock"),
    case_bad("global-batch-1e30", "workload.global_batch", 1e30, "global_batch: 1e+30 is out of range"),
    case_bad("global-batch-1e9", "workload.global_batch", 10**9, "allowed: integer 1 to 1048576", "work"),
    # was "write 1000000000000000019884624838656", a number past the bound
    case_bad("global-batch-text", "workload.global_batch", "1e30", "'1e30' is out of range; allowed: integer 1 to"),
    case_bad("global-batch-nan", "workload.global_batch", NAN, "is not of type integer"),
    case_bad("seq-len-zero", "workload.seq_len", 0, "seq_len: 0 is out of range"),
    case_bad("seq-len-negative", "workload.seq_len", -2048, "seq_len"),
    case_bad("micro-batch-huge", "workload.micro_batch", 2**20, "micro_batch", "work"),
    case_bad("microbatch-tokens", "workload", dict(mode="training", seq_len=2**22, global_batch=16, micro_batch=16),
             "micro_batch x seq_len", "work"),
    case_bad("too-many-microbatches", "workload", dict(mode="training", seq_len=128, global_batch=2**20),
             "micro-batches per step", "work"),
    case_bad("tp-zero", "parallelism.tp", 0, "tp: 0 is out of range"),
    case_bad("tp-fraction", "parallelism.tp", 2.5, "not of type integer"),
    case_bad("world-too-large", "parallelism", dict(dp=65536, tp=4), "at most 131072", "work"),
    case_bad("pp-huge", "parallelism.pp", 10**6, "pp"),
    case_bad("tp-comm-overlap-without-sp", "parallelism", dict(tp=2, tp_comm_overlap=True),
             "parallelism.tp_comm_overlap", "message"),
    case_bad("virtual-stages-under-1f1b", "parallelism", {"pp": 2, "dp": 1, "virtual_stages": 2, "schedule": "1f1b"},
             "parallelism.virtual_stages: 2 model chunks per stage with schedule '1f1b' and pp 2; allowed: >= 2", "message"),
    case_bad("virtual-stages-without-pp", "parallelism", {"pp": 1, "dp": 1, "virtual_stages": 2},
             "with schedule 'interleaved' and pp 1; allowed", "message"),
    case_bad("overlap-p2p-not-bool", "parallelism.overlap_p2p_comm", "sometimes", "overlap_p2p_comm"),
    # the serving keys of issue 24 / the two-micro-batch overlap: absurd values and combinations that were
    # silently ignored (disaggregated without in-flight sequences, replicas with ep 1) or pessimal (drafts
    # without an acceptance rate ran with acceptance 0)
    case_bad("draft-tokens-negative", "workload", {**INFERENCE, "draft_tokens": -1}, "draft_tokens: -1 is out of range"),
    case_bad("draft-tokens-huge", "workload", {**INFERENCE, "draft_tokens": 10**9}, "allowed: integer 0 to 16"),
    case_bad("draft-acceptance-nan", "workload", {**INFERENCE, "draft_tokens": 1, "draft_acceptance": NAN},
             "draft_acceptance: nan is not of type number"),
    case_bad("draft-acceptance-above-one", "workload", {**INFERENCE, "draft_tokens": 1, "draft_acceptance": 1.5},
             "draft_acceptance: 1.5 is out of range"),
    case_bad("draft-tokens-without-acceptance", "workload", {**INFERENCE, "draft_tokens": 1},
             "workload.draft_acceptance: draft_tokens 1 needs the probability", "message"),
    case_bad("draft-tokens-without-mtp", "workload", {**INFERENCE, "draft_tokens": 1, "draft_acceptance": 0.8},
             "llama2-7b has mtp_depth 0; allowed: 0 to 0", "message"),
    case_bad("encoder-draft-tokens", "workload", {**INFERENCE, "output_tokens": 0, "draft_tokens": 1,
                                                  "draft_acceptance": 0.8},
             "dinov3-vit7b16 is an encoder: it generates no tokens to draft", "message",
             base={**CASE, "model": "dinov3-vit7b16"}),
    case_bad("draft-tokens-in-training", "workload.draft_tokens", 1, "workload: unknown key(s) 'draft_tokens'", "message"),
    case_bad("request-beyond-context-window", "workload", {**INFERENCE, "prompt_tokens": 4000, "output_tokens": 200},
             "exceeds the 4096-token context window of llama2-7b"),
    case_bad("serving-wrong-type", "workload", {**INFERENCE, "serving": 1}, "allowed: steady_state, disaggregated"),
    case_bad("disaggregated-without-concurrency", "workload", {**INFERENCE, "serving": "disaggregated"},
             "workload.serving: disaggregated decode instances", "message"),
    case_bad("max-batch-size-zero", "workload", {**INFERENCE, "concurrency": 8, "max_batch_size": 0},
             "workload.max_batch_size: 0 is out of range; allowed: integer 1 to 65536"),
    case_bad("max-batch-size-below-batch", "workload", {**INFERENCE, "batch": 4, "max_batch_size": 2},
             "workload.max_batch_size: 2 sequences in flight cannot run a batch of 4; allowed: 4 to 65536", "message"),
    case_bad("kv-cache-fraction-zero", "workload", {**INFERENCE, "concurrency": 8, "kv_cache_fraction": 0},
             "workload.kv_cache_fraction: 0 is out of range; allowed: number > 0 and <= 1"),
    case_bad("kv-cache-fraction-above-one", "workload", {**INFERENCE, "concurrency": 8, "kv_cache_fraction": 1.5},
             "workload.kv_cache_fraction: 1.5 is out of range"),
    case_bad("kv-cache-fraction-static-batch", "workload", {**INFERENCE, "kv_cache_fraction": 0.5},
             "workload.kv_cache_fraction: sizes the KV-cache pool of a serving engine", "message"),
    case_bad("max-batch-size-static-batch", "workload", {**INFERENCE, "max_batch_size": 100},
             "workload.max_batch_size: caps the sequences in flight of a serving engine", "message"),
    case_bad("disaggregated-one-token", "workload", {**INFERENCE, "concurrency": 8, "output_tokens": 1,
                                                     "serving": "disaggregated"},
             "workload.output_tokens: disaggregated decode instances generate tokens 2 .. output_tokens", "message"),
    case_bad("simulated-queue-behind-one-sequence", "workload",        # the pool holds one 256-token request
             {**INFERENCE, "concurrency": 16384, "serving": "simulated", "kv_cache_fraction": 0.003},
             "16384 clients with 1 sequences in flight (kv_cache) runs concurrency x output_tokens / sequences = "
             "2097152 iterations per window; allowed: at most 1048576", "work"),
    case_bad("redundant-experts-negative", "parallelism.redundant_experts", -8, "redundant_experts: -8 is out of range"),
    case_bad("redundant-experts-fraction", "parallelism.redundant_experts", 0.5, "not of type integer"),
    case_bad("redundant-experts-dense", "workload", INFERENCE, "allowed: 0 for training or a dense model", "message",
             base=with_key(CASE, "parallelism.redundant_experts", 8)),
    case_bad("redundant-experts-ep1", "workload", INFERENCE, "with ep 1 every GPU holds every expert", "message",
             base=with_key({**CASE, "model": "mixtral-8x7b"}, "parallelism.redundant_experts", 8)),
    # inference MoE grids not modelled (more expert shards than ranks, as vLLM's DP + EP at tp > 1 reads; an
    # expert TP width that is neither tp nor TensorRT-LLM's moe_tp = tp / ep)
    case_bad("inference-expert-shards-beyond-ranks", "workload", INFERENCE, "DP + EP at tp > 1 is not modelled",
             "quantity", base=with_key({**CASE, "model": "mixtral-8x7b"}, "parallelism", dict(tp=2, dp=4, ep=8))),
    case_bad("inference-etp-not-an-engine-split", "workload", INFERENCE, "parallelism.etp: etp 2 with tp 8, ep 2",
             "message", base=with_key({**CASE, "model": "mixtral-8x7b"}, "parallelism", dict(tp=8, ep=2, etp=2))),
    case_bad("redundant-experts-beyond-one-per-rank", "workload", INFERENCE, "at most experts x (ep - 1) = 8", "message",
             base=with_key({**CASE, "model": "mixtral-8x7b"}, "parallelism", dict(dp=2, ep=2, redundant_experts=10))),
    case_bad("flash-triton-mla", "attention_impl", "flash_triton", "attention_impl: flash_triton", "message",
             base={**CASE, "model": "deepseek-v2-lite"}),
    case_bad("microbatch-overlap-three", "parallelism.microbatch_overlap", 3, "allowed: 1, 2"),
    case_bad("microbatch-overlap-nan", "parallelism.microbatch_overlap", NAN, "allowed: 1, 2"),
    case_bad("microbatch-overlap-training", "parallelism.microbatch_overlap", 2,
             "parallelism.microbatch_overlap: the two-micro-batch overlap", "message"),
    case_bad("microbatch-overlap-pp2", "workload", INFERENCE, "parallelism.microbatch_overlap", "message",
             base=with_key(CASE, "parallelism", dict(pp=2, microbatch_overlap=2))),
    case_bad("cp-inference", "workload", INFERENCE, "case.yaml: parallelism.cp: 4: context parallelism is modelled "
             "for training only", "quantity", base=with_key(CASE, "parallelism", dict(cp=4))),
    case_bad("tp-comm-overlap-string", "parallelism.tp_comm_overlap", "yes", "tp_comm_overlap"),
    case_bad("tp-comm-overlap-inference", "workload", INFERENCE, "parallelism.tp_comm_overlap", "message",
             base=with_key(CASE, "parallelism", dict(tp=2, sp=True, tp_comm_overlap=True))),
    Bad("chakra-of-inference", ("predict", "{tmp}/case.yaml", "--chakra", "{tmp}/traces"),
        "--chakra: Chakra traces are written for training steps", "crash",
        {"case.yaml": with_key(CASE, "workload", INFERENCE)}),
    Bad("timeline-of-overlapped-pass", ("predict", "{tmp}/case.yaml", "--timeline", "{tmp}/t.json"),
        "without parallelism.microbatch_overlap", "message",
        {"case.yaml": with_key(with_key(CASE, "workload", {**INFERENCE, "batch": 2}), "parallelism.microbatch_overlap", 2)}),
    case_bad("hot-expert-nan", "moe_routing", {"hot_expert_factor": NAN}, "hot_expert_factor"),
    case_bad("fp8-without-fp8-units", "precision", "fp8", "precision: toy-gpu has no fp8 tensor units", "message"),
    # NVFP4 needs sm_100's block-scaled MMAs (docs/fp4.md): refused where the device has no fp4 rate, and in training
    case_bad("fp4-on-h100", "precision", "fp4", "precision: h100-sxm5-80gb has no fp4 tensor units; allowed: bf16, "
             "fp16, fp8, tf32", "message", base={**CASE, "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
                                                  "workload": INFERENCE}),
    case_bad("fp4-training", "precision", "fp4", "precision: fp4 is a serving precision", "message",
             base={**CASE, "hardware": "b200", "network": "dgx-b200"}),
    case_bad("fp8-recipe-unknown", "fp8_recipe", "mxfp8", "fp8_recipe"),
    case_bad("fp8-recipe-without-fp8", "fp8_recipe", "blockwise", "fp8_recipe: blockwise scales FP8 GEMMs", "message"),
    case_bad("decode-attention-unknown", "decode_attention", "mmha", "decode_attention"),
    case_bad("decode-attention-in-training", "decode_attention", "per_head",
             "decode_attention: per_head is the attention kernel of inference decode steps", "message"),
    case_bad("kv-cache-precision-unknown", "kv_cache_precision", "int8", "kv_cache_precision"),
    case_bad("kv-cache-precision-not-activation", "kv_cache_precision", "fp16",
             "kv_cache_precision: fp16 is neither the activation precision (bf16) nor fp8", "message"),
    case_bad("kv-cache-fp8-in-training", "kv_cache_precision", "fp8",
             "kv_cache_precision: fp8 stores the KV cache of inference decode", "message"),
    case_bad("kv-cache-fp8-with-mla", "kv_cache_precision", "fp8", "kv_cache_precision: deepseek-v2-lite uses MLA",
             "message", base={**CASE, "model": "deepseek-v2-lite", "workload": INFERENCE}),
    case_bad("inference-concurrency-huge", "workload", {**INFERENCE, "concurrency": 100000}, "concurrency", "work"),
    case_bad("serving-simulated-unbounded", "workload",
             {**INFERENCE, "concurrency": 4096, "output_tokens": 8192, "serving": "simulated"},
             "simulated serving of concurrency x output_tokens", "work"),
    case_bad("tokens-in-flight", "workload", {**INFERENCE, "concurrency": 65536, "prompt_tokens": 4096},
             "tokens requested at once", "work"),
    case_bad("output-tokens-zero", "workload", {**INFERENCE, "output_tokens": 0}, "output_tokens"),
    # an encoder (causal: false) has no KV-cache decode: its inference is one forward pass (output_tokens 0)
    case_bad("encoder-decode", "workload", INFERENCE, "workload.output_tokens: dinov3-vit7b16 is an encoder",
             "message", base={**CASE, "model": "dinov3-vit7b16"}),
    case_bad("encoder-in-flight-batching", "workload", {**INFERENCE, "output_tokens": 0, "concurrency": 8},
             "workload.concurrency: in-flight batching", "message", base={**CASE, "model": "dinov3-vit7b16"}),
    case_bad("inline-model-vocab-zero", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096, vocab=0),
             "vocab: 0 (no token embedding or output head) needs patch_size > 0", "message"),
    case_bad("inline-encoder-mtp", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096, vocab=0,
                                                 patch_size=16, causal=False, mtp_depth=1),
             "mtp_depth: multi-token prediction predicts later tokens", "message"),
    # parallel blocks (model.block): the values, parallel_norms only with them, dense models only
    case_bad("inline-model-block-typo", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096,
                                                      vocab=32000, block="residual"),
             "model.block: 'residual' is not allowed; allowed: sequential, parallel", "message"),
    case_bad("inline-model-three-parallel-norms", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096,
                                                                vocab=32000, block="parallel", parallel_norms=3),
             "model.parallel_norms: 3 is not allowed; allowed: 1, 2", "message"),
    case_bad("inline-model-norms-without-parallel", "model", dict(name="m", hidden=1024, layers=2, heads=16,
                                                                  ffn=4096, vocab=32000, parallel_norms=2),
             "parallel_norms: applies to block: parallel only", "message"),
    case_bad("inline-model-parallel-moe", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096,
                                                        vocab=32000, block="parallel",
                                                        moe=dict(experts=8, top_k=2, expert_ffn=1024)),
             "block: 'parallel' (attention and MLP side by side) is modelled for dense models only", "message"),
    case_bad("inline-model-huge-hidden", "model", dict(name="m", hidden=2**20, layers=2, heads=16, ffn=4096, vocab=32000),
             "hidden: 1048576 is out of range", "work"),
    case_bad("inline-model-huge-vocab", "model", dict(name="m", hidden=1024, layers=2, heads=16, ffn=4096, vocab=10**9),
             "vocab", "work"),
    case_bad("inline-model-zero-layers", "model", dict(name="m", hidden=1024, layers=0, heads=16, ffn=4096, vocab=32000),
             "layers: 0 is out of range"),
    # names are names
    case_bad("model-path-traversal", "model", "../../workflow/schemas/case.schema", "is not a model name", "message"),
    case_bad("model-absolute-path", "model", "/etc/passwd", "is not a model name", "message"),
    case_bad("hardware-slash", "hardware", "a100-sxm4-80gb/../h100", "is not a hardware name", "message"),
    case_bad("network-empty-name", "network", "", "is not a network name", "message"),
    case_bad("model-unknown", "model", "gpt-9000", "unknown model 'gpt-9000'; known:", "message"),
    case_bad("network-number", "network", 5, "network", "message"),
    case_bad("model-list", "model", [1, 2, 3], "model", "message"),
    case_bad("model-long-name", "model", "x" * 5000, "is not a model name", "message"),
    # files and YAML
    Bad("file-missing", ("predict", "{tmp}/nope.yaml"), "nope.yaml: file not found", "file"),
    Bad("file-is-directory", ("predict", "{tmp}"), "is a directory", "file"),
    Bad("file-is-a-device", ("predict", "/dev/zero"), "/dev/zero: is not a regular file", "work"),
    Bad("file-is-a-fifo", ("predict", "{tmp}/fifo"), "is not a regular file", "work", {"fifo": ("fifo",)}),
    raw_case("not-utf8", b"model: \xff\xfe\n", "not UTF-8 text"),
    raw_case("binary-junk", bytes(range(256)) * 4, "case.yaml"),
    raw_case("empty-file", "", "empty; a case spec is a mapping"),
    raw_case("top-level-list", "[1, 2, 3]\n", "is not of type object"),
    raw_case("top-level-scalar", "42\n", "42 is not of type object"),
    raw_case("yaml-syntax", "model: [unclosed\n", "not valid YAML"),
    raw_case("yaml-tab-indent", "workload:\n\tmode: training\n", "not valid YAML"),
    raw_case("duplicate-key", VALID_CASE_TEXT + "model: gpt-175b\n", "duplicate key 'model'"),
    raw_case("duplicate-nested-key", "workload: {mode: training, mode: inference}\n", "duplicate key 'mode'"),
    raw_case("alias-bomb-name-field", BOMB + "model: *h\n", "expands to", "work"),
    raw_case("alias-bomb-unknown-key", BOMB + "bogus: *h\n", "expands to", "work"),
    raw_case("deep-nesting", "model: " + "[" * 200 + "]" * 200 + "\n", "case.yaml", "work"),
    raw_case("huge-list", "[" + ",".join(["1"] * 2_500_000) + "]\n", "bytes; a spec file is at most", "work"),
    raw_case("python-object-tag", "model: !!python/object/apply:os.system ['true']\n", "not valid YAML", "message"),
    raw_case("unknown-key", VALID_CASE_TEXT + "bogus: 1\n", "unknown key(s) 'bogus'", "message"),
    # predict's own flags
    Bad("measured-missing", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/nope.csv"), "cannot read measured",
        "file", {"case.yaml": CASE}),
    Bad("measured-directory", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}"), "cannot read measured", "file",
        {"case.yaml": CASE}),
    Bad("measured-device", ("predict", "{tmp}/case.yaml", "--measured", "/dev/zero"), "is not a regular file", "work",
        {"case.yaml": CASE}),
    Bad("measured-negative", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/m.csv"), "is not a finite time",
        "quantity", {"case.yaml": CASE, "m.csv": "name,time_s\nmlp_up,-1\n"}),
    Bad("measured-nan", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/m.csv"), "is not a finite time",
        "quantity", {"case.yaml": CASE, "m.csv": "name,time_s\nmlp_up,nan\n"}),
    Bad("measured-no-columns", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/m.csv"), "need columns",
        "file", {"case.yaml": CASE, "m.csv": "a,b\n1,2\n"}),
    Bad("measured-empty", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/m.csv"), "cannot read measured",
        "file", {"case.yaml": CASE, "m.csv": ""}),
    Bad("what-if-negative-time", ("predict", "{tmp}/case.yaml", "--what-if", "attn=-5 ms"), "a time >= 0",
        "quantity", {"case.yaml": CASE}),
    Bad("what-if-not-duration", ("predict", "{tmp}/case.yaml", "--what-if", "attn=5 GB"), "is not a time",
        "crash", {"case.yaml": CASE}),
    Bad("what-if-nan-factor", ("predict", "{tmp}/case.yaml", "--what-if", "attn=xnan"), "is not a factor",
        "quantity", {"case.yaml": CASE}),
    Bad("what-if-zero-divisor", ("predict", "{tmp}/case.yaml", "--what-if", "attn=/0"), "is not a factor",
        "crash", {"case.yaml": CASE}),
    Bad("what-if-negative-factor", ("predict", "{tmp}/case.yaml", "--what-if", "attn=x-1"), "is not a factor",
        "quantity", {"case.yaml": CASE}),
    Bad("what-if-huge-factor", ("predict", "{tmp}/case.yaml", "--what-if", "attn=x1e30"),
        "'1e30' is not a factor; allowed: a finite number from 1e-06 to 1e+06", "quantity", {"case.yaml": CASE}),
    Bad("what-if-no-equals", ("predict", "{tmp}/case.yaml", "--what-if", "attn"), "use NAME=xFACTOR", "message",
        {"case.yaml": CASE}),
    Bad("engine-unknown", ("predict", "{tmp}/case.yaml", "--engine", "magic"), "invalid choice", "message",
        {"case.yaml": CASE}),
    # the cost section is a whole-file $ref (cost.schema.yaml): NaN passed there without --cost
    case_bad("cost-nan-without-cost-flag", "hardware.cost", {"operating": {**OPERATING, "pue": {"value": NAN, "source": "x" * 3}}},
             "hardware.cost.operating.pue.value: nan is not of type number (finite)"),
    # absurdly large quantities: a 1e33-second step, and int64 overflow in the tile model (a traceback)
    case_bad("latency-1e30", "network.dimensions.0.latency", 1e30, "latency: 1e+30 is out of range; allowed: a time >= 0 and <= 24 h"),
    case_bad("launch-overhead-huge", "hardware.kernel_launch_overhead", "1e30 s", "a time >= 0 and <= 24 h"),
    case_bad("smem-1e30", "hardware.sm_limits.max_shared_memory", 1e30, "max_shared_memory: 1e+30 is out of range", "crash"),
    # pp x micro-batches unbounded: 4096 stages x 65536 micro-batches is a 2^28-task graph (MemoryError at 8 GB)
    case_bad("pipeline-tasks", "parallelism", {"pp": 64, "dp": 1, "tp": 1}, "pp x virtual stages x micro-batches = 4194304",
             "work", base=with_key(with_key(CASE, "model", TINY_DEEP), "workload.global_batch", 65536)),
    # SM limits no GEMM tile fits in: "no GEMM tile candidate fits the SM limits" as a traceback
    case_bad("smem-1-kib", "hardware.sm_limits.max_shared_memory", "1 KiB", "max_shared_memory: '1 KiB' is out of range; allowed: a byte count >= 17 KiB", "crash"),
    case_bad("max-threads-1", "hardware.sm_limits.max_threads", 1, "max_threads: 1 is out of range; allowed: integer 256 to", "crash"),
    case_bad("registers-per-thread-1", "hardware.sm_limits.max_registers_per_thread", 1, "max_registers_per_thread: 1 is out of range", "crash"),
    case_bad("hbm-bandwidth-huge", "hardware.hbm_bandwidth", "1e30 TB/s", "a bandwidth > 0 and <= 1 PB/s"),
    # ffn narrower than tp: ffn // tp = 0 priced a zero-width GEMM, ZeroDivisionError (the explorer's ffn control)
    case_bad("ffn-below-tp", "parallelism", {"tp": 8, "pp": 1, "dp": 1}, "parallelism.tp: tp 8 exceeds the ffn 4 of",
             "crash", base=with_key(CASE, "model", dict(TINY_DEEP, layers=2, heads=8, ffn=4))),
    case_bad("clock-huge", "hardware.clock", "1e9 GHz", "a frequency > 0 and <= 100 GHz"),
    case_bad("tensor-flops-huge", "hardware.tensor_flops.bf16", 1e30, "a FLOP rate > 0 and <= 1 EFLOP/s"),
    case_bad("cost-inf-without-cost-flag", "hardware.cost", {"operating": {**OPERATING, "capital_usd": {"value": INF, "source": "abc"}}},
             "capital_usd.value: inf is not of type number (finite)"),
]

SWEEP = [
    # a value listed twice gave two identical rows (one case id twice in the table)
    Bad("cross-value-twice", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "cross.parallelism.tp: [2, 2] has non-unique elements", "message",
        {"exp.yaml": {**EXPERIMENT, "cross": {"parallelism.tp": [2, 2]}}}),
    Bad("cross-key-typo", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "paralelism.tp: matches no key of a case", "message",
        {"exp.yaml": {**EXPERIMENT, "cross": {"paralelism.tp": [1, 2]}}}),
    Bad("cross-key-leaf-typo", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "workload.sequence_len: matches no key", "message",
        {"exp.yaml": {**EXPERIMENT, "cross": {"workload.sequence_len": [1024]}}}),
    Bad("cross-key-below-leaf", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "parallelism.tp.size: matches no key", "message",
        {"exp.yaml": {**EXPERIMENT, "cross": {"parallelism.tp.size": [1]}}}),
    Bad("cross-key-model-typo", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "model.hiddn: matches no key", "message", {"exp.yaml": {**EXPERIMENT, "cross": {"model.hiddn": [1]}}}),
    Bad("cases-key-typo", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "cases.0.precison: matches no key", "message", {"exp.yaml": {**EXPERIMENT, "cases": [{"precison": "fp16"}]}}),
    Bad("cross-empty-list", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "cross.parallelism.tp",
        "message", {"exp.yaml": {**EXPERIMENT, "cross": {"parallelism.tp": []}}}),
    Bad("cases-empty-list", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "cases", "crash",
        {"exp.yaml": {**EXPERIMENT, "cases": []}}),
    Bad("factorize-no-layout", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "no parallel layout of 8 GPUs", "crash",
        {"exp.yaml": {**EXPERIMENT, "cross": {}, "factorize": {"gpus": 8, "bounds": {"tp": [3, 3]}}}}),
    Bad("factorize-gpus-1e9", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "factorize.gpus: 1000000000 is out of range", "work",
        {"exp.yaml": {**EXPERIMENT, "cross": {}, "factorize": {"gpus": 10**9}}}),
    Bad("factorize-gpus-zero", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "factorize.gpus",
        "quantity", {"exp.yaml": {**EXPERIMENT, "cross": {}, "factorize": {"gpus": 0}}}),
    Bad("factorize-axis-unknown", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "factorize.axes",
        "message", {"exp.yaml": {**EXPERIMENT, "cross": {}, "factorize": {"gpus": 8, "axes": ["xp"]}}}),
    Bad("too-many-combinations", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"),
        "combinations; allowed: at most 1048576", "work",
        {"exp.yaml": {**EXPERIMENT, "cross": {"workload.seq_len": list(range(1, 1200)),
                                              "workload.global_batch": list(range(1, 1200))}}}),
    Bad("shard-size-zero", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "shard_size", "quantity",
        {"exp.yaml": {**EXPERIMENT, "shard_size": 0}}),
    Bad("experiment-name-path", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "name", "message",
        {"exp.yaml": {**EXPERIMENT, "name": "../../etc"}}),
    Bad("base-not-mapping", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet"), "base", "message",
        {"exp.yaml": {**EXPERIMENT, "base": [1, 2]}}),
    Bad("out-is-directory", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}", "--quiet"), "is a directory", "file",
        {"exp.yaml": EXPERIMENT}),
    Bad("out-under-a-file", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/exp.yaml/o.csv", "--quiet"),
        "is not a directory", "file", {"exp.yaml": EXPERIMENT}),
    Bad("experiment-missing", ("sweep", "{tmp}/nope.yaml"), "file not found", "file"),
    Bad("experiment-not-utf8", ("sweep", "{tmp}/exp.yaml"), "not UTF-8", "file", {"exp.yaml": b"name: \xc3\x28\n"}),
    Bad("experiment-duplicate-key", ("sweep", "{tmp}/exp.yaml"), "duplicate key 'name'", "file",
        {"exp.yaml": yaml.safe_dump(EXPERIMENT) + "name: again\n"}),
    Bad("experiment-alias-bomb", ("sweep", "{tmp}/exp.yaml"), "expands to", "work",
        {"exp.yaml": BOMB + "name: x\nbase: *h\n"}),
    Bad("experiment-empty", ("sweep", "{tmp}/exp.yaml"), "empty", "crash", {"exp.yaml": "# nothing\n"}),
]

SUITE_TEXT_SOURCE = "validation/suites/llama2_latency_a100.yaml"   # a valid suite the cases below edit


def suite_bad(id: str, edit: dict[str, Any], expect: str, kind: str = "message", drop: tuple[str, ...] = ()) -> Bad:
    """A copy of SUITE_TEXT_SOURCE with keys replaced (`edit`) or removed (`drop`); written by the runner. A
    `metrics` edit drops the suite's single `metric` / `measured` (one form or the other, not both)."""
    if "metrics" in edit:
        drop = (*drop, "metric", "measured")
    return Bad(id, ("validate", "--out", "{tmp}/out", "{tmp}/suite.yaml"), expect, kind,
               {"suite.yaml": ("edit-suite", SUITE_TEXT_SOURCE, edit, drop)})


VALIDATE = [
    Bad("suite-empty", ("validate", "--out", "{tmp}/out", "{tmp}/suite.yaml"), "empty; a suite spec is a mapping",
        "message", {"suite.yaml": ""}),
    suite_bad("metric-and-metrics", {"metric": "e2e_latency_s", "measured": "actual",
                                     "metrics": [{"metric": "ttft_s", "measured": "actual"}]},
              "give either metric and measured (one metric), or metrics"),
    suite_bad("reference-missing", {"reference": "validation/references/nope.csv"}, "nope.csv: file not found", "file"),
    suite_bad("reference-directory", {"reference": "validation/references"}, "is a directory", "file"),
    suite_bad("reference-outside-project", {"reference": "../../../../etc/hostname"}, "outside the project", "message"),
    suite_bad("reference-not-csv", {"reference": "validation/ns3/json.h"}, "reference", "crash"),
    suite_bad("measured-does-not-parse", {"metrics": [{"metric": "e2e_latency_s", "measured": "latency_s +"}]},
              "does not parse", "crash"),
    suite_bad("measured-column-absent", {"metrics": [{"metric": "e2e_latency_s", "measured": "no_such_column"}]},
              "column 'no_such_column' is not in", "crash"),
    suite_bad("measured-expression-column-absent",
              {"metrics": [{"metric": "e2e_latency_s", "measured": "nope_a * 2"}]}, "column 'nope_a' is not in", "crash"),
    suite_bad("mapped-column-absent", {"columns": {"no_such_column": {"to": "workload.batch"}}},
              "columns.no_such_column: column 'no_such_column' is not in", "crash"),
    suite_bad("label-column-absent", {"label_columns": ["nope"]}, "label_columns: column 'nope'", "crash"),
    suite_bad("derived-does-not-parse", {"derived": {"workload.batch": "batch //"}}, "does not parse", "crash"),
    suite_bad("metrics-empty", {"metrics": []}, "metrics: 0 entries; allowed: at least 1 entries", "message"),
    suite_bad("scale-zero", {"metrics": [{"metric": "e2e_latency_s", "measured": "actual", "scale": 0}]},
              "metrics.0.scale: 0 is out of range", "quantity"),
    suite_bad("scale-nan", {"metrics": [{"metric": "e2e_latency_s", "measured": "actual", "scale": NAN}]},
              "metrics.0.scale: nan is not of type number (finite)", "quantity"),
    suite_bad("measured-scale-negative", {"measured_scale": -1.0}, "measured_scale: -1.0 is out of range", "quantity"),
    suite_bad("calibration-row-absent", {"calibration_rows": [10_000]}, "calibration_rows", "message"),
    # every row was invalid, its reason naming only a search spec and a mapping as where a path is not read
    suite_bad("base-hardware-path", {"base": {**yaml.safe_load((config_dir("model").parents[1] / SUITE_TEXT_SOURCE)
                                                               .read_text())["base"], "hardware": "dev.yaml"}},
              "base.hardware: 'dev.yaml' is a path; a suite names its model, hardware and network by config name",
              "message"),
    suite_bad("unknown-metric", {"metrics": [{"metric": "speed", "measured": "actual"}]},
              "metrics.0.metric: 'speed' is not allowed", "message"),
    Bad("out-is-a-file", ("validate", "--out", "{tmp}/f.txt", "{tmp}/suite.yaml"), "is a file; give a folder", "file",
        {"f.txt": "x", "suite.yaml": ("edit-suite", SUITE_TEXT_SOURCE, {}, ())}),
    Bad("suite-missing", ("validate", "--out", "{tmp}/out", "{tmp}/nope.yaml"), "file not found", "file"),
    Bad("suite-duplicate-key", ("validate", "--out", "{tmp}/out", "{tmp}/suite.yaml"), "duplicate key", "file",
        {"suite.yaml": "name: a\nname: b\n"}),
]

GEMM_OK = ("gemm", "--hardware", "a100-sxm4-80gb", "--n", "64", "--k", "64")
GEMM = [
    Bad("m-zero", (*GEMM_OK, "--m", "0"), "--m: 0 is out of range", "quantity"),
    Bad("m-negative", (*GEMM_OK, "--m=-5"), "--m: -5 is out of range", "quantity"),
    Bad("m-1e12-text", (*GEMM_OK, "--m", "1e12"), "invalid int value", "quantity"),
    Bad("m-1e12", (*GEMM_OK, "--m", str(10**12)), "allowed: integer 1 to 16777216", "work"),
    Bad("m-text", (*GEMM_OK, "--m", "many"), "invalid int value", "message"),
    Bad("batch-zero", (*GEMM_OK, "--m", "64", "--batch", "0"), "--batch", "quantity"),
    Bad("batch-huge", (*GEMM_OK, "--m", "64", "--batch", str(2**20)), "--batch", "work"),
    Bad("clock-zero", (*GEMM_OK, "--m", "64", "--clock", "0"), "--clock: '0 GHz' is out of range", "quantity"),
    Bad("clock-nan", (*GEMM_OK, "--m", "64", "--clock", "nan"), "--clock", "quantity"),
    Bad("clock-inf", (*GEMM_OK, "--m", "64", "--clock", "inf"), "--clock", "quantity"),
    Bad("clock-negative", (*GEMM_OK, "--m", "64", "--clock=-1.4"), "--clock", "quantity"),
    Bad("clock-overflow", (*GEMM_OK, "--m", "64", "--clock", "1e400"), "not a finite frequency", "quantity"),
    Bad("clock-wrong-unit", (*GEMM_OK, "--m", "64", "--clock", "5 GB"), "is not a frequency", "quantity"),
    Bad("clock-above-max", (*GEMM_OK, "--m", "64", "--clock", "1.5"), "rapidllm gemm: --clock: 1.5 GHz is above "
        "a100-sxm4-80gb's highest SM clock (config/hardware/a100-sxm4-80gb.yaml: clock); allowed: a frequency > 0 "
        "and at most 1.41 GHz", "quantity"),
    Bad("fp8-on-a100", (*GEMM_OK, "--m", "64", "--dtype", "fp8"), "a100-sxm4-80gb has no fp8 tensor units", "message"),
    Bad("fp4-on-a100", (*GEMM_OK, "--m", "64", "--dtype", "fp4"), "a100-sxm4-80gb has no fp4 tensor units", "message"),
    Bad("dtype-unknown", (*GEMM_OK, "--m", "64", "--dtype", "int3"), "invalid choice", "message"),
    Bad("hardware-traversal", ("gemm", "--hardware", "../../etc/passwd", "--m", "1", "--n", "1", "--k", "1"),
        "is not a hardware name", "message"),
    Bad("hardware-unknown", ("gemm", "--hardware", "tpu-v9", "--m", "1", "--n", "1", "--k", "1"), "unknown hardware",
        "message"),
]

COLL = ("collective", "--network", "dgx-a100", "--bytes", "1 GiB")
COLLECTIVE = [
    Bad("bytes-1e30", ("collective", "--network", "dgx-a100", "--op", "all_reduce", "--bytes", "1e30", "--ranks", "8"),
        "--bytes: '1e30' is out of range; allowed: a byte count >= 0 and <= 1 PiB", "quantity"),
    # a fabric without switches read "switches 20..19", an empty range
    Bad("fault-not-a-link-no-switches", ("collective", "--network", "wafer-mesh", "--op", "all_reduce", "--bytes", "1 MiB",
        "--ranks", "16", "--fault", "0,8,dead"), "link [0, 8] does not exist; endpoints are global node ids (ranks 0..19, no switches)",
        "message"),
    Bad("ranks-zero", (*COLL, "--ranks", "0"), "--ranks: 0 is out of range", "quantity"),
    Bad("ranks-negative", (*COLL, "--ranks=-4"), "--ranks: -4 is out of range", "quantity"),
    Bad("ranks-1e8-text", (*COLL, "--ranks", "1e8"), "is not a count", "work"),
    Bad("ranks-1e8", (*COLL, "--ranks", str(10**8)), "allowed: integer 1 to 131072", "work"),
    Bad("ranks-list-negative", (*COLL, "--ranks", "0,1,-1"), "--ranks.2: -1 is out of range", "quantity"),
    Bad("ranks-list-duplicate", (*COLL, "--ranks", "0,0"), "must be distinct", "message"),
    Bad("ranks-list-outside", (*COLL, "--ranks", "0,99"), "must be distinct ids in 0..7", "message"),
    Bad("ranks-ring-too-much-work", ("collective", "--network", "superpod-ndr", "--bytes", "1 GB", "--ranks", "16384",
                                     "--algorithm", "ring"), "the simulator takes at most", "work"),
    Bad("ranks-all-to-all-too-much-work", ("collective", "--network", "superpod-ndr", "--bytes", "1 GB", "--op",
                                           "all_to_all", "--ranks", "8192"), "the simulator takes at most", "work"),
    Bad("bytes-negative", ("collective", "--network", "dgx-a100", "--bytes=-1 GB"), "--bytes: '-1 GB' is out of range",
        "quantity"),
    Bad("bytes-overflow", ("collective", "--network", "dgx-a100", "--bytes", "1e400 B"), "not a finite byte count", "crash"),
    Bad("bytes-nan", ("collective", "--network", "dgx-a100", "--bytes", "nan B"), "--bytes", "quantity"),
    Bad("bytes-wrong-unit", ("collective", "--network", "dgx-a100", "--bytes", "1 GB/s"), "is not a byte count",
        "quantity"),
    Bad("chunks-zero", (*COLL, "--chunks", "0"), "--chunks: 0 is out of range", "quantity"),
    Bad("chunks-1e8", (*COLL, "--chunks", str(10**8)), "allowed: integer 1 to 4096", "work"),
    Bad("utilization-negative", (*COLL, "--utilization=-0.5"), "--utilization: -0.5 is out of range", "quantity"),
    Bad("utilization-five", (*COLL, "--utilization", "5"), "--utilization: 5.0 is out of range", "quantity"),
    Bad("utilization-nan", (*COLL, "--utilization", "nan"), "(finite)", "quantity"),
    Bad("fault-short", (*COLL, "--fault", "0,1"), "is not A,B,FACTOR", "message"),
    Bad("fault-factor-nan", (*COLL, "--fault", "0,8,nan"), "must be in (0, 1]", "quantity"),
    Bad("fault-factor-zero", (*COLL, "--fault", "0,8,0"), "must be in (0, 1]", "quantity"),
    Bad("fault-negative-node", (*COLL, "--fault=-1,8,0.5"), "is not A,B,FACTOR", "quantity"),
    Bad("network-traversal", ("collective", "--network", "../networks/dgx-a100", "--bytes", "1 GB"),
        "is not a network name", "message"),
    Bad("network-unknown", ("collective", "--network", "infiniband", "--bytes", "1 GB"), "unknown network", "message"),
    Bad("algorithm-unknown", (*COLL, "--algorithm", "telepathy"), "--algorithm: 'telepathy' is not allowed", "message"),
    Bad("algorithm-wrong-op", (*COLL, "--op", "all_to_all", "--algorithm", "ring"), "has no algorithm 'ring'", "message"),
]

CALIBRATE = [
    Bad("grid-zero", ("calibrate", "--grid", "0", "--dry-run"), "--grid must be 1 to 64", "quantity"),
    # grid^3 points: --grid 1000000 was 1e18 objective evaluations, a hang
    Bad("grid-huge", ("calibrate", "--grid", "1000000", "--dry-run"), "--grid must be 1 to 64 and --iters 0 to 10000", "work"),
    Bad("iters-huge", ("calibrate", "--iters", "1000000000", "--dry-run"), "--iters 0 to 10000", "work"),
    Bad("out-is-directory", ("calibrate", "--dry-run", "--out", "{tmp}"), "is a directory", "file"),
]

SEARCH_SPEC: dict[str, Any] = dict(name="s", model="llama2-7b", hardware="a100-sxm4-80gb", network="dgx-a100",
                                   precision="bf16", workload=dict(mode="training", seq_len=2048, global_batch=8),
                                   gpus=[8])


def search_bad(id: str, dotted: str, value: Any, expect: str, kind: str = "message", flags: tuple[str, ...] = ()) -> Bad:
    return Bad(id, ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out", *flags), expect, kind,
               {"s.yaml": with_key(SEARCH_SPEC, dotted, value)})


SEARCH = [
    search_bad("unknown-axis", "space", {"tpp": [1]}, "unknown key(s) 'tpp'"),
    search_bad("unknown-value", "space", {"recompute": ["sometimes"]}, "'sometimes' is not allowed"),
    search_bad("unknown-objective", "objective", "speed", "'speed' is not allowed"),
    # a candidate listed twice ranked every layout twice under the same label
    search_bad("candidate-twice", "model", ["llama2-7b", "llama2-7b"], "model: ['llama2-7b', 'llama2-7b'] has non-unique elements", "message"),
    # a filter no value passes read "no feasible layout among 24 (24 filtered)", as if the space were empty
    search_bad("filter-min-above-max", "constraints", {"filters": {"tp": {"min": 4, "max": 2}}},
               "constraints.filters.tp: min 4 is above max 2", "message"),
    # a column objective with a bad direction was judged against the named objectives' enum
    search_bad("objective-direction", "objective", {"column": "step_time_s", "direction": "sideways"},
               "objective.direction: 'sideways' is not allowed; allowed: min, max", "message"),
    search_bad("gpus-zero", "gpus", [0], "out of range", "quantity"),
    search_bad("gpus-range-unbounded", "gpus", {"min": 1, "max": 1000000000}, "out of range", "work"),
    search_bad("gpus-range-too-many-counts", "gpus", {"min": 1, "max": 131072, "step": 1}, "GPU counts; at most", "work"),
    search_bad("global-batch-nan", "workload.global_batch", NAN, "global_batch", "quantity"),
    search_bad("unknown-model", "model", "no-such-model", "unknown model 'no-such-model'"),
    search_bad("model-path-escape", "model", "../../workflow/schemas/case.schema", "is not a model name"),
    search_bad("empty-space", "space", {"tp": [3]}, "no layout: no dp x tp x pp x cp from the space's values"),
    # a layout axis pinned under parallelism read "unknown key(s) 'tp' (did you mean tp_comm_overlap?)"
    search_bad("parallelism-axis", "parallelism", {"tp": 8}, "parallelism.tp: a search axis, not a fixed setting; give its values in space.tp"),
    # the boolean space switch read "give its values in space.tp_across_nodes (one value pins it)"
    search_bad("parallelism-switch", "parallelism", {"tp_across_nodes": True},
               "parallelism.tp_across_nodes: a search-space switch, not a parallelism setting; give it as space.tp_across_nodes"),
    # an overlap switch pinned for every layout made the layouts it does not apply to invalid (user trial 3, P2)
    search_bad("parallelism-overlap-switch", "parallelism", {"tp_comm_overlap": True},
               "parallelism.tp_comm_overlap: a search axis, on only where it applies: space.tp_comm_overlap: [true]"),
    # units on a filter bound were "not of type number" (P9); now a wrong unit is named
    search_bad("filter-bound-wrong-unit", "constraints", {"filters": {"peak_memory_bytes": {"max": "70 GHz"}}},
               "constraints.filters.peak_memory_bytes.max: '70 GHz' is not a byte count", "quantity"),
    # a string column was among the allowed objective columns (P7)
    search_bad("objective-string-column", "objective", {"column": "schedule", "direction": "min"},
               "objective.column: unknown column 'schedule'"),
    search_bad("rate-without-cost-objective", "usd_per_gpu_hour", 2.49, "usd_per_gpu_hour: prices a cost objective"),
    # an inline variant keeping a config device's name was priced with the last one's cost inputs (review 17)
    search_bad("device-name-twice", "hardware", ["a100-sxm4-80gb", {"name": "a100-sxm4-80gb"}],
               "hardware.1: device name 'a100-sxm4-80gb' is hardware.0's too, for another device"),
    search_bad("parallelism-redundant-negative", "parallelism", {"redundant_experts": -1}, "out of range", "quantity"),
    search_bad("parallelism-redundant-dense", "parallelism", {"redundant_experts": 8}, "redundant_experts"),
    search_bad("top-zero", "gpus", [8], "--top: 0 is out of range", "quantity", ("--top", "0")),
    # an MLA model under the 2023 Triton FlashAttention (head dims <= 128): every layout an invalid row
    Bad("flash-triton-mla", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "invalid by rule: attention_impl", "message",
        {"s.yaml": {**SEARCH_SPEC, "model": "deepseek-v2-lite", "space": {"attention_impl": ["flash_triton"],
                                                                         "tp": [1], "pp": [1], "ep": [8]}}}),
    Bad("out-is-a-file", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/s.yaml"), "is a file", "file",
        {"s.yaml": SEARCH_SPEC}),
    Bad("spec-missing", ("search", "{tmp}/none.yaml", "--quiet"), "file not found", "file"),
    # (hardware, network) pairs (user trial 3 P7) beside the crossed form: one form only
    search_bad("systems-and-hardware", "systems", [{"hardware": "h100-sxm5-80gb", "network": "dgx-h100"}],
               "(top level): needs hardware and network (every hardware crossed with every network) or systems"),
    Bad("systems-pair-without-network", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "systems.0: missing key 'network'", "message",
        {"s.yaml": {**{k: v for k, v in SEARCH_SPEC.items() if k not in ("hardware", "network")},
                    "systems": [{"hardware": "h100-sxm5-80gb"}]}}),
    # a device file by path, read relative to the spec's folder: a missing one is named with its key
    Bad("systems-device-file-missing", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "systems.0.hardware: my-gpu.yaml: file not found", "file",
        {"s.yaml": {**{k: v for k, v in SEARCH_SPEC.items() if k not in ("hardware", "network")},
                    "systems": [{"hardware": "my-gpu.yaml", "network": "dgx-a100"}]}}),
]

# a port outside 1-65535 reached Streamlit, whose traceback ended the command (exit 1)
EXPLORE = [
    Bad("port-too-large", ("explore", "--port", "99999"), "--port: 99999 is out of range; allowed: 1 to 65535", "crash"),
    Bad("port-negative", ("explore", "--port=-1"), "--port: -1 is out of range; allowed: 1 to 65535", "crash"),
]

MODEL_FILE = yaml.safe_load((config_dir("model") / "llama2-7b.yaml").read_text())
HARDWARE_FILE = yaml.safe_load((config_dir("hardware") / "a100-sxm4-80gb.yaml").read_text())
SWEEP_ARGS = ("sweep", "{tmp}/f.yaml", "--out", "{tmp}/o.csv", "--quiet")

# a second newcomer's pass (tests/test_newuser_pass.py holds the rest of it)
NEWCOMER = [
    # a file of one's own given by path is read relative to the case's folder (user trial 3, P8); a missing
    # one says where it was looked for
    Bad("hardware-given-as-a-missing-file", ("predict", "{tmp}/case.yaml"),
        "case.yaml: hardware: x300.yaml: file not found (a path is read relative to ", "message",
        {"case.yaml": with_key(CASE, "hardware", "x300.yaml")}),
    Bad("network-given-as-a-missing-relative-path", ("predict", "{tmp}/case.yaml"),
        "case.yaml: network: ./pod.yaml: file not found", "message",
        {"case.yaml": with_key(CASE, "network", "./pod.yaml")}),
    Bad("hardware-file-of-another-kind", ("predict", "{tmp}/case.yaml"),
        "dev.yaml: (top level): this is a model spec", "message",
        {"case.yaml": with_key(CASE, "hardware", "dev.yaml"), "dev.yaml": MODEL_FILE}),
    Bad("hardware-file-with-a-bad-key", ("predict", "{tmp}/case.yaml"),
        "dev.yaml: hbm_bandwidth: ", "quantity",
        {"case.yaml": with_key(CASE, "hardware", "dev.yaml"),
         "dev.yaml": {**HARDWARE_FILE, "hbm_bandwidth": "12 TB"}}),
    Bad("gemm-hardware-missing-file", ("gemm", "--hardware", "{tmp}/none.yaml", "--m", "1", "--n", "1", "--k", "1"),
        "rapidllm gemm: --hardware: ", "message"),
    # a file of the wrong kind: was a screenful of "missing key" / "unknown key(s)" lines per key
    Bad("model-file-to-predict", ("predict", "{tmp}/f.yaml"),
        "f.yaml: (top level): this is a model spec (a case names it under `model:`", "message",
        {"f.yaml": MODEL_FILE}),
    Bad("case-file-to-sweep", SWEEP_ARGS,
        "f.yaml: (top level): this is a case file (rapidllm predict CASE, rapidllm.predict), not an experiment spec",
        "message", {"f.yaml": {**CASE, "hardware": "a100-sxm4-80gb", "network": "dgx-a100"}}),
    Bad("search-spec-to-predict", ("predict", "{tmp}/f.yaml"), "this is a search spec (rapidllm search SPEC",
        "message", {"f.yaml": SEARCH_SPEC}),
    Bad("experiment-to-search", ("search", "{tmp}/f.yaml", "--quiet", "--out", "{tmp}/out"),
        "this is an experiment file (rapidllm sweep EXPERIMENT", "message", {"f.yaml": EXPERIMENT}),
    # a number without a unit is SI: 288 bytes of HBM predicted "needs 56 GiB > 0.0 GiB" with a ZeRO hint
    Bad("hbm-capacity-without-unit", ("predict", "{tmp}/case.yaml"),
        "hardware.hbm_capacity: 288 is out of range; allowed: a byte count >= 1 GiB (a number without a unit is "
        "in bytes", "quantity", {"case.yaml": with_key(CASE, "hardware.hbm_capacity", 288)}),
    Bad("clock-without-unit", ("predict", "{tmp}/case.yaml"),
        "hardware.clock: 1.8 is out of range; allowed: a frequency >= 1 MHz (a number without a unit is in Hz",
        "quantity", {"case.yaml": with_key(CASE, "hardware.clock", 1.8)}),
    Bad("link-bandwidth-without-unit", ("predict", "{tmp}/case.yaml"),
        "network.dimensions.0.link_bandwidth: 450 is out of range; allowed: a bandwidth >= 1 MB/s", "quantity",
        {"case.yaml": with_key(CASE, "network.dimensions.0.link_bandwidth", 450)}),
    # a misspelt sweep key into a named spec: no hint, unlike a misspelt key in a case file
    Bad("sweep-dotted-key-typo", SWEEP_ARGS,
        "f.yaml: hardware.hbm_bandwith: matches no key of a case (workflow/schemas/case.schema.yaml) (did you mean "
        "hardware.hbm_bandwidth", "message",
        {"f.yaml": {**EXPERIMENT, "cross": {"hardware.hbm_bandwith": ["1 TB/s", "2 TB/s"]}}}),
    # a fault on a pair that is not a cable gave the id ranges only: no way to find a rank's switch from the CLI
    Bad("fault-names-the-ranks-cables", ("predict", "{tmp}/case.yaml"),
        "faults.0: link [0, 1] does not exist; endpoints are global node ids (ranks 0..7, switches 8..9); rank 0's "
        "cables: [0, 8] to", "message", {"case.yaml": {**CASE, "parallelism": {"tp": 8},
                                                       "faults": [{"link": [0, 1], "bandwidth_factor": 0.5}]}}),
    # a measured row naming no operator changed nothing, exit 0, while a what-if of the same name is refused
    Bad("measured-row-names-no-operator", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/ops.csv"),
        "ops.csv: row 1: no operator named 'atn' (did you mean attn?); known: attn,", "message",
        {"case.yaml": {**CASE, "parallelism": {"tp": 8}}, "ops.csv": "name,time_s\nmlp_up,0.001\natn,0.002\n"}),
    # the same two on a case memory settles (CASE does not fit): "infeasible", exit 0, before any check
    Bad("fault-on-an-infeasible-case", ("predict", "{tmp}/case.yaml"),
        "faults.0: link [0, 1] does not exist", "message",
        {"case.yaml": {**CASE, "faults": [{"link": [0, 1], "bandwidth_factor": 0.5}]}}),
    Bad("measured-row-on-an-infeasible-case", ("predict", "{tmp}/case.yaml", "--measured", "{tmp}/ops.csv"),
        "ops.csv: row 0: no operator named 'atn'", "message", {"case.yaml": CASE, "ops.csv": "name,time_s\natn,1\n"}),
    # a rank count above the fabric's printed every id it asked for: 5 kB on one line for --ranks 1000
    Bad("collective-rank-count-above-the-network", ("collective", "--network", "dgx-a100", "--bytes", "1 GiB",
                                                    "--ranks", "1000"),
        "network 'dgx-a100': ranks: a count of 1000; allowed: 1 to 8", "message"),
]

CORPUS: dict[str, list[Bad]] = {"predict": PREDICT, "sweep": SWEEP, "search": SEARCH, "validate": VALIDATE,
                                "gemm": GEMM, "collective": COLLECTIVE, "calibrate": CALIBRATE, "explore": EXPLORE,
                                "newcomer": NEWCOMER}
