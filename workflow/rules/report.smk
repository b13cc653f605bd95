"""Step 6, report: the paper's tables and figures from every run, comparison and profile, opening with the
paper's claims checked against them (naspipe/claims/claims.yaml)."""

# The simulator's calibration, attribution and bubble-model tables (issue 17): the claims read each one that a
# rule of this workflow writes; without it the claims that need it say "not checkable here".
CLAIMS_TABLES = [
    "results/tables/calibration.csv",
    "results/tables/attribution.csv",
    "results/tables/bubble_models.csv",
]


# the claims first (their own category sorts first in the HTML report); Figure 6's numbers as CSV for its claims
REPORT_OUTPUTS = [
    report_file("results/tables/claims.csv", "claims", "Claims"),
    "results/tables/claims.md",
    "results/tables/fig6_ablation.csv",
] + REPORT_OUTPUTS


rule report:
    input:
        runs=all_runs(),
        reproducibility=reproducibility_files(),
        profiles=expand("results/profiles/{space}.csv", space=SPACES),
        ablations=ablation_runs(),
        searches=search_dirs(),
        accuracies=accuracy_files(),
        curves=curve_files(),
        sims=all_sims(),
        tables=lambda wc: [
            t
            for t in CLAIMS_TABLES
            if t in {str(f) for r in workflow.rules for f in r.output}
        ],
    output:
        REPORT_OUTPUTS,
    log:
        "results/logs/report.log",
    conda:
        CONDA_ENV
    params:
        profiles=" ".join(
            f"--profile {space}=results/profiles/{space}.csv" for space in SPACES
        ),
        ablations=lambda wc, input: (
            " ".join(["--ablations", *input.ablations]) if input.ablations else ""
        ),
        searches=" ".join(f"--search {d}={d}.accuracy.csv" for d in search_dirs()),
        curves=" ".join(f"--curve {c}" for c in curve_files()),
        sims=lambda wc, input: (
            f"--simulated {' '.join(input.sims)}" if input.sims else ""
        ),
        tables=lambda wc, input: (
            f"--tables {' '.join(input.tables)}" if input.tables else ""
        ),
    shell:
        "python -m naspipe report --runs {input.runs} --reproducibility {input.reproducibility} {params.profiles}"
        " {params.ablations} {params.searches} {params.curves} {params.sims} {params.tables} --out results"
        " > {log} 2>&1"
