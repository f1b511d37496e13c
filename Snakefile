# rapidllm pipeline (DESIGN §2): `snakemake --cores all` reproduces every table and figure.
# Stages are pure functions of their inputs; library modules each stage imports are declared inputs.
import re


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"
include: "workflow/rules/validation.smk"
include: "workflow/rules/ns3.smk"
include: "workflow/rules/components.smk"
include: "workflow/rules/case_studies.smk"


wildcard_constraints:
    shard=r"\d+",
    exp="|".join(re.escape(name) for name in STUDIES),
    suite="|".join(re.escape(name) for name in config["suites"]),


rule all:
    input:
        expand("results/{exp}/summary.csv", exp=list(STUDIES)),
        "results/validation/errors.csv",
        "results/figures/accuracy_summary.png",
        expand("results/figures/{suite}.png", suite=config["suites"]),
        "results/validation/network_ns3.csv",
        "results/figures/network_ns3.png",
        expand("results/figures/{table}.png", table=["gemm_errors", "collectives_nccl", "memory_nanotron"]),
        expand("results/case_studies/{exp}.png", exp=CASE_STUDIES),
        "results/case_studies/paper_comparison.csv",
    default_target: True
