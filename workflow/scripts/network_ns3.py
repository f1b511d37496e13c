"""Snakemake adapter: Llama-3.1-70B collectives in ns-3 vs the link-queue simulator vs alpha-beta (Fig 11)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.validate.ns3 import main  # noqa: E402

rc = main(["--binary", snakemake.input.binary, "--csv", snakemake.output.csv,  # noqa: F821
           "--png", snakemake.output.png])  # noqa: F821
if rc:
    raise SystemExit(rc)
