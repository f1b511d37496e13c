"""Snakemake adapter: errors.csv -> accuracy summary figure (PNG + PDF)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from pathlib import Path

import pandas as pd

from rapidllm.figures.accuracy import accuracy_summary

errors = pd.read_csv(snakemake.input.errors)  # noqa: F821
accuracy_summary(errors, Path(snakemake.output.png).with_suffix(""))  # noqa: F821
