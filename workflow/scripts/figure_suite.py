"""Snakemake adapter: one suite's rows -> predicted vs measured figure (PNG + PDF)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from pathlib import Path

import pandas as pd

from rapidllm.figures.validation import predicted_vs_measured

rows = pd.read_csv(snakemake.input.rows)  # noqa: F821
predicted_vs_measured(rows, snakemake.wildcards.suite, "seconds", Path(snakemake.output.png).with_suffix(""))  # noqa: F821
