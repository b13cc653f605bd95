"""Step 1, prepare: every dataset of the config -> its prepared directory (naspipe prepare ...)."""


rule synthesize:
    output:
        temp(directory(path("raw"))),
    log:
        logfile("synthesize", "raw"),
    benchmark:
        benchmarkfile("synthesize", "raw")
    priority: priority("synthesize")
    conda:
        CONDA_ENV
    resources:
        **W.fixed_resources("synthesize"),
    params:
        args=W.synthetic_args,
    shell:
        "python -m naspipe prepare {params.args} --out {output} > {log} 2>&1"


rule prepare:
    input:
        W.prepare_input,
    output:
        directory(path("data")),
    log:
        logfile("prepare", "data"),
    benchmark:
        benchmarkfile("prepare", "data")
    priority: priority("prepare")
    conda:
        CONDA_ENV
    threads: W.prepare_workers
    resources:
        **W.fixed_resources("prepare"),
    params:
        args=W.prepare_args,
    shell:
        "python -m naspipe prepare {params.args} --out {output} > {log} 2>&1"
