# The RAPID-LLM paper's case studies (§6.1-6.4, Figs 12-15; docs/case-studies.md): every experiment named
# case-* in config/config.yaml runs through the ordinary stages (stages.smk), then gets its table, its
# comparison with the paper's numbers and its figure; paper_comparison.csv gathers the comparisons.


rule case_study:
    input:
        summary="results/{exp}/summary.parquet",
        paper="validation/case_studies/rapid_llm_paper.csv",
        code=script_code("case_study"),
    output:
        table=report("results/case_studies/{exp}.csv", caption="../report/case_study.rst", category="2. Case studies (paper §6)"),
        comparison="results/case_studies/{exp}_paper.csv",
        png=report("results/case_studies/{exp}.png", caption="../report/case_study.rst", category="2. Case studies (paper §6)"),
        pdf="results/case_studies/{exp}.pdf",
    log:
        "results/logs/case_studies/{exp}.log",
    threads: 1
    resources:
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/case_study.py"


rule paper_comparison:
    input:
        parts=expand("results/case_studies/{exp}_paper.csv", exp=CASE_STUDIES),
        code=script_code("paper_comparison"),
    output:
        report("results/case_studies/paper_comparison.csv", caption="../report/paper_comparison.rst",
               category="2. Case studies (paper §6)"),
    log:
        "results/logs/case_studies/paper_comparison.log",
    threads: 1
    resources:
        mem_mb=lambda w, attempt: 500 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/paper_comparison.py"
