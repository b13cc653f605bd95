"""Config checking and the helpers every rule file uses (paths, space options, resources)."""

import os
import shlex
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from naspipe.errors import UsageError
from naspipe.data.download import missing_path_message, stamp_path
from naspipe.plan import jobs as plan_jobs
from naspipe.plan import resources as plan_resources
from naspipe.plan.cost import estimate
from naspipe.plan.fit import FitError, fit_jobs
from naspipe.plan.launch import check_local, nodes

PATH_KEYS = (
    "src",
    "tgt",
    "valid_src",
    "valid_tgt",
    "test_src",
    "test_tgt",
    "path",
    "root",
)
SYNTHETIC = {"synthetic-translation": "translation", "synthetic-images": "images"}
DATA_FAMILY = {
    **SYNTHETIC,
    "wmt": "translation",
    "fairseq": "translation",
    "imagenet": "images",
}
SPACE_FAMILY = {"nlp": "translation", "cv": "images", "toy": None}
REFERENCE_SYSTEM = plan_jobs.REFERENCE_SYSTEM


def config_error(key, message):
    """Stop before any job with one line naming the config key (a traceback would bury it)."""
    print(f"naspipe workflow: config error: {key}: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_schema():
    """snakemake's validate decides; on failure, the best-matching error is restated as one line."""
    schema_file = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
    try:
        validate(config, schema_file)
    except WorkflowError:
        schema = yaml.safe_load(schema_file.read_text())
        cause = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(config)
        )
        if cause is None:
            raise
        path = [str(p) for p in cause.absolute_path]
        message = cause.message.replace("\n", " ")
        if cause.validator == "additionalProperties" and isinstance(
            cause.instance, dict
        ):
            known = cause.schema.get("properties", {})
            path.append(sorted(k for k in cause.instance if k not in known)[0])
            message = f"unknown key (allowed: {', '.join(known) or 'none'})"
        elif cause.validator == "required":
            missing = [k for k in cause.validator_value if k not in cause.instance]
            path.append(missing[0])
            message = "required key missing"
        config_error(".".join(path) or "(top level)", message)


def _check_references():
    for name, dataset in config["datasets"].items():
        # fetched by workflow/rules/download.smk, which checks it
        if "source" in dataset:
            continue
        for field in PATH_KEYS:
            if field in dataset and not Path(dataset[field]).exists():
                config_error(
                    f"datasets.{name}.{field}",
                    missing_path_message(dataset, field),
                )
    for name, space in config["spaces"].items():
        dataset = space.get("dataset")
        if dataset is None:
            continue
        if dataset not in config["datasets"]:
            config_error(
                f"spaces.{name}.dataset", f"{dataset!r} is not a key of datasets"
            )
        family = DATA_FAMILY[config["datasets"][dataset]["kind"]]
        if SPACE_FAMILY[name.split(".")[0]] != family:
            config_error(
                f"spaces.{name}.dataset",
                f"{dataset!r} is a {family} dataset, not for space {name}",
            )


def _check_duplicate_keys():
    """Snakemake's YAML loader keeps the last of two equal keys without a word: refuse a config file
    holding one (naspipe's own loader, naspipe/yamlio.py, does the same for its YAML).
    """
    for path in workflow.configfiles:
        nodes = [
            yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        ]
        while nodes:
            node = nodes.pop()
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key, value in node.value:
                    if key.value in seen:
                        where = f"{path} line {key.start_mark.line + 1}"
                        config_error(
                            key.value,
                            f"given twice in {where} (the last would win silently)",
                        )
                    seen.add(key.value)
                    nodes.append(value)
            elif isinstance(node, yaml.SequenceNode):
                nodes.extend(node.value)


_check_duplicate_keys()
_check_schema()
_check_references()

# Jobs run `python -m naspipe` from this checkout, in the active environment or the conda env.
shell.prefix(
    f"set -euo pipefail; export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    # a training job ends with this snakemake, even one killed by SIGKILL (naspipe/runtime/lifecycle.py)
    "export NASPIPE_DIE_WITH=$PPID; "
)
CONDA_ENV = "../../envs/naspipe.yaml"

