"""Step 5, compare: per space x system x seed, every stage count against sequential training with the same
schedule settings (Table 3)."""


rule compare:
    input:
        reference=lambda wc: W.reference_run(wc.space, wc.seed, wc.system),
        runs=lambda wc: W.system_runs(wc.space, wc.system, wc.seed),
    output:
        path("reproducibility"),
    log:
        logfile("compare", "reproducibility"),
    benchmark:
        benchmarkfile("compare", "reproducibility")
    priority: priority("compare")
    conda:
        CONDA_ENV
    shell:
        "python -m naspipe reproducibility {input.reference} {input.runs} --out {output} > {log} 2>&1"
