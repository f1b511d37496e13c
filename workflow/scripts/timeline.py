"""Snakemake adapter: a case file -> its simulated step as trace-event JSON and as a PNG figure."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
import json

from rapidllm.explore.plot import save_timeline_png
from rapidllm.explore.timeline import write_timeline
from rapidllm.prediction import evaluate
from rapidllm.spec.case import load_case

record = evaluate(load_case(snakemake.input.specs[0]), trace=True)  # noqa: F821
path = write_timeline(record, snakemake.output.json)  # noqa: F821
save_timeline_png(json.loads(path.read_text()), snakemake.output.png)  # noqa: F821
