"""Step 3, partition: per space x stage count, the balanced stage boundaries training reads."""


rule partition:
    input:
        lambda wc: (
            [path("profile", space=wc.space)]
            if config["partition_costs"] == "profile"
            else []
        ),
    output:
        path("partition"),
    log:
        logfile("partition", "partition"),
    benchmark:
        benchmarkfile("partition", "partition")
    priority: priority("partition")
    conda:
        CONDA_ENV
    params:
        options=lambda wc: set_args(space_options(config, wc.space, False)),
        costs=lambda wc: W.partition_costs(wc.space),
    shell:
        "python -m naspipe partition --space {wildcards.space} {params.options} --stages {wildcards.stages}"
        " --costs {params.costs} --out {output} > {log} 2>&1"
