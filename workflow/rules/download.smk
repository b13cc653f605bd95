"""Step 0, fetch: a dataset with a `source` block -> data/NAME (naspipe fetch: URL, SHA-256, safe unpack).

Self-contained: it checks the `source` blocks before any job runs (one line naming the key), and
its output, the stamp data/NAME/.naspipe-fetched.json, is what `prepare` waits for
(naspipe.plan.datasets.prepare_input). A dataset without `source` is read from its paths as before.
Downloads run on the submitting host (localrules): cluster nodes often have no internet.
"""

import shlex

from naspipe.data.download import (
    destination,
    first_source_problem,
    source_args,
    stamp_path,
)
from naspipe.plan import checks
from naspipe.plan.datasets import PATH_KEYS

if (problem := first_source_problem(config["datasets"], PATH_KEYS)) is not None:
    checks.fail(checks.ConfigError(*problem))


localrules:
    fetch,


rule fetch:
    output:
        stamp_path("{dataset}"),
    log:
        logfile("fetch", "data"),
    benchmark:
        benchmarkfile("fetch", "data")
    priority: priority("fetch")
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
