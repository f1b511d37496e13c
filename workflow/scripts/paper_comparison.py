"""Snakemake adapter: every case study's comparison rows -> results/case_studies/paper_comparison.csv."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
import pandas as pd

from rapidllm.pipeline.io import write_table

parts = [pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in snakemake.input.parts]  # noqa: F821
write_table(pd.concat(parts, ignore_index=True), snakemake.output[0])  # noqa: F821
