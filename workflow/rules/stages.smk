# Per-study stages of DESIGN §2: expand -> (price, memory) -> trace -> simulate -> collect.

rule expand:
    input:
        spec=study_inputs,
        code=code("validate"),
    output:
        "results/{exp}/cases.parquet",
    params:
        study=study_file,
        kind=study_kind,
        shard_size=SHARD_SIZE,
    log:
        "results/logs/expand/{exp}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/expand.py"


rule price:
    input:
        cases="results/{exp}/cases.parquet",
        code=code("ops"),
    output:
        "results/{exp}/ops/{shard}.parquet",
    log:
        "results/logs/price/{exp}/{shard}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/price.py"


rule memory:
    input:
        cases="results/{exp}/cases.parquet",
        code=code("memory", "ops"),
    output:
        "results/{exp}/memory/{shard}.parquet",
    log:
        "results/logs/memory/{exp}/{shard}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/memory.py"


rule trace:
    input:
        cases="results/{exp}/cases.parquet",
        memory="results/{exp}/memory/{shard}.parquet",
        code=code("graph", "memory", "ops"),
    output:
        "results/{exp}/graphs/{shard}.npz",
    log:
        "results/logs/trace/{exp}/{shard}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/trace.py"


rule simulate:
    input:
        cases="results/{exp}/cases.parquet",
        ops="results/{exp}/ops/{shard}.parquet",
        memory="results/{exp}/memory/{shard}.parquet",
        graphs="results/{exp}/graphs/{shard}.npz",
        code=code("engine", "graph", "memory", "network", "ops"),
    output:
        "results/{exp}/sim/{shard}.parquet",
    log:
        "results/logs/simulate/{exp}/{shard}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/simulate.py"


rule collect:
    input:
        cases="results/{exp}/cases.parquet",
        sims=lambda w: expand("results/{exp}/sim/{shard}.parquet", exp=w.exp, shard=shards(w.exp)),
        code=code("pipeline"),
    output:
        parquet="results/{exp}/summary.parquet",
        csv="results/{exp}/summary.csv",
    log:
        "results/logs/collect/{exp}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/collect.py"
