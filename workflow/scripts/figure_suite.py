"""Snakemake adapter: one suite's rows -> predicted vs measured figure (PNG + PDF) with published peers."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from pathlib import Path

import pandas as pd

from rapidllm.figures.suites import predicted_vs_measured
from rapidllm.spec.schema import load_yaml

rows = pd.read_csv(snakemake.input.rows, keep_default_na=False, na_values=[""])  # noqa: F821
spec = load_yaml(Path(snakemake.input.suite))  # noqa: F821
predicted_vs_measured(rows, spec["name"], None, Path(snakemake.output.png).with_suffix(""),  # noqa: F821
                      paper=spec.get("paper", {}))
