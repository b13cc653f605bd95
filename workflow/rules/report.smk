"""Step 6, report: the paper's tables and figures from every run, comparison and profile."""


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
    shell:
        "python -m naspipe report --runs {input.runs} --reproducibility {input.reproducibility} {params.profiles}"
        " {params.ablations} {params.searches} {params.curves} {params.sims} --out results > {log} 2>&1"
