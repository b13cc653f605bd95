"""Step 7, search: score subnets with each trained supernet, search the best one, retrain it.

Per run (every system x stage count x seed, and the sequential reference): `search` runs the
evolutionary search over the run's final weights; `retrain` trains the winner alone
(`naspipe train --subnet`, csp on one stage, bitwise the same at any stage count) and
`search_accuracy` scores the retrained weights on that subnet: Table 3's search accuracy.
`curve` scores every checkpoint of each system's run at the largest stage count on a fixed
subnet sample: Figure 4's score against training time. Each is a one-GPU job running
`threads_per_stage` threads; its resources come from naspipe.plan.resources (config `resources`).
"""


rule search:
    input:
        run="results/runs/{space}/{system}/D{stages}-seed{seed}",
        data=lambda wc: dataset_input(wc.space),
    output:
        directory("results/search/{space}/{system}/D{stages}-seed{seed}"),
    log:
        "results/logs/search/{space}/{system}/D{stages}-seed{seed}.log",
    conda:
        CONDA_ENV
    resources:
        **search_resources("search"),
    params:
        args=search_args,
        launcher=one_gpu(),
    shell:
        "{params.launcher} python -m naspipe search --run {input.run} {params.args} --out {output} > {log} 2>&1"


rule retrain:
    input:
        search="results/search/{space}/{system}/D{stages}-seed{seed}",
        data=lambda wc: dataset_input(wc.space),
    output:
        directory("results/retrain/{space}/{system}/D{stages}-seed{seed}"),
    log:
        "results/logs/retrain/{space}/{system}/D{stages}-seed{seed}.log",
    conda:
        CONDA_ENV
    resources:
        **search_resources("retrain"),
    params:
        args=retrain_args,
        launcher=one_gpu(),
    shell:
        "{params.launcher} python -m naspipe train {params.args} --subnet {input.search}/best.json --overwrite "
        "--out {output} > {log} 2>&1"


rule search_accuracy:
    input:
        run="results/retrain/{space}/{system}/D{stages}-seed{seed}",
        search="results/search/{space}/{system}/D{stages}-seed{seed}",
        data=lambda wc: dataset_input(wc.space),
    output:
        "results/search/{space}/{system}/D{stages}-seed{seed}.accuracy.csv",
    log:
        "results/logs/search_accuracy/{space}/{system}/D{stages}-seed{seed}.log",
    conda:
        CONDA_ENV
    resources:
        **search_resources("search_accuracy"),
    params:
        args=eval_args,
        launcher=one_gpu(),
    shell:
        "{params.launcher} python -m naspipe evaluate --run {input.run} --subnets {input.search}/best.json "
        "{params.args} --out {output} > {log} 2>&1"


rule curve:
    input:
        run="results/runs/{space}/{system}/D{stages}-seed{seed}",
        data=lambda wc: dataset_input(wc.space),
    output:
        "results/curves/{space}/{system}/D{stages}-seed{seed}.csv",
    log:
        "results/logs/curve/{space}/{system}/D{stages}-seed{seed}.log",
    conda:
        CONDA_ENV
    resources:
        **search_resources("curve"),
    params:
        args=curve_args,
        launcher=one_gpu(),
    shell:
        "{params.launcher} python -m naspipe evaluate --run {input.run} --every-checkpoint {params.args} "
        "--out {output} > {log} 2>&1"
