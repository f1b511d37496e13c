# rapidllm pipeline (docs/architecture.md): `snakemake --cores all` reproduces every table and figure.
# Stages are pure functions of their inputs; library modules each stage imports are declared inputs.
import re


configfile: "config/config.yaml"


# The report opens on this page (what to look at first), not on the workflow graph.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"
include: "workflow/rules/validation.smk"
include: "workflow/rules/ns3.smk"
include: "workflow/rules/components.smk"
include: "workflow/rules/optimus.smk"
include: "workflow/rules/explore.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/case_studies.smk"


wildcard_constraints:
    shard=r"\d+",
    exp="|".join(re.escape(name) for name in STUDIES),
    suite="|".join(re.escape(name) for name in config["suites"]),
    search="|".join(re.escape(name) for name in SEARCHES) or "(?!)",


rule all:
    input:
        expand("results/{exp}/summary.csv", exp=list(STUDIES)),
        "results/validation/errors.csv",
        "results/figures/accuracy_summary.png",
        expand("results/figures/{suite}.png", suite=config["suites"]),
        "results/validation/network_ns3.csv",
        "results/figures/network_ns3.png",
        expand("results/figures/{table}.png", table=["gemm_errors", "collectives_nccl", "memory_nanotron"]),
        "results/validation/deepseek_checks.csv",
        expand("results/figures/optimus_{study}.png", study=OPTIMUS_FIGURES),
        expand("results/figures/timeline_{case}.png", case=TIMELINE_CASES),
        expand("results/search/{search}/ranked.csv", search=SEARCHES),
        expand("results/case_studies/{exp}.png", exp=CASE_STUDIES),
        *(["results/case_studies/paper_comparison.csv"] if CASE_STUDIES else []),
    default_target: True
