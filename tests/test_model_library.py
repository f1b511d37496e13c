"""The named model library: every config/models/*.yaml loads, validates and matches its published size."""
from __future__ import annotations

import pytest

from rapidllm.ops.params import active_parameters, parameter_counts
from rapidllm.spec.model import ModelSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import known_names

MODELS = known_names("model")

# Names the rest of the project (issue 2) relies on; the library may grow beyond them.
REQUIRED = {
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.3-70b",
    "gpt-22b", "gpt-175b", "gpt-310b", "gpt-530b", "gpt-1t",
    "mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b", "mpt-13b", "mpt-30b", "mpt-70b",
    "mixtral-8x7b", "mixtral-8x22b", "qwen2-57b-a14b", "qwen3-235b-a22b", "glm-4.5-air",
    "deepseek-v3", "deepseek-v2-lite",
}

# Published activated-parameter counts of the MoE models, with the rounding step of the published figure.
# (published, step, excluded): "" counts every parameter, "embedding" leaves out the input embedding (a
# lookup, not a matmul), "embeddings" the input embedding and the output layer.
PUBLISHED_ACTIVE = {
    # Mistral AI, "Mixtral of experts" (2023-12-11): "uses 12.9B parameters per token".
    "mixtral-8x7b": (12.9e9, 0.1e9, ""),
    # Mistral AI, "Cheaper, Better, Faster, Stronger" (2024-04-17): "39B active parameters out of 141B".
    "mixtral-8x22b": (39e9, 1e9, ""),
    # Qwen Team 2024, Qwen2 Technical Report (arXiv:2407.10671) Table 1: 14B activated.
    "qwen2-57b-a14b": (14e9, 1e9, ""),
    # Qwen Team 2025, Qwen3 Technical Report (arXiv:2505.09388) Table 2: 22B activated.
    "qwen3-235b-a22b": (22e9, 1e9, ""),
    # Qwen/Qwen3-30B-A3B model card: "Number of Activated Parameters: 3.3B".
    "qwen3-30b-a3b": (3.3e9, 0.1e9, ""),
    # GLM-4.5 Team 2025 (arXiv:2508.06471) Table 1: 12B activated. The figure matches the count without the
    # input embedding and output layer (12.18B; 13.42B with them), so GLM evidently excludes them.
    "glm-4.5-air": (12e9, 1e9, "embeddings"),
    # DeepSeek-V3 report (arXiv:2412.19437) §1: 37B activated; DeepSeek-V2 (arXiv:2405.04434) Appendix B:
    # V2-Lite 2.4B activated. Both match the count without the input embedding (36.6B and 2.45B; with it
    # 37.6B and 2.66B, the latter off by 11%).
    "deepseek-v3": (37e9, 1e9, "embedding"),
    "deepseek-v2-lite": (2.4e9, 0.1e9, "embedding"),
}


def load(name: str) -> ModelSpec:
    mapping, where = resolve_named("model", name, "test", "model")
    return ModelSpec.from_mapping(mapping, where)


def test_library_has_the_required_models():
    assert REQUIRED <= set(MODELS), sorted(REQUIRED - set(MODELS))


@pytest.mark.parametrize("name", MODELS)
def test_model_loads_with_source_and_published_size(name):
    mapping, _ = resolve_named("model", name, "test", "model")
    assert mapping["name"] == name, "the file's name key must equal its stem"
    assert mapping.get("source"), "every named model cites a source"
    assert name == name.lower()
    assert load(name).published_params


@pytest.mark.parametrize("name", MODELS)
def test_total_parameters_within_one_percent_of_published(name):
    model = load(name)
    total = parameter_counts(model).total
    error = total / model.published_params - 1
    assert abs(error) <= 0.01, f"{name}: computed {total:,} vs published {model.published_params:,.0f} ({error:+.2%})"


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_moe_active_parameters_match_published(name):
    model = load(name)
    assert model.moe is not None
    published, step, excluded = PUBLISHED_ACTIVE[name]
    active = active_parameters(model)
    counts = parameter_counts(model)
    if excluded:
        active -= counts.embedding + (counts.lm_head if excluded == "embeddings" else 0)
    # within half the rounding step of the published figure, plus 1%
    assert abs(active - published) <= step / 2 + 0.01 * published, f"{name}: active {active:,} vs {published:,.0f}"


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_moe_models_are_sparse(name):
    model = load(name)
    assert active_parameters(model) < 0.35 * parameter_counts(model).total


def test_every_moe_model_has_a_published_active_count():
    moe = {n for n in MODELS if load(n).moe is not None}
    assert moe == set(PUBLISHED_ACTIVE)


def test_exact_checkpoint_counts():
    # Closed-form oracles: the released checkpoints' exact totals.
    assert parameter_counts(load("llama2-7b")).total == 6_738_415_616
    assert parameter_counts(load("llama3.1-8b")).total == 8_030_261_248
    assert parameter_counts(load("llama3.1-405b")).total == 405_853_388_800
    assert parameter_counts(load("mixtral-8x7b")).total == 46_702_792_704
    # llm-foundry benchmark NumParams at seq 2048 (learned positions, biases, tied embeddings)
    assert parameter_counts(load("mpt-70b")).total == 64_862_437_376


def test_megatron_gpt_matches_narayanan_formula():
    # Narayanan et al. 2021 §5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), with V = 51200, s = 2048.
    for name in ("gpt-22b", "gpt-175b", "gpt-310b", "gpt-530b", "gpt-1t"):
        m = load(name)
        l, h = m.layers, m.hidden
        expected = 12 * l * h * h + 13 * l * h + (m.vocab + m.max_seq_len) * h
        # the formula omits the final LayerNorm (2h)
        assert parameter_counts(m).total == expected + 2 * h, name


def test_glm_and_qwen_moe_details():
    glm = load("glm-4.5-air")
    assert (glm.moe.experts, glm.moe.top_k, glm.moe.shared_experts, glm.moe.first_dense_layers) == (128, 8, 1, 1)
    assert glm.moe_layer_count() == 45 and glm.qkv_bias and glm.q_dim == 12288
    qwen2 = load("qwen2-57b-a14b")
    assert (qwen2.moe.shared_experts, qwen2.moe.shared_expert_ffn) == (1, 20480) and qwen2.qkv_bias
    qwen3 = load("qwen3-235b-a22b")
    assert (qwen3.moe.experts, qwen3.moe.top_k, qwen3.moe.shared_experts) == (128, 8, 0) and not qwen3.qkv_bias