SPACES = sorted(config["spaces"])
SYSTEMS = list(config["systems"])
STAGES = sorted(config["stages"])
SEEDS = list(config["seeds"])
CUDA = config["device"] == "cuda"


wildcard_constraints:
    space=r"[a-z]+(\.[a-z0-9]+)?",
    hardware=r"[A-Za-z0-9_.-]+",
    system=r"[a-z-]+",
    stages=r"\d+",
    seed=r"\d+",
    dataset=r"[A-Za-z0-9_.-]+",


def space_options(space, with_data=True):
    """`--set space.KEY=VALUE` arguments of a space (its prepared dataset included when asked)."""
    options = dict(config["spaces"][space].get("options", {}))
    dataset = config["spaces"][space].get("dataset")
    if with_data and dataset is not None:
        options["data"] = f"results/data/{dataset}"
    return [f"space.{key}={value}" for key, value in sorted(options.items())]


def set_args(pairs):
    """Quoted `--set K=V ...` for a shell command."""
    return " ".join(f"--set {shlex.quote(pair)}" for pair in pairs)


def dataset_input(space):
    dataset = config["spaces"][space].get("dataset")
    return [] if dataset is None else [f"results/data/{dataset}"]


reference_run = plan_jobs.reference_run


def system_runs(space, system, seed):
    """The runs of one system over every stage count (the reference itself left out)."""
    return plan_jobs.system_runs(config, space, system, seed)


def all_runs():
    return sorted(job.out for job in plan_jobs.train_jobs(config))


# -- fit and launch: every training job against the hardware, before any job runs ---------

HARDWARE = config.get("hardware") or ("cpu-local" if not CUDA else "")
if not HARDWARE:
    config_error(
        "hardware",
        "required with device: cuda (a spec in config/hardware/ or a YAML file)",
    )
PARTITION_BY = "costs" if config["partition_costs"] == "profile" else "config"


def _estimate(job):
    return estimate(
        job.space,
        job.system,
        job.stages,
        config["steps"],
        job.sets,
        HARDWARE,
        PARTITION_BY,
        cpu=not CUDA,
    )


def _check_plan():
    """The fit of every training job, the simulate block and the launch; one line on the first failure."""
    launch = config.get("launch") or (
        "slurm" if os.environ.get("SLURM_JOB_ID") else "local"
    )
    if launch == "local":
        gpus = getattr(workflow.global_resources.get("gpu"), "value", None)
        counts = {job.stages for job in plan_jobs.all_training_jobs(config)}
        try:
            check_local(counts, None if gpus is None else int(gpus), CUDA)
        except UsageError as exc:
            config_error("stages", str(exc))
    _check_simulate()
    try:
        fitted = fit_jobs(plan_jobs.all_training_jobs(config), _estimate)
    except FitError as exc:
        key = f"hardware ({HARDWARE})" if exc.key == "hardware" else exc.key
        config_error(key, str(exc))
    return fitted, launch


def _check_simulate():
    if not config.get("simulate"):
        return
    from naspipe.sim.hardware import load_hardware

    sim = config["simulate"]
    try:
        load_hardware(str(sim["hardware"]))
    except UsageError as exc:
        config_error("simulate.hardware", str(exc))
    for space in sim["spaces"]:
        try:
            estimate(space, "csp", max(sim["stages"]), 1, (), str(sim["hardware"]))
        except UsageError as exc:
            config_error("simulate.stages", f"{space}: {exc}")


FITTED, LAUNCH = _check_plan()


def reproducibility_files():
    return [
        f"results/reproducibility/{space}/{system}-seed{seed}.json"
        for space in SPACES
        for system in SYSTEMS
        for seed in SEEDS
        if system_runs(space, system, seed)
    ]


# -- simulate ------------------------------------------------------------

SIMULATE = config.get("simulate") or {}
CACHE_SYSTEMS = ("csp", "csp-no-scheduler", "csp-no-predictor")


def all_sims():
    """Every simulated run directory of the `simulate` config key (none without it)."""
    if not SIMULATE:
        return []
    hardware = Path(SIMULATE["hardware"]).stem
    return [
        f"results/sim/{hardware}/{space}/{system}/D{stages}"
        for space in SIMULATE["spaces"]
        for system in SIMULATE["systems"]
        for stages in sorted(SIMULATE["stages"])
    ]


