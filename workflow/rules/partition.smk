"""Step 3, partition: per space x stage count, the balanced stage boundaries training reads."""


rule partition:
    input:
        lambda wc: (
            [partition_costs(wc)] if config["partition_costs"] == "profile" else []
        ),
    output:
        "results/partitions/{space}/D{stages}.json",
    log:
        "results/logs/partition/{space}/D{stages}.log",
    conda:
        CONDA_ENV
    params:
        options=lambda wc: set_args(space_options(wc.space, with_data=False)),
        costs=partition_costs,
    shell:
        "python -m naspipe partition --space {wildcards.space} {params.options} --stages {wildcards.stages}"
        " --costs {params.costs} --out {output} > {log} 2>&1"
