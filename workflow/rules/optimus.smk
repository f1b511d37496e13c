# The Optimus-extension studies (docs/optimus-studies.md, issue 18): each reads its experiments' pipeline
# summaries (config/experiments/optimus-*.yaml, listed in config/config.yaml) and writes a comparison
# table under results/optimus/ and a figure for the report.

# figure -> the experiments it reads; `rule all` asks only for those whose experiments the config runs
# (a config without them, such as the pipeline test's, builds none)
OPTIMUS_NEEDS = {"flash_gpt2": ["optimus-flash-gpt2"], "flash_batch": ["optimus-flash-batch"],
                 "flash_long": ["optimus-flash-long"], "moe": ["optimus-moe"], "topology": ["optimus-topology"],
                 "cost": ["optimus-cost-training", "optimus-cost-inference"],
                 "cost_tornado": ["optimus-cost-training", "optimus-cost-inference"]}
OPTIMUS_FIGURES = [f for f, needs in OPTIMUS_NEEDS.items() if all(e in STUDIES for e in needs)]
# a study's pipeline outputs, by experiment
STUDY_FILES = {exp: {"summary": f"results/{exp}/summary.parquet", "cases": f"results/{exp}/cases.parquet"}
               for needs in OPTIMUS_NEEDS.values() for exp in needs}


rule optimus_flash_gpt2:
    input:
        **STUDY_FILES["optimus-flash-gpt2"],
        reference="validation/references/flash_attention_gpt2_a100.csv",
        code=script_code("optimus"),
    output:
        table="results/optimus/flash_gpt2.csv",
        png=report("results/figures/optimus_flash_gpt2.png", caption="../report/optimus.rst", category="7. Optimus studies"),
    params:
        study="flash_gpt2",
    log:
        "results/logs/optimus/flash_gpt2.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"


rule optimus_flash_batch:
    input:
        **STUDY_FILES["optimus-flash-batch"],
        code=script_code("optimus"),
    output:
        table="results/optimus/flash_batch.csv",
        png=report("results/figures/optimus_flash_batch.png", caption="../report/optimus.rst", category="7. Optimus studies"),
    params:
        study="flash_batch",
    log:
        "results/logs/optimus/flash_batch.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"


rule optimus_flash_long:
    input:
        **STUDY_FILES["optimus-flash-long"],
        reference="validation/references/flash_attention_kernels_h100.csv",
        hardware="config/hardware/h100-sxm5-80gb.yaml",
        code=script_code("optimus"),
    output:
        table="results/optimus/flash_long.csv",
        kernels="results/optimus/flash_kernels.csv",
        png=report("results/figures/optimus_flash_long.png", caption="../report/optimus.rst", category="7. Optimus studies"),
    params:
        study="flash_long",
    log:
        "results/logs/optimus/flash_long.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"


rule optimus_moe:
    input:
        **STUDY_FILES["optimus-moe"],
        code=script_code("optimus"),
    output:
        table="results/optimus/moe.csv",
        png=report("results/figures/optimus_moe.png", caption="../report/optimus.rst", category="7. Optimus studies"),
    params:
        study="moe",
    log:
        "results/logs/optimus/moe.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"


rule optimus_topology:
    input:
        **STUDY_FILES["optimus-topology"],
        code=script_code("optimus"),
    output:
        table="results/optimus/topology.csv",
        png=report("results/figures/optimus_topology.png", caption="../report/optimus.rst", category="7. Optimus studies"),
    params:
        study="topology",
    log:
        "results/logs/optimus/topology.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"


rule optimus_cost:
    input:
        train_summary="results/optimus-cost-training/summary.parquet",
        train_cases="results/optimus-cost-training/cases.parquet",
        infer_summary="results/optimus-cost-inference/summary.parquet",
        infer_cases="results/optimus-cost-inference/cases.parquet",
        process=sorted(str(p) for p in Path("config/process").glob("*.yaml")),
        code=script_code("optimus"),
    output:
        table="results/optimus/cost.csv",
        tornado="results/optimus/cost_tornado.csv",
        png=report("results/figures/optimus_cost.png", caption="../report/optimus.rst", category="7. Optimus studies"),
        tornado_png=report("results/figures/optimus_cost_tornado.png", caption="../report/optimus.rst",
                           category="7. Optimus studies"),
    params:
        study="cost",
    log:
        "results/logs/optimus/cost.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/optimus.py"
