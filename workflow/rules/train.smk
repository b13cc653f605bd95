"""Step 4, train: every system x space x stage count x seed (plus the sequential one-stage reference).

A cuda job declares `gpu=D` (Snakemake caps the total with `--resources gpu=N`) and claims D free
devices itself (`naspipe with-gpus`), so two concurrent jobs never share a GPU. A cpu job declares
the cores its D stage processes keep busy (about one for the tiny spaces: they take turns; see
naspipe.plan.resources.local_threads) so `--cores` bounds it; its stage processes use
`threads_per_stage` threads each (fixed, because results depend on it). A cuda job with more stages than `gpus_per_node` runs
under `srun`, one task per stage over several nodes, only under SLURM (docs/cluster.md). A replicated layout's run
(config `layouts`, D stages x R replicas) is the same job with D x R processes: `gpu=D*R`, D x R srun tasks.
Resources and time limits come from naspipe.plan (the simulator's prediction x a safety factor).
"""


rule train:
    input:
        partition=path("partition"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        directory(path("run")),
    log:
        logfile("train", "run"),
    benchmark:
        benchmarkfile("train", "run")
    priority: priority("train")
    conda:
        CONDA_ENV
    threads: W.train_threads("train")
    resources:
        **W.train_resources("train"),
    params:
        args=W.train_args,
        launcher=W.train_launcher,
    shell:
        "{params.launcher} python -m naspipe train {params.args} --overwrite --out {output} > {log} 2>&1"


use rule train as train_replicated with:
    output:
        directory(path("replicated_run")),
    log:
        logfile("train", "replicated_run"),
    benchmark:
        benchmarkfile("train", "replicated_run")
