"""Snakemake adapter: nccl-tests all-reduce vs the link-queue simulator."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.components import run_collective_validation  # noqa: E402

run_collective_validation(snakemake.output[0])  # noqa: F821
