"""Step 5c, calibrate: the paper's testbed fitted to its own Table 2, and the paper's speedup and bubbles explained.

`naspipe calibrate` fits the testbed spec's per-task overhead and compute efficiency to Table 2's
Exec column (cross-validated NLP <-> CV); `naspipe attribute` applies the artifact's factors to
NASPipe/GPipe one at a time on that spec (plus samples/s vs tokens/s per system); `naspipe
bubble-models` sets the paper's bubble column against three pipeline models at 4 and 8 stages.
CPU-only jobs of seconds to a few minutes (small step counts; no config key of their own). They
are part of the default target when the `simulate` key simulates any of the paper's spaces
(config/config.yaml and config/paper.yaml do; the tiny CI config does not).
"""

FITTED_SPEC = path("fitted_spec", name="rtx2080ti-paper-fit")
CALIBRATION_OUTPUTS = calibration_outputs(SIMULATE)


rule calibrate:
    output:
        spec=FITTED_SPEC,
        table=path("table", name="calibration"),
    log:
        logfile("calibrate"),
    benchmark:
        benchmarkfile("calibrate")
    priority: priority("calibrate")
    conda:
        CONDA_ENV
    threads: 1
    shell:
        "python -m naspipe calibrate --steps 32 --spec-out {output.spec} --table {output.table} > {log} 2>&1"


rule attribute:
    input:
        spec=FITTED_SPEC,
    output:
        table=path("table", name="attribution"),
        accounting=path("table", name="accounting"),
    log:
        logfile("attribute"),
    benchmark:
        benchmarkfile("attribute")
    priority: priority("attribute")
    conda:
        CONDA_ENV
    threads: 1
    shell:
        "python -m naspipe attribute --fitted {input.spec} --steps 64 --out {output.table}"
        " --accounting-out {output.accounting} > {log} 2>&1"


rule bubble_models:
    input:
        spec=FITTED_SPEC,
    output:
        path("table", name="bubble_models"),
    log:
        logfile("bubble_models"),
    benchmark:
        benchmarkfile("bubble_models")
    priority: priority("bubble_models")
    conda:
        CONDA_ENV
    threads: 1
    shell:
        "python -m naspipe bubble-models --fitted {input.spec} --subnets 1000 --steps 64 --out {output}"
        " > {log} 2>&1"
