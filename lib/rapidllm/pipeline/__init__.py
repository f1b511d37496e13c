"""Pipeline stages as plain functions of files (the Snakemake scripts and the CLI both call these)."""
