"""Step 5b, simulate: the paper's evaluation in simulated time on a hardware spec (`naspipe simulate`).

Config key `simulate` (optional; no jobs without it): every (space, system, stage count) of it
is simulated on `simulate.hardware` with `simulate.costs` at `simulate.batch` (`max`: each
system at the largest batch it fits, as in the paper's Table 2). Spaces are preset names and
need no dataset: the simulator sizes layers from their shapes. A CPU-only job of seconds.
`simulate.gpus` adds csp-mb on each of those GPU counts, in the layout (stages x replicas) that
`naspipe simulate --gpus G` finds fastest (paths.py's `sim_gpus`).
"""


rule simulate:
    output:
        directory(path("sim")),
    log:
        logfile("simulate", "sim"),
    benchmark:
        benchmarkfile("simulate", "sim")
    priority: priority("simulate")
    conda:
        CONDA_ENV
    threads: 1
    params:
        args=W.simulate_args,
    shell:
        "python -m naspipe simulate {params.args} --overwrite --out {output} > {log} 2>&1"


use rule simulate as simulate_gpus with:
    output:
        directory(path("sim_gpus")),
    log:
        logfile("simulate", "sim_gpus"),
    benchmark:
        benchmarkfile("simulate", "sim_gpus")
