"""Step 4b, ablation (paper Figure 6): NASPipe with the device cache, the predictor and per-subnet
partitions (mirroring), and with one mechanism switched off at a time: `no-predictor` (the cache
fetches on demand), `no-mirroring` (one static partition), `no-scheduler` (one subnet in flight). Every variant runs with the same cache budget, so the bars differ
only by the mechanism. Configured by the `ablation` key (config/README.md); no stage counts: no runs.
"""


rule ablation:
    input:
        partition=path("partition"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        directory(path("ablation")),
    log:
        logfile("ablation", "ablation"),
    benchmark:
        benchmarkfile("ablation", "ablation")
    wildcard_constraints:
        variant="|".join(ablation_variants()),
    priority: priority("ablation")
    conda:
        CONDA_ENV
    threads: W.train_threads("ablation")
    resources:
        **W.train_resources("ablation"),
    params:
        args=lambda wc: W.train_args(wc, "ablation"),
        launcher=W.train_launcher,
    shell:
        "{params.launcher} python -m naspipe train {params.args} --overwrite --out {output} > {log} 2>&1"