def simulate_args(wildcards):
    args = [
        f"--space {shlex.quote(wildcards.space)}",
        f"--system {wildcards.system}",
        f"--stages {wildcards.stages}",
        f"--steps {SIMULATE['steps']}",
        f"--seed {SIMULATE.get('seed', 0)}",
        f"--hardware {shlex.quote(str(SIMULATE['hardware']))}",
        f"--costs {shlex.quote(str(SIMULATE.get('costs', 'analytic')))}",
        f"--batch {SIMULATE.get('batch', 'max')}",
        f"--partition-by {SIMULATE.get('partition_by', 'costs')}",
    ]
    optimizer = SIMULATE.get("optimizer") or {}
    args.append(f"--set optimizer.name={optimizer.get('name', 'sgd')}")
    args.append(f"--set optimizer.momentum={optimizer.get('momentum', 0.0)}")
    if SIMULATE.get("cache", True) and wildcards.system in CACHE_SYSTEMS:
        args.append(
            "--set cache.enabled=true"
        )  # NASPipe with its context manager, as in the paper
    if wildcards.system in CACHE_SYSTEMS:  # only the csp family mirrors layers
        args.append(f"--set partition_mode={SIMULATE.get('partition_mode', 'static')}")
    return " ".join(args)


def train_nodes(stages):
    """Nodes a training job spans: one GPU per stage, `gpus_per_node` per node (one on cpu or locally)."""
    if LAUNCH != "slurm":
        return 1
    return nodes(int(stages), plan_resources.gpus_per_node(config), CUDA)


def fitted(rule_name, wildcards):
    """The training job of these wildcards as it will run, and its estimate."""
    w = wildcards
    if rule_name == "ablation":
        out = f"results/ablations/{w.space}/{w.variant}/D{w.stages}-seed{w.seed}"
    else:
        out = plan_jobs.run_dir(w.space, w.system, int(w.stages), int(w.seed))
    return FITTED[out]


def partition_resource(rule_name):
    """`slurm_partition` only when the config names one: an empty one would hide a profile's default-resources."""
    name = plan_resources.partition(config, rule_name)
    return {"slurm_partition": name} if name else {}


def train_resources(rule_name):
    """A training rule's resources: D GPUs, one task per stage over nodes under SLURM, predicted time."""
    multi = lambda wc: train_nodes(wc.stages) > 1
    return dict(
        gpu=lambda wc: int(wc.stages) if CUDA else 0,
        nodes=lambda wc: train_nodes(wc.stages),
        tasks=lambda wc: int(wc.stages) if multi(wc) else 1,
        tasks_per_gpu=lambda wc: 1 if multi(wc) else 0,
        mpi=lambda wc: "srun" if multi(wc) else "",
        **partition_resource(rule_name),
        cpus_per_task=lambda wc: plan_resources.cpus(config, rule_name)
        * (1 if multi(wc) else int(wc.stages)),
        mem_mb=lambda wc: plan_resources.train_mem_mb(
            config, rule_name, int(wc.stages), fitted(rule_name, wc).estimate
        ),
        runtime=lambda wc: plan_resources.train_minutes(
            config, rule_name, fitted(rule_name, wc).estimate
        ),
    )


def search_resources(rule_name):
    """A search-phase rule's resources: one GPU, its threads, the supernet on the host, predicted time."""
    reference = lambda wc: FITTED[reference_run(wc.space, int(wc.seed))].estimate
    limit = plan_resources.settings(config, rule_name).get("runtime")
    return dict(
        gpu=1 if CUDA else 0,
        **partition_resource(rule_name),
        cpus_per_task=plan_resources.cpus(config, rule_name),
        mem_mb=lambda wc: plan_resources.search_mem_mb(
            config, rule_name, reference(wc)
        ),
        runtime=lambda wc: limit
        or plan_resources.minutes(
            config,
            plan_resources.search_seconds(config, rule_name, wc.space, reference(wc)),
        ),
    )


