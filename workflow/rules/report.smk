"""Step 6, report: the paper's tables and figures from every run, comparison and profile."""


rule report:
    input:
        runs=all_runs(),
        reproducibility=reproducibility_files(),
        profiles=expand("results/profiles/{space}.csv", space=SPACES),
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
        sims=lambda wc, input: (
            f"--simulated {' '.join(input.sims)}" if input.sims else ""
        ),
    shell:
        "python -m naspipe report --runs {input.runs} --reproducibility {input.reproducibility} {params.profiles}"
        " {params.sims} --out results > {log} 2>&1"
