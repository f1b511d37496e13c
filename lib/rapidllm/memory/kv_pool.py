"""Admission of a serving engine: how many sequences it keeps in flight, and what bounds that number.

An in-flight-batching engine (workload concurrency > batch) does not run out of memory when more clients
arrive than its KV cache holds: it admits requests while their cache fits and queues the rest
(docs/serving-capacity.md). Modelled on TensorRT-LLM, whose in-flight batching the serving simulator
already follows (engine/serving.py):

- The KV pool is `kv_cache_fraction` (KvCacheConfig.free_gpu_memory_fraction, default 0.9) of the memory
  left on a GPU after weights, activations and the framework's reserve (tensorrt_llm/_torch/pyexecutor/
  _util.py, `KvCacheCreator._cal_max_tokens`: (total - peak memory of a profiling run) x fraction).
- The cache is paged in blocks of `KV_BLOCK_TOKENS` tokens of every layer of the rank
  (KvCacheConfig.tokens_per_block, default 32).
- The default capacity policy, GUARANTEED_NO_EVICT, admits a waiting request only when the blocks it
  needs to run to completion, ceil((prompt + max new tokens) / tokens_per_block), fit beside those
  reserved for the requests in flight, in arrival order, stopping at the first that does not fit; at most
  `max_batch_size` requests (BuildConfig default 2048) are scheduled
  (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp, `GuaranteedNoEvictScheduler::impl`;
  kvCacheManager.cpp, `getRemainingBlocksToCompletion`; TensorRT-LLM commits cf6abc45 / 008b2b8d).
  A started request is never paused, so with requests of one length the engine holds a fixed number of
  them: floor(pool / one request's blocks), capped by `max_batch_size`.

Every pipeline stage keeps its own layers' cache, so a sequence is admitted only where it fits on all of
them: the smallest stage count binds.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.spec.layout import InferenceWorkload

KV_BLOCK_TOKENS = 32      # TensorRT-LLM KvCacheConfig.tokens_per_block default

# what bounds the sequences in flight: the static batch itself, every client (nothing waits), the KV pool,
# or the engine's max_batch_size
LIMITS = ("batch", "concurrency", "kv_cache", "max_batch_size")


@dataclass(frozen=True)
class Admission:
    """Sequences a serving engine keeps in flight (`sequences`), what bounds them (`limit`, one of
    LIMITS), how many requests the KV pool alone holds (`kv_sequences`) and, on the stage that binds, the
    pool and one request's reservation in bytes."""
    sequences: int
    limit: str
    kv_sequences: int
    pool_bytes: float
    request_bytes: float


def reserved_tokens(prompt: int, output: int) -> int:
    """Tokens one request's blocks hold at admission: prompt + output rounded up to whole blocks."""
    return -(-(prompt + output) // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS


def admit(w: InferenceWorkload, stages: list[tuple[float, float]]) -> Admission:
    """The admission of serving workload `w` from each pipeline stage's (free bytes after weights,
    activations and the framework reserve; one request's reserved KV bytes)."""
    assert w.concurrency > w.batch
    pools = [(w.kv_cache_fraction * max(free, 0.0), request) for free, request in stages]
    fits = [int(pool // request) for pool, request in pools]
    binding = min(range(len(fits)), key=fits.__getitem__)
    kv = fits[binding]
    sequences = min(w.concurrency, w.max_batch_size, kv)
    limit = "concurrency" if sequences == w.concurrency else "kv_cache" if kv <= w.max_batch_size \
        else "max_batch_size"
    return Admission(sequences, limit, kv, *pools[binding])