def fixed_resources(rule_name, gpus=0):
    """Resources without a prediction (synthesize, prepare, profile): the config values or the defaults."""
    return dict(
        gpu=gpus,
        **partition_resource(rule_name),
        cpus_per_task=plan_resources.cpus(config, rule_name),
        mem_mb=plan_resources.fixed(config, rule_name, "mem_mb"),
        runtime=plan_resources.fixed(config, rule_name, "runtime"),
    )


# -- prepare ------------------------------------------------------------


def synthetic_args(wildcards):
    d = config["datasets"][wildcards.dataset]
    if d["kind"] == "synthetic-translation":
        flags = {
            "pairs": d["pairs"],
            "valid-pairs": d.get("valid_pairs"),
            "test-pairs": d.get("test_pairs"),
        }
    else:
        flags = {
            "per-class": d["per_class"],
            "val-per-class": d.get("val_per_class"),
            "size": d.get("size"),
        }
    flags["seed"] = d.get("seed", 0)
    args = " ".join(f"--{k} {v}" for k, v in flags.items() if v is not None)
    return f"{d['kind']} {args}"


def prepare_input(wildcards):
    d = config["datasets"][wildcards.dataset]
    if d["kind"] in SYNTHETIC:
        return [f"results/raw/{wildcards.dataset}"]
    if "source" in d:  # the fetch rule's stamp (workflow/rules/download.smk)
        return [stamp_path(wildcards.dataset)]
    return [d[k] for k in PATH_KEYS if k in d]


def prepare_workers(wildcards):
    """Processes `naspipe prepare` runs: the reserved CPUs for an image set (its only parallel step)."""
    kind = config["datasets"][wildcards.dataset]["kind"]
    return (
        plan_resources.cpus(config, "prepare")
        if kind in ("imagenet", "synthetic-images")
        else 1
    )


def prepare_args(wildcards):
    """The `naspipe prepare` arguments for a dataset; synthetic sets go through the real-data path."""
    d = dict(config["datasets"][wildcards.dataset])
    raw = f"results/raw/{wildcards.dataset}"
    if d["kind"] == "synthetic-translation":
        d.update(kind="wmt", src=f"{raw}/train.src", tgt=f"{raw}/train.tgt")
        d.update(valid_src=f"{raw}/valid.src", valid_tgt=f"{raw}/valid.tgt")
    elif d["kind"] == "synthetic-images":
        d.update(
            kind="imagenet", root=raw, resize=d.get("size", 32), crop=d.get("size", 32)
        )
    names = {
        "wmt": (
            "src",
            "tgt",
            "valid_src",
            "valid_tgt",
            "test_src",
            "test_tgt",
            "vocab_size",
            "seed",
        ),
        "fairseq": ("path",),
        "imagenet": ("root", "resize", "crop", "limit_per_class"),
    }[d["kind"]]
    flags = {
        ("data" if k == "path" else k).replace("_", "-"): d[k] for k in names if k in d
    }
    if d["kind"] == "imagenet" and prepare_workers(wildcards) > 1:
        flags["workers"] = prepare_workers(
            wildcards
        )  # the CPUs the job reserves decode images
    return f"{d['kind']} " + " ".join(
        f"--{k} {shlex.quote(str(v))}" for k, v in flags.items()
    )


# -- partition ------------------------------------------------------------


def partition_costs(wildcards):
    costs = config["partition_costs"]
    return f"results/profiles/{wildcards.space}.csv" if costs == "profile" else costs


# -- train ------------------------------------------------------------


def train_args(wildcards, rule_name="train"):
    """Everything a run depends on, as params: changing any of them reruns exactly that run.

    The settings are the fitted job's (naspipe.plan): the context manager switched on where the
    resident layers would not fit the hardware."""
    w = wildcards
    job = fitted(rule_name, w).job
    data = [o for o in space_options(w.space) if o.startswith("space.data=")]
    sets = data + [
        f"partition_file=results/partitions/{w.space}/D{w.stages}.json",
        *job.sets,
    ]
    return (
        f"--space {w.space} --system {job.system} --stages {w.stages} --steps {config['steps']} --seed {w.seed} "
        + set_args(sets)
    )


