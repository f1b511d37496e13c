# Per-study stages (docs/architecture.md, data flow): expand -> (price, memory) -> trace -> simulate -> collect.

rule expand:
    input:
        spec=study_inputs,
        code=script_code("expand"),
    output:
        "results/{exp}/cases.parquet",
    params:
        study=study_file,
        kind=study_kind,
        shard_size=SHARD_SIZE,
    log:
        "results/logs/expand/{exp}.log",
    threads: 1
    resources:
        # measured: 14 ms CPU and ~0.05 MB per case, 173 MB peak RSS for 1,040 cases (docs/hpc.md)
        mem_mb=lambda w, attempt: attempt * (1000 + count_cases(STUDIES[w.exp][1]) // 20),
        runtime=lambda w, attempt: attempt * max(10, count_cases(STUDIES[w.exp][1]) // 600),
    conda:
        "../../environment.yml"
    script:
        "../scripts/expand.py"


rule price:
    input:
        cases="results/{exp}/cases.parquet",
        code=script_code("price"),
    output:
        "results/{exp}/ops/{shard}.parquet",
    log:
        "results/logs/price/{exp}/{shard}.log",
    threads: 1
    resources:
        # measured per shard job: 1-2 s CPU (mostly start-up), 200-262 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: attempt * max(10, STUDIES[w.exp][1].shard_size // 60),
    conda:
        "../../environment.yml"
    script:
        "../scripts/price.py"


rule memory:
    input:
        cases="results/{exp}/cases.parquet",
        code=script_code("memory"),
    output:
        "results/{exp}/memory/{shard}.parquet",
    log:
        "results/logs/memory/{exp}/{shard}.log",
    threads: 1
    resources:
        # measured per shard job: 1-2 s CPU (mostly start-up), 200-262 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: attempt * max(10, STUDIES[w.exp][1].shard_size // 60),
    conda:
        "../../environment.yml"
    script:
        "../scripts/memory.py"


rule trace:
    input:
        cases="results/{exp}/cases.parquet",
        memory="results/{exp}/memory/{shard}.parquet",
        code=script_code("trace"),
    output:
        "results/{exp}/graphs/{shard}.npz",
    log:
        "results/logs/trace/{exp}/{shard}.log",
    threads: 1
    resources:
        # measured per shard job: 1-2 s CPU (mostly start-up), 200-262 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: attempt * max(10, STUDIES[w.exp][1].shard_size // 60),
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
        code=script_code("simulate"),
    output:
        "results/{exp}/sim/{shard}.parquet",
    log:
        "results/logs/simulate/{exp}/{shard}.log",
    threads: 1
    resources:
        # measured per shard job: 1-2 s CPU (mostly start-up), 200-262 MB peak RSS (docs/hpc.md)
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: attempt * max(10, STUDIES[w.exp][1].shard_size // 60),
    conda:
        "../../environment.yml"
    script:
        "../scripts/simulate.py"


rule collect:
    input:
        cases="results/{exp}/cases.parquet",
        sims=lambda w: expand("results/{exp}/sim/{shard}.parquet", exp=w.exp, shard=shards(w.exp)),
        code=script_code("collect"),
    output:
        parquet="results/{exp}/summary.parquet",
        csv="results/{exp}/summary.csv",
    log:
        "results/logs/collect/{exp}.log",
    threads: 1
    resources:
        # measured: 1 s CPU, 215 MB peak RSS for 1,040 cases (docs/hpc.md)
        mem_mb=lambda w, attempt: attempt * (1000 + count_cases(STUDIES[w.exp][1]) // 20),
        runtime=lambda w, attempt: attempt * 10,
    conda:
        "../../environment.yml"
    script:
        "../scripts/collect.py"
