"""Step 7, search: score subnets with each trained supernet, search the best one, retrain it.

Per run (every system x stage count x seed, and the sequential reference): `search` runs the
evolutionary search over the run's final weights; `retrain` trains the winner alone
(`naspipe train --subnet`, csp on one stage, bitwise the same at any stage count) and
`search_accuracy` scores the retrained weights on that subnet: Table 3's search accuracy.
`curve` scores every checkpoint of each system's run at the largest stage count on a fixed
subnet sample: Figure 4's score against training time.
"""


def search_cfg(key):
    return config["search"][key]


def eval_args():
    """The `naspipe evaluate`/`search` scoring options shared by every rule here."""
    s = config["search"]
    return (
        f"--split {s['split']} --batches {s['batches']} --beam {s['beam']} --calib-batches {s['calib_batches']} "
        f"--threads {config['threads_per_stage']} --device {config['device']}"
    )


def search_args(wildcards):
    s = config["search"]
    metric = f" --metric {s['metric']}" if s.get("metric") else ""
    return (
        f"--method {s['method']} --population {s['population']} --generations {s['generations']} "
        f"--mutation-prob {s['mutation_prob']} --seed {s['seed']}{metric} {eval_args()}"
    )


def retrain_args(wildcards):
    sets = space_options(wildcards.space) + [
        f"threads={config['threads_per_stage']}",
        f"device={config['device']}",
        "progress=off",
    ]
    sets += [
        f"{key}={value}"
        for key, value in sorted(config["train_options"].items())
        if key not in ("checkpoint_every", "keep_checkpoints")
    ]
    return (
        f"--space {wildcards.space} --system csp --stages 1 --steps {search_cfg('retrain_steps')} "
        f"--seed {wildcards.seed} " + set_args(sets)
    )


def one_gpu():
    """Claim one GPU for a cuda job (nothing on cpu)."""
    return f"python -m naspipe with-gpus {1 if CUDA else 0} --"


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
        gpu=1 if CUDA else 0,
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
        gpu=1 if CUDA else 0,
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
        gpu=1 if CUDA else 0,
    params:
        args=eval_args(),
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
        gpu=1 if CUDA else 0,
    params:
        args=lambda wc: f"--sample {search_cfg('curve_subnets')} --seed {search_cfg('seed')} {eval_args()}",
        launcher=one_gpu(),
    shell:
        "{params.launcher} python -m naspipe evaluate --run {input.run} --every-checkpoint {params.args} "
        "--out {output} > {log} 2>&1"
