"""Step 0, fetch: a dataset with a `source` block -> data/NAME (naspipe fetch: URL, SHA-256, safe unpack).

Self-contained: it checks the `source` blocks before any job runs (one line naming the key), and
its output, the stamp data/NAME/.naspipe-fetched.json, is what `prepare` waits for (common.smk's
prepare_input). A dataset without `source` is read from its paths as before. Downloads run on the
submitting host (localrules): cluster nodes often have no internet.
"""

from naspipe.data.download import source_args, source_problem, stamp_path, destination


def _check_sources():
    for name, dataset in config["datasets"].items():
        if "source" in dataset:
            problem = source_problem(name, dataset, PATH_KEYS)
            if problem is not None:
                config_error(*problem)


_check_sources()


localrules:
    fetch,


rule fetch:
    output:
        stamp_path("{dataset}"),
    log:
        "results/logs/fetch/{dataset}.log",
    conda:
        CONDA_ENV
    params:
        out=lambda wc: destination(wc.dataset),
        sources=lambda wc: " ".join(
            f"--source {shlex.quote(block)}"
            for block in source_args(config["datasets"][wc.dataset])
        ),
    shell:
        "python -m naspipe fetch --out {params.out} {params.sources} 2>&1 | tee {log}"
