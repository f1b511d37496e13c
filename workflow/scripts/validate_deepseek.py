"""Snakemake adapter: DeepSeek component checks (FlashMLA on H800, DeepSeek-V3 pre-training rate)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.components import run_deepseek_validation  # noqa: E402

run_deepseek_validation(snakemake.output[0])  # noqa: F821
