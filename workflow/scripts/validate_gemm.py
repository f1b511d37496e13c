"""Snakemake adapter: GEMM tile model and roofline vs measured kernels."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.components import run_gemm_validation  # noqa: E402

run_gemm_validation(snakemake.output.rows, snakemake.output.errors)  # noqa: F821
