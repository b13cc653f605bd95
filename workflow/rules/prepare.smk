"""Step 1, prepare: every dataset of the config -> results/data/NAME (naspipe prepare ...)."""


rule synthesize:
    output:
        temp(directory("results/raw/{dataset}")),
    log:
        "results/logs/synthesize/{dataset}.log",
    conda:
        CONDA_ENV
    params:
        args=synthetic_args,
    shell:
        "python -m naspipe prepare {params.args} --out {output} > {log} 2>&1"


rule prepare:
    input:
        prepare_input,
    output:
        directory("results/data/{dataset}"),
    log:
        "results/logs/prepare/{dataset}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        slurm_partition=lambda wc: job_resources("prepare", "partition", ""),
        cpus_per_task=lambda wc: job_resources("prepare", "cpus", 1),
        mem_mb=lambda wc: job_resources("prepare", "mem_mb", 2000),
        runtime=lambda wc: job_resources("prepare", "runtime", 60),
    params:
        args=prepare_args,
    shell:
        "python -m naspipe prepare {params.args} --out {output} > {log} 2>&1"
