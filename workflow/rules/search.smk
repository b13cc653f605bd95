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
        run=path("run"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        directory(path("search")),
    log:
        logfile("search", "search"),
    benchmark:
        benchmarkfile("search", "search")
    priority: priority("search")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("search"),
    params:
        args=W.search_args,
        memo=W.search_memo,
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} python -m naspipe search --run {input.run} {params.args} {params.memo} --out {output} "
        "> {log} 2>&1"


rule retrain:
    input:
        search=path("search"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        directory(path("retrain")),
    log:
        logfile("retrain", "retrain"),
    benchmark:
        benchmarkfile("retrain", "retrain")
    priority: priority("retrain")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("retrain"),
    params:
        args=W.retrain_args,
        memo=W.retrain_memo,
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} {params.memo} --key-json {input.search}/best.json:choices,space,train_seed --out {output} "
        "-- python -m naspipe train {params.args} --subnet {input.search}/best.json --overwrite "
        "--out {output} > {log} 2>&1"


rule search_accuracy:
    input:
        run=path("retrain"),
        search=path("search"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        path("accuracy"),
    log:
        logfile("search_accuracy", "accuracy"),
    benchmark:
        benchmarkfile("search_accuracy", "accuracy")
    priority: priority("search_accuracy")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("search_accuracy"),
    params:
        args=W.eval_args,
        memo=W.accuracy_memo,
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} {params.memo} --key-file {input.run}/weights.sha256 --key-json "
        "{input.search}/best.json:choices --out {output} -- python -m naspipe evaluate --run {input.run} "
        "--subnets {input.search}/best.json {params.args} --out {output} > {log} 2>&1"


rule curve:
    input:
        run=path("run"),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        path("curve"),
    log:
        logfile("curve", "curve"),
    benchmark:
        benchmarkfile("curve", "curve")
    priority: priority("curve")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("curve"),
    params:
        args=W.curve_args,
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} python -m naspipe evaluate --run {input.run} --every-checkpoint {params.args} "
        "--out {output} > {log} 2>&1"


rule retrain_random:
    input:
        search=lambda wc: W.random_search_dir(wc.space, wc.seed),
        data=lambda wc: W.dataset_input(wc.space),
    output:
        directory(path("retrain_random")),
    log:
        logfile("retrain_random", "retrain_random"),
    benchmark:
        benchmarkfile("retrain_random", "retrain_random")
    priority: priority("retrain_random")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("retrain"),
    params:
        args=W.retrain_args,
        launcher=W.with_gpus(),
    shell:
        "{params.launcher} python -m naspipe train {params.args} --subnet {input.search}/random-{wildcards.k}.json "
        "--overwrite --out {output} > {log} 2>&1"


rule random_accuracy:
    input:
        runs=W.random_runs,
        data=lambda wc: W.dataset_input(wc.space),
    output:
        path("random_accuracy"),
    log:
        logfile("random_accuracy", "random_accuracy"),
    benchmark:
        benchmarkfile("random_accuracy", "random_accuracy")
    priority: priority("random_accuracy")
    conda:
        CONDA_ENV
    resources:
        **W.search_resources("search_accuracy"),
    params:
        args=W.eval_args,
        launcher=W.with_gpus(),
        first=lambda wc, input: input.runs[0],
        rest=lambda wc, input: " ".join(input.runs[1:]),
    shell:
        "{params.launcher} python -m naspipe evaluate --run {params.first} --own-subnet {params.rest} "
        "{params.args} --out {output} > {log} 2>&1"
