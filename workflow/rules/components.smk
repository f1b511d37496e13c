# Component validation: GEMM kernels (paper Fig 10), nccl-tests collectives, nanotron/MPT memory.


rule validate_gemm:
    input:
        refs=["validation/references/gemm_ncu_a100.csv", "validation/references/gemm_xla_h100.csv"],
        hardware=["config/hardware/a100-sxm4-80gb.yaml", "config/hardware/h100-sxm5-80gb.yaml"],
        code=script_code("validate_gemm"),
    output:
        rows="results/validation/gemm_kernels.csv",
        errors=report("results/validation/gemm_errors.csv", caption="../report/gemm.rst", category="5. Components"),
    log:
        "results/logs/validate_gemm.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_gemm.py"


rule validate_collectives:
    input:
        refs=["validation/references/collectives_nccl_a100_node.csv",
              "validation/references/collectives_nccl_h100_node.csv"],
        specs=["config/hardware/a100-sxm4-80gb.yaml", "config/networks/dgx-a100.yaml",
               "config/hardware/h100-sxm5-80gb.yaml", "config/networks/dgx-h100.yaml"],
        code=script_code("validate_collectives"),
    output:
        "results/validation/collectives_nccl.csv",
    log:
        "results/logs/validate_collectives.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_collectives.py"


rule validate_memory:
    input:
        refs=["validation/references/training_nanotron_h100_sample.csv", "validation/references/training_mpt_fsdp_h100.csv"],
        specs=["config/hardware/h100-sxm5-80gb.yaml", "config/networks/dgx-h100.yaml"],
        code=script_code("validate_memory"),
    output:
        rows="results/validation/memory_nanotron.csv",
        summary=report("results/validation/memory_summary.csv", caption="../report/memory.rst", category="5. Components"),
    log:
        "results/logs/validate_memory.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_memory.py"


rule figure_component:
    input:
        table="results/validation/{table}.csv",
        code=script_code("figure_component"),
    output:
        png=report("results/figures/{table}.png", caption="../report/component_figure.rst", category="5. Components"),
        pdf="results/figures/{table}.pdf",
    wildcard_constraints:
        table="gemm_errors|collectives_nccl|memory_nanotron",
    log:
        "results/logs/figures/{table}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/figure_component.py"


rule validate_deepseek:
    input:
        refs=["validation/references/kernel_flashmla_h800.csv", "validation/references/training_deepseek_v3_h800.csv",
              "validation/references/inference_deepseek_v3_h800.csv",
              "validation/references/profile_deepseek_v3_train_h800.csv"],
        specs=["config/hardware/h800.yaml", "config/networks/h800-ib.yaml", "config/models/deepseek-v3.yaml"],
        code=script_code("validate_deepseek"),
    output:
        "results/validation/deepseek_checks.csv",
    log:
        "results/logs/validate_deepseek.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_deepseek.py"
