# The simulated step of each example case as a Chrome trace-event timeline and its figure (docs/explorer.md).
rule timeline:
    input:
        specs=timeline_specs,
        code=script_code("timeline"),
    output:
        json="results/timeline/{case}.json",
        png=report("results/figures/timeline_{case}.png", caption="../report/timeline.rst",
                   category="3. Step timeline"),
    log:
        "results/logs/timeline/{case}.log",
    threads: 1
    resources:
        mem_mb=lambda w, attempt: 1000 * attempt,
        runtime=lambda w, attempt: 10 * attempt,
    conda:
        "../../environment.yml"
    script:
        "../scripts/timeline.py"
