# Suites -> predicted vs measured per row -> errors.csv -> one figure per suite.

rule validate:
    input:
        suite="validation/suites/{suite}.yaml",
        summary="results/{suite}/summary.parquet",
        code=code("validate", "pipeline"),
    output:
        "results/validation/{suite}.csv",
    log:
        "results/logs/validate/{suite}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate.py"


rule errors:
    input:
        suites=expand("results/validation/{suite}.csv", suite=config["suites"]),
        code=code("validate", "pipeline"),
    output:
        report("results/validation/errors.csv", caption="../report/errors.rst", category="Validation"),
    log:
        "results/logs/errors.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/errors.py"


rule figure_suite:
    input:
        rows="results/validation/{suite}.csv",
        code=code("figures"),
    output:
        png=report("results/figures/{suite}.png", caption="../report/suite_figure.rst", category="Validation"),
        pdf="results/figures/{suite}.pdf",
    log:
        "results/logs/figures/{suite}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/figure_suite.py"
