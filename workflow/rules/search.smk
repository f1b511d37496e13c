# Best-layout searches (docs/search.md): config/searches/{search}.yaml, named in config/config.yaml under
# `searches`, run as `search_shards` jobs (each every n-th layout, pruned on its own; exact after the
# merge, since each shard keeps the exact top k of its part of every group), then merged into the ranked
# table, the counts and the Pareto figure of the report.
# Code inputs: what the scripts import, transitively (pipeline.search -> figures, search -> prediction ->
# engine, graph, memory, network, ops -> spec, units), spelled out per rule as tests/test_rule_code_inputs.py
# reads them; prediction.py is a module, not a package, so it is its own input. SEARCHES, SEARCH_SHARDS and
# search_inputs live in common.smk (Snakemake's lint keeps functions out of rule files).


rule search_shard:
    input:
        spec=search_inputs,
        code=script_code("search_shard"),
        prediction=str(LIB / "prediction.py"),
    output:
        table="results/search/{search}/shards/{shard}.parquet",
        counts="results/search/{search}/shards/{shard}.json",
    params:
        spec="config/searches/{search}.yaml",
        shards=SEARCH_SHARDS,
    log:
        "results/logs/search/{search}/{shard}.log",
    threads: 1
    resources:
        # measured: llama3.1-70b search shard of 4 on the 2-core VM, ~10 s and ~400 MB (docs/search.md)
        mem_mb=lambda w, attempt: 1500 * attempt,
        runtime=lambda w, attempt: 30 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/search_shard.py"


rule search_merge:
    input:
        spec=search_inputs,
        tables=lambda w: expand("results/search/{search}/shards/{shard}.parquet", search=w.search,
                                shard=range(SEARCH_SHARDS)),
        counts=lambda w: expand("results/search/{search}/shards/{shard}.json", search=w.search,
                                shard=range(SEARCH_SHARDS)),
        code=script_code("search_merge"),
        prediction=str(LIB / "prediction.py"),
    output:
        csv=report("results/search/{search}/ranked.csv", caption="../report/search.rst", category="6. Layout search"),
        parquet="results/search/{search}/ranked.parquet",
        counts="results/search/{search}/counts.json",
        png=report("results/search/{search}/pareto.png", caption="../report/search.rst", category="6. Layout search"),
        pdf="results/search/{search}/pareto.pdf",
    params:
        spec="config/searches/{search}.yaml",
        out="results/search/{search}",
    log:
        "results/logs/search/{search}/merge.log",
    threads: 1
    resources:
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/search_merge.py"
