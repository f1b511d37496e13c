"""Snakemake adapter: one component table -> its figure (PNG + PDF)."""
from pathlib import Path

import pandas as pd

from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.figures import components  # noqa: E402

DRAW = {"gemm_errors": components.gemm_ablation, "collectives_nccl": components.collective_busbw,
        "memory_nanotron": components.memory_scatter}
table = snakemake.wildcards.table  # noqa: F821
DRAW[table](pd.read_csv(snakemake.input.table), Path(snakemake.output.png).with_suffix(""))  # noqa: F821
