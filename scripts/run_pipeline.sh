#!/usr/bin/env bash
# The main job: set up (first run only) and run the full pipeline, then build the HTML report.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
snakemake --cores all "$@"
snakemake --cores all --report results/report.html --report-metadata workflow/report/metadata.yaml
