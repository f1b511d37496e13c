"""Snakemake adapter: one case-study sweep summary -> its table, its paper comparison and its figure."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from pathlib import Path

import pandas as pd

from rapidllm.figures.case_studies import DRAW
from rapidllm.pipeline.io import write_table
from rapidllm.validate.case_studies import run_study, study_kind

exp = snakemake.wildcards.exp  # noqa: F821
summary = pd.read_parquet(snakemake.input.summary)  # noqa: F821
table, compared = run_study(exp, summary, pd.read_csv(snakemake.input.paper))  # noqa: F821
write_table(table, snakemake.output.table)  # noqa: F821
write_table(compared, snakemake.output.comparison)  # noqa: F821
DRAW[study_kind(exp)](summary, table, Path(snakemake.output.png).with_suffix(""))  # noqa: F821