def train_launcher(wildcards):
    """Local: claim the GPUs (none on cpu). Multi-node cuda under SLURM: srun, one task per stage.

    srun only ever runs inside a SLURM allocation (LAUNCH slurm); the job script runs on the
    allocation's first node, where srun starts task 0 (the rendezvous host).
    """
    stages = int(wildcards.stages)
    if train_nodes(stages) > 1:
        rendezvous = (
            "MASTER_ADDR=$(hostname) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
        )
        return f"export {rendezvous}; srun --ntasks={stages} --ntasks-per-gpu=1 --kill-on-bad-exit=1"
    return f"python -m naspipe with-gpus {stages if CUDA else 0} --"


# -- ablation ------------------------------------------------------------

ABLATION_SYSTEMS = plan_jobs.ABLATION_SYSTEMS


def ablation_runs():
    return [job.out for job in plan_jobs.ablation_jobs(config)]


def ablation_args(wildcards):
    return train_args(wildcards, "ablation")


# -- search ------------------------------------------------------------


def search_dirs():
    """One search per training run (Table 3's search accuracy per system and stage count)."""
    return [r.replace("results/runs/", "results/search/", 1) for r in all_runs()]


def search_settings(space):
    """The `search` block with the space's own overrides (`spaces.SPACE.search`) applied."""
    return {**config["search"], **config["spaces"][space].get("search", {})}


def eval_args(wildcards):
    """The `naspipe evaluate`/`search` scoring options shared by the search rules."""
    s = search_settings(wildcards.space)
    return (
        f"--split {s['split']} --batches {s['batches']} --beam {s['beam']} --calib-batches {s['calib_batches']} "
        f"--threads {config['threads_per_stage']} --device {config['device']}"
    )


def search_args(wildcards):
    s = search_settings(wildcards.space)
    metric = f" --metric {s['metric']}" if s.get("metric") else ""
    return (
        f"--method {s['method']} --population {s['population']} --generations {s['generations']} "
        f"--mutation-prob {s['mutation_prob']} --seed {s['seed']}{metric} {eval_args(wildcards)}"
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
    steps = search_settings(wildcards.space)["retrain_steps"]
    return (
        f"--space {wildcards.space} --system csp --stages 1 --steps {steps} --seed {wildcards.seed} "
        f"{set_args(sets)}"
    )


def curve_args(wildcards):
    s = search_settings(wildcards.space)
    return f"--sample {s['curve_subnets']} --seed {s['seed']} {eval_args(wildcards)}"


def one_gpu():
    """Claim one GPU for a cuda job (nothing on cpu)."""
    return f"python -m naspipe with-gpus {1 if CUDA else 0} --"


def accuracy_files():
    return [f"{d}.accuracy.csv" for d in search_dirs()]


def curve_files():
    """Figure 4: per space, system and seed, the run at the largest stage count (and the reference)."""
    return [
        r.replace("results/runs/", "results/curves/", 1) + ".csv"
        for r in plan_jobs.curve_runs(config)
    ]


# -- report ------------------------------------------------------------

TABLES = [
    "table1_spaces",
    "table2_systems",
    "table3_reproducibility",
    "table4_access_order",
    "table5_profile",
]
FIGURES = [
    "fig4_loss_vs_time",
    "fig4_search_score",
    "fig5_throughput",
    "fig6_ablation",
    "fig7_scaling",
    "fig_search_convergence",
]
# the simulated sections are always written (empty without the `simulate` config key)
TABLES += ["sim_table2_systems"]
FIGURES += ["sim_fig5_throughput", "sim_fig7_scaling"]


def report_file(path, caption, category):
    """A report()-flagged output; the caption path is absolute because `all` (in the Snakefile) reuses it."""
    captions = Path(workflow.basedir) / "workflow" / "report"
    return report(path, caption=str(captions / f"{caption}.rst"), category=category)


REPORT_OUTPUTS = (
    [report_file(f"results/tables/{t}.csv", t, "Tables") for t in TABLES]
    + [f"results/tables/{t}.md" for t in TABLES]
    + [report_file(f"results/figures/{f}.png", f, "Figures") for f in FIGURES]
    + ["results/report.md"]
)
