"""Step 1, prepare: every dataset of the config -> results/data/NAME (naspipe prepare ...)."""


rule synthesize:
    output:
        temp(directory("results/raw/{dataset}")),
    log:
        "results/logs/synthesize/{dataset}.log",
    conda:
        CONDA_ENV
    resources:
        **fixed_resources("synthesize"),
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
    threads: lambda wc: prepare_workers(wc)
    resources:
        **fixed_resources("prepare"),
    params:
        args=prepare_args,
    shell:
        "python -m naspipe prepare {params.args} --out {output} > {log} 2>&1"
