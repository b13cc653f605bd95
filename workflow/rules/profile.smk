"""Step 2, profile: per space, the per-operation costs (paper Table 5) the partitions balance."""


rule profile:
    output:
        csv=report(
            path("profile"),
            caption="../report/profile.rst",
            category="Profiles",
        ),
        table=path("profile_table"),
    log:
        logfile("profile", "profile"),
    benchmark:
        benchmarkfile("profile", "profile")
    priority: priority("profile")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **W.fixed_resources("profile", 1 if CUDA else 0),
    params:
        options=lambda wc: set_args(
            o.removeprefix("space.") for o in space_options(config, wc.space, False)
        ),
        repeats=config["profile"]["repeats"],
        warmup=config["profile"]["warmup"],
        device="cuda" if CUDA else "cpu",
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} python -m naspipe profile --space {wildcards.space} {params.options}"
        " --device {params.device} --repeats {params.repeats} --warmup {params.warmup} --threads 1 --quiet"
        " --out {output.csv} --table {output.table} > {log} 2>&1"
