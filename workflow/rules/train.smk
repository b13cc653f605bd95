"""Step 4, train: every system x space x stage count x seed (plus the sequential one-stage reference).

A cuda job declares `gpu=D` (Snakemake caps the total with `--resources gpu=N`) and claims D free
devices itself (`naspipe with-gpus`), so two concurrent jobs never share a GPU. A cpu job declares
D threads so `--cores` bounds it; its stage processes use `threads_per_stage` threads each
(fixed, because results depend on it). A cuda job with more stages than `gpus_per_node` runs
under `srun`, one task per stage over several nodes (see config/README.md).
"""


rule train:
    input:
        partition="results/partitions/{space}/D{stages}.json",
        data=lambda wc: dataset_input(wc.space),
    output:
        directory("results/runs/{space}/{system}/D{stages}-seed{seed}"),
    log:
        "results/logs/train/{space}/{system}/D{stages}-seed{seed}.log",
    conda:
        CONDA_ENV
    threads: lambda wc: int(wc.stages)
    resources:
        gpu=lambda wc: int(wc.stages) if CUDA else 0,
        nodes=lambda wc: train_nodes(wc.stages),
        tasks=lambda wc: int(wc.stages) if train_nodes(wc.stages) > 1 else 1,
        tasks_per_gpu=lambda wc: 1 if train_nodes(wc.stages) > 1 else 0,
        mpi=lambda wc: "srun" if train_nodes(wc.stages) > 1 else "",
        slurm_partition=lambda wc: job_resources("train", "partition", ""),
        cpus_per_task=lambda wc: job_resources("train", "cpus_per_stage", 1)
        * (1 if train_nodes(wc.stages) > 1 else int(wc.stages)),
        mem_mb=lambda wc: train_mem_mb(wc.stages),
        runtime=lambda wc: job_resources("train", "runtime", 120),
    params:
        args=train_args,
        launcher=train_launcher,
    shell:
        "{params.launcher} python -m naspipe train {params.args} --overwrite --out {output} > {log} 2>&1"
