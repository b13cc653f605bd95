"""Step 8, published: does this run reproduce the published results bit for bit? Every training run and every
untimed table against the digests the repository holds for this config (workflow/published/config.json, made
under numerics: portable; docs/numerics.md). published.json beside it is this run's own record: copied over the
repository's file, it publishes this run. The report, report.md, then opens with the verdict's sentence (the verdict
reads the report's tables, so only this rule can know it)."""

import json
import shlex
from pathlib import Path


rule published:
    input:
        REPORT_OUTPUTS,
        CALIBRATION_OUTPUTS,
        expected=PUBLISHED,
        report_md=results("report.md"),
    output:
        md=report(
            results("published.md"),
            caption="../report/published.rst",
            category="Published results",
        ),
        json=results("published.json"),
    log:
        logfile("published"),
    priority: priority("published")
    conda:
        CONDA_ENV
    params:
        config=shlex.quote(json.dumps(config, sort_keys=True)),
        results=lambda w, output: Path(output.json).parent,
    shell:
        "python -m naspipe published --results {params.results} --expected {input.expected} --config-json {params.config}"
        " --out {output.md} --json {output.json} --report {input.report_md} > {log} 2>&1"
