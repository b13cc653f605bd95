"""Step 6, report: the paper's tables and figures from every run, comparison and profile, opening with the
paper's claims checked against them (naspipe/claims/claims.yaml). The report's own list of files
(naspipe.report.sections) is the rule's output, so a new section needs no edit here.
"""


rule report:
    input:
        runs=W.runs(),
        reproducibility=W.reproducibility_files(),
        profiles=[path("profile", space=space) for space in SPACES],
        ablations=W.ablation_runs(),
        searches=W.search_dirs(),
        accuracies=W.accuracy_files(),
        curves=W.curve_files(),
        randoms=W.random_accuracy_files(),
        sims=W.sims(),
        # the simulator's calibration tables (calibrate.smk) that this workflow writes (when it simulates a paper
        # space); the claims that need one that it does not write say "not checkable here"
        tables=claims_tables(CALIBRATION_OUTPUTS),
    output:
        REPORT_OUTPUTS,
    log:
        logfile("report"),
    benchmark:
        benchmarkfile("report")
    priority: priority("report")
    conda:
        CONDA_ENV
    params:
        profiles=" ".join(
            f"--profile {space}={path('profile', space=space)}" for space in SPACES
        ),
        ablations=lambda wc, input: (
            " ".join(["--ablations", *input.ablations]) if input.ablations else ""
        ),
        searches=" ".join(f"--search {d}={d}.accuracy.csv" for d in W.search_dirs()),
        curves=" ".join(f"--curve {c}" for c in W.curve_files()),
        randoms=lambda wc, input: (
            f"--random-retrained {' '.join(input.randoms)}" if input.randoms else ""
        ),
        sims=lambda wc, input: (
            f"--simulated {' '.join(input.sims)}" if input.sims else ""
        ),
        tables=lambda wc, input: (
            f"--tables {' '.join(input.tables)}" if input.tables else ""
        ),
        out=lambda wc, output: Path(output[-1]).parent,  # report.md is the last output
    shell:
        "python -m naspipe report --runs {input.runs} --reproducibility {input.reproducibility} {params.profiles}"
        " {params.ablations} {params.searches} {params.curves} {params.randoms} {params.sims} {params.tables}"
        " --out {params.out}"
        " > {log} 2>&1"
