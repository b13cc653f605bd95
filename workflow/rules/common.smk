"""Config checking and the helpers every rule file uses (paths, space options, resources)."""

import math
from types import SimpleNamespace
import shlex
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

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
REFERENCE_SYSTEM = (
    "sequential"  # every comparison is against sequential training on one stage
)


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
        for field in PATH_KEYS:
            if field in dataset and not Path(dataset[field]).exists():
                config_error(
                    f"datasets.{name}.{field}",
                    f"path {dataset[field]!r} does not exist",
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


def run_dir(space, system, stages, seed):
    return f"results/runs/{space}/{system}/D{stages}-seed{seed}"


def reference_run(space, seed):
    return run_dir(space, REFERENCE_SYSTEM, 1, seed)


def system_runs(space, system, seed):
    """The runs of one system over every stage count (the reference itself left out)."""
    runs = [run_dir(space, system, d, seed) for d in STAGES]
    return [r for r in runs if r != reference_run(space, seed)]


def all_runs():
    runs = {reference_run(space, seed) for space in SPACES for seed in SEEDS}
    runs |= {
        r
        for space in SPACES
        for system in SYSTEMS
        for seed in SEEDS
        for r in system_runs(space, system, seed)
    }
    return sorted(runs)


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


def job_resources(rule_name, key, fallback):
    return config.get("resources", {}).get(rule_name, {}).get(key, fallback)


def train_mem_mb(stages):
    """Memory per node (`--mem` is per node): one share per stage process on the node."""
    per_node = (
        min(int(stages), job_resources("train", "gpus_per_node", 8))
        if CUDA
        else int(stages)
    )
    return job_resources("train", "mem_mb_per_stage", 2000) * per_node


def train_nodes(stages):
    """Nodes a cuda training job spans: one GPU per stage, `gpus_per_node` per node."""
    if not CUDA:
        return 1
    return math.ceil(int(stages) / job_resources("train", "gpus_per_node", 8))


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
    return [d[k] for k in PATH_KEYS if k in d]


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
    return f"{d['kind']} " + " ".join(
        f"--{k} {shlex.quote(str(v))}" for k, v in flags.items()
    )


# -- partition ------------------------------------------------------------


def partition_costs(wildcards):
    costs = config["partition_costs"]
    return f"results/profiles/{wildcards.space}.csv" if costs == "profile" else costs


# -- train ------------------------------------------------------------


def train_args(wildcards):
    """Everything a run depends on, as params: changing any of them reruns exactly that run."""
    w = wildcards
    sets = space_options(w.space) + [
        f"partition_file=results/partitions/{w.space}/D{w.stages}.json",
        f"threads={config['threads_per_stage']}",
        f"device={config['device']}",
        "progress=off",
    ]
    every = config["search"]["checkpoint_every"]
    if every:  # Figure 4's score-over-time curves evaluate these checkpoints
        sets += [
            f"checkpoint_every={every}",
            f"keep_checkpoints={math.ceil(config['steps'] / every) + 1}",
        ]
    sets += [f"{key}={value}" for key, value in sorted(config["train_options"].items())]
    return (
        f"--space {w.space} --system {w.system} --stages {w.stages} --steps {config['steps']} --seed {w.seed} "
        + set_args(sets)
    )


def train_launcher(wildcards):
    """Local: claim the GPUs (none on cpu). Multi-node cuda: srun, one task per stage (SLURM assigns devices).

    The job script runs on the allocation's first node, where srun starts task 0 (the rendezvous host).
    """
    stages = int(wildcards.stages)
    if train_nodes(stages) > 1:
        rendezvous = (
            "MASTER_ADDR=$(hostname) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
        )
        return f"export {rendezvous}; srun --ntasks={stages} --ntasks-per-gpu=1 --kill-on-bad-exit=1"
    return f"python -m naspipe with-gpus {stages if CUDA else 0} --"


# -- ablation ------------------------------------------------------------

ABLATION = config.get("ablation", {})
ABLATION_SYSTEMS = {  # variant -> (system, partition_mode)
    "naspipe": ("csp", "per-subnet"),
    "no-predictor": ("csp-no-predictor", "per-subnet"),
    "no-mirroring": ("csp", "static"),
    "no-scheduler": ("csp-no-scheduler", "per-subnet"),
}


def ablation_runs():
    return [
        f"results/ablations/{space}/{variant}/D{stages}-seed{seed}"
        for space in SPACES
        for variant in ABLATION.get("variants", list(ABLATION_SYSTEMS))
        for stages in ABLATION.get("stages", [])
        for seed in SEEDS
    ]


def ablation_args(wildcards):
    w = wildcards
    system, mode = ABLATION_SYSTEMS[w.variant]
    sets = [
        f"partition_mode={mode}",
        "cache.enabled=true",
        f"cache.budget={ABLATION.get('cache_budget', '3x')}",
        f"cache.horizon={ABLATION.get('horizon', 8)}",
    ]
    run = SimpleNamespace(space=w.space, system=system, stages=w.stages, seed=w.seed)
    return f"{train_args(run)} {set_args(sets)}"


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
    runs = {reference_run(space, seed) for space in SPACES for seed in SEEDS}
    runs |= {
        system_runs(space, system, seed)[-1]
        for space in SPACES
        for system in SYSTEMS
        for seed in SEEDS
        if system_runs(space, system, seed)
    }
    return sorted(
        r.replace("results/runs/", "results/curves/", 1) + ".csv" for r in runs
    )


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
