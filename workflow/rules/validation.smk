# Suites -> predicted vs measured per row -> errors.csv -> one figure per suite.

rule validate:
    input:
        suite="validation/suites/{suite}.yaml",
        summary="results/{suite}/summary.parquet",
        code=script_code("validate"),
    output:
        "results/validation/{suite}.csv",
    log:
        "results/logs/validate/{suite}.log",
    threads: 1
    resources:
        # measured: 1-2 s CPU, 117-195 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 500 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate.py"


rule errors:
    input:
        suites=expand("results/validation/{suite}.csv", suite=config["suites"]),
        code=script_code("errors"),
    output:
        report("results/validation/errors.csv", caption="../report/errors.rst", category="1. Accuracy summary"),
    log:
        "results/logs/errors.log",
    threads: 1
    resources:
        # measured: 1-2 s CPU, 117-195 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 500 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/errors.py"


rule figure_suite:
    input:
        rows="results/validation/{suite}.csv",
        suite="validation/suites/{suite}.yaml",
        code=script_code("figure_suite"),
    output:
        png=report("results/figures/{suite}.png", caption="../report/suite_figure.rst", category="4. Validation suites",
                   subcategory="{suite}"),
        pdf="results/figures/{suite}.pdf",
    log:
        "results/logs/figures/{suite}.log",
    threads: 1
    resources:
        # measured: 1-2 s CPU, 117-195 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 500 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/figure_suite.py"


rule figure_accuracy:
    input:
        errors="results/validation/errors.csv",
        code=script_code("figure_accuracy"),
    output:
        png=report("results/figures/accuracy_summary.png", caption="../report/accuracy.rst", category="1. Accuracy summary"),
        pdf="results/figures/accuracy_summary.pdf",
    log:
        "results/logs/figures/accuracy_summary.log",
    threads: 1
    resources:
        # measured: 1-2 s CPU, 117-195 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 500 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/figure_accuracy.py"
