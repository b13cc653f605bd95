"""Step 2, profile: per space, the per-operation costs (paper Table 5) the partitions balance."""


rule profile:
    output:
        csv=report(
            "results/profiles/{space}.csv",
            caption="../report/profile.rst",
            category="Profiles",
        ),
        table="results/profiles/{space}.md",
    log:
        "results/logs/profile/{space}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **fixed_resources("profile", 1 if CUDA else 0),
    params:
        options=lambda wc: set_args(
            o.removeprefix("space.") for o in space_options(wc.space, with_data=False)
        ),
        repeats=config["profile"].get("repeats", 3),
        warmup=config["profile"].get("warmup", 1),
        device="cuda" if CUDA else "cpu",
        gpus=1 if CUDA else 0,
    shell:
        "python -m naspipe with-gpus {params.gpus} -- python -m naspipe profile --space {wildcards.space} {params.options}"
        " --device {params.device} --repeats {params.repeats} --warmup {params.warmup} --threads 1 --quiet"
        " --out {output.csv} --table {output.table} > {log} 2>&1"
