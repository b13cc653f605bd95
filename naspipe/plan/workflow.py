"""What the Snakemake workflow asks the package: its jobs, their commands and resources, checked up front.

The rule files only wire files to ``naspipe`` commands; every decision behind them (which runs exist,
which systems use the device cache or mirror layers, a training job's ``--set`` settings after the fit
check, the srun launch of a multi-node job, a rule's cluster resources) is made here, torch-free, once
per workflow by :meth:`Workflow.checked`, from the config that ``validate()`` filled with the schema's
defaults. A config problem stops the workflow before any job with one line naming the key.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from naspipe import systems
from naspipe.errors import UsageError
from naspipe.plan import datasets, paths
from naspipe.plan import jobs as plan_jobs
from naspipe.plan import resources as plan_resources
from naspipe.plan.checks import ConfigError, check_micro, check_references
from naspipe.plan.cost import estimate
from naspipe.plan.fit import Estimator, FitError, Fitted, fit_jobs
from naspipe.plan.launch import check_local, nodes

# the simulator's calibration tables (workflow/rules/calibrate.smk) that the claims read when present
CLAIMS_TABLES = ("calibration", "attribution", "bubble_models")


class Wildcards(Protocol):
    """The wildcards Snakemake passes to a rule's functions (only the names a rule's pattern has exist)."""

    space: str
    system: str
    stages: str
    seed: str
    variant: str  # (and ``replicas`` on a replicated layout's run: read with getattr, as only its rule has it)
    dataset: str
    hardware: str


def mirroring_systems() -> tuple[str, ...]:
    """Systems with per-subnet partitions (mirrored layers); their simulation also uses the device cache."""
    return systems.with_capability("mirroring")


def ablation_variants() -> dict[str, tuple[str, str]]:
    """Figure 6's variants: name -> (system, partition_mode); the report names a run by the same table."""
    return dict(plan_jobs.ABLATION_SYSTEMS)


PAPER_SPACES = frozenset({"nlp.c1", "nlp.c2", "nlp.c3", "cv.c1", "cv.c2", "cv.c3"})
CALIBRATION_TABLES = ("calibration", "attribution", "accounting", "bubble_models")


def calibration_outputs(simulate: dict[str, Any]) -> list[str]:
    """The calibration rules' outputs, wanted when the `simulate` key simulates one of the paper's spaces."""
    if not PAPER_SPACES & set(simulate.get("spaces", [])):
        return []
    return [paths.path("fitted_spec", name="rtx2080ti-paper-fit"),
            *(paths.path("table", name=name) for name in CALIBRATION_TABLES)]


def set_args(pairs: Iterable[str]) -> str:
    """Quoted ``--set K=V ...`` for a shell command, each key once: a later pair replaces an earlier one's value
    (``train_options`` override the workflow's own keys, config/README.md), since naspipe refuses a key given
    twice on its command line."""
    last = {pair.partition("=")[0].strip(): pair for pair in pairs}
    return " ".join(f"--set {shlex.quote(pair)}" for pair in last.values())


def space_options(config: dict[str, Any], space: str, with_data: bool = True) -> list[str]:
    """``space.KEY=VALUE`` settings of a space (its prepared dataset included when asked)."""
    options = dict(config["spaces"][space].get("options", {}))
    dataset = config["spaces"][space].get("dataset")
    if with_data and dataset is not None:
        options["data"] = paths.path("data", dataset=dataset)
    return [f"space.{key}={value}" for key, value in sorted(options.items())]


def search_settings(config: dict[str, Any], space: str) -> dict[str, Any]:
    """The ``search`` block with the space's own overrides (``spaces.SPACE.search``) applied."""
    return {**config["search"], **config["spaces"][space].get("search", {})}


def hardware(config: dict[str, Any]) -> str:
    """The hardware spec training jobs are checked against (``cpu-local`` on cpu unless named)."""
    name = config.get("hardware") or ("cpu-local" if config["device"] != "cuda" else "")
    if not name:
        raise ConfigError("hardware", "required with device: cuda (a spec in config/hardware/ or a YAML file)")
    return str(name)


def estimator(config: dict[str, Any], spec: str) -> Estimator:
    """A training job's estimate on ``spec``, partitioned as the workflow will (by profile costs or by config)."""
    by = "costs" if config.get("partition_costs", "profile") == "profile" else "config"
    cpu = config.get("device", "cpu") != "cuda"
    return lambda job: estimate(job.space, job.system, job.stages, job.steps, job.sets, spec, by, cpu=cpu)


def check_simulate(config: dict[str, Any]) -> None:
    """The ``simulate`` block's hardware loads and its largest stage count partitions every space."""
    sim = config.get("simulate")
    if not sim:
        return
    from naspipe.sim.hardware import load_hardware

    batch = sim.get("batch", "max")
    for spec in sim_hardware(sim):
        if isinstance(batch, dict) and spec not in batch:
            raise ConfigError("simulate.batch", f"no mode for hardware {spec!r} (the mapping names {', '.join(batch)})")
        try:
            hardware = load_hardware(spec)
        except UsageError as exc:
            raise ConfigError("simulate.hardware", str(exc)) from exc
        if sim.get("costs", "analytic") == "analytic":
            try:
                hardware.at_precision(str(sim.get("precision", "fp32"))).peak_flops  # noqa: B018 - the check
            except UsageError as exc:
                raise ConfigError("simulate.precision", str(exc)) from exc
        for space in sim["spaces"]:
            try:
                estimate(space, "csp", max(sim["stages"]), 1, (), spec)
            except UsageError as exc:
                raise ConfigError("simulate.stages", f"{space}: {exc}") from exc


def sim_batch(sim: dict[str, Any], hardware: str) -> str:
    """``simulate.batch`` for the spec whose results directory is ``hardware``: one mode for every spec, or a
    mapping from spec (as ``simulate.hardware`` names it) to mode."""
    batch = sim["batch"]
    if not isinstance(batch, dict):
        return str(batch)
    spec = next(spec for spec in sim_hardware(sim) if Path(spec).stem == hardware)
    return str(batch[spec])  # every spec has one: check_simulate refused the config otherwise


def sim_hardware(sim: dict[str, Any]) -> list[str]:
    """The specs ``simulate.hardware`` names (one, or a list: every run is simulated on each)."""
    specs = sim["hardware"]
    return [str(specs)] if isinstance(specs, str) else [str(s) for s in specs]


@dataclass(frozen=True)
class Workflow:
    """A checked workflow config, its fitted training jobs and where they launch (``local`` or ``slurm``)."""

    config: dict[str, Any]
    fitted_jobs: dict[str, Fitted]
    launch: str

    @classmethod
    def checked(cls, config: dict[str, Any], gpus: int | None) -> Workflow:
        """Check references, launch, simulate block and every job's fit; ``gpus``: ``--resources gpu=N``."""
        check_references(config)
        check_micro(config)
        spec = hardware(config)
        launch = config.get("launch") or ("slurm" if os.environ.get("SLURM_JOB_ID") else "local")
        cuda = config["device"] == "cuda"
        if launch == "local":
            try:
                check_local({job.processes for job in plan_jobs.all_training_jobs(config)}, gpus, cuda)
            except UsageError as exc:
                raise ConfigError("stages", str(exc)) from exc
        check_simulate(config)
        try:
            fitted = fit_jobs(plan_jobs.all_training_jobs(config), estimator(config, spec))
        except FitError as exc:
            raise ConfigError(f"hardware ({spec})" if exc.key == "hardware" else exc.key, str(exc)) from exc
        return cls(config, fitted, launch)

    @property
    def cuda(self) -> bool:
        return bool(self.config["device"] == "cuda")

    # -- targets ------------------------------------------------------------

    def runs(self) -> list[str]:
        return sorted(job.out for job in plan_jobs.train_jobs(self.config))

    def ablation_runs(self) -> list[str]:
        return [job.out for job in plan_jobs.ablation_jobs(self.config)]

    def reference_run(self, space: str, seed: int | str, system: str = plan_jobs.REFERENCE_SYSTEM) -> str:
        """The sequential one-stage run that the runs of ``system``, ``space`` and ``seed`` are compared with
        (with the same schedule settings: sequential-mb for csp-mb)."""
        return plan_jobs.reference_run(space, int(seed), system)

    def system_runs(self, space: str, system: str, seed: int | str) -> list[str]:
        """The runs of one system over every stage count (the reference itself left out)."""
        return plan_jobs.system_runs(self.config, space, system, int(seed))

    def reproducibility_files(self) -> list[str]:
        c = self.config
        return [paths.path("reproducibility", space=space, system=system, seed=seed)
                for space in sorted(c["spaces"]) for system in c["systems"] for seed in c["seeds"]
                if self.system_runs(space, system, seed)]

    def search_dirs(self) -> list[str]:
        """One search per training run (Table 3's search accuracy per system and stage count)."""
        return [paths.moved(run, "search") for run in self.runs()]

    def accuracy_files(self) -> list[str]:
        return [f"{d}.accuracy.csv" for d in self.search_dirs()]

    def random_search_dir(self, space: str, seed: int | str) -> str:
        """The search whose ``random-K.json`` are retrained as the winner's baseline: the reference run's
        (the random subnets depend on the search seed only, and the reference is trained first)."""
        return paths.moved(self.reference_run(space, seed), "search")

    def random_count(self, space: str) -> int:
        return int(search_settings(self.config, space).get("random_subnets", 0))

    def random_runs(self, w: Wildcards) -> list[str]:
        count = self.random_count(w.space)
        return [paths.path("retrain_random", space=w.space, seed=w.seed, k=k) for k in range(count)]

    def random_accuracy_files(self) -> list[str]:
        """Per space and seed, the scores of the retrained random subnets (none when ``random_subnets`` is 0)."""
        c = self.config
        return [paths.path("random_accuracy", space=space, seed=seed)
                for space in sorted(c["spaces"]) for seed in c["seeds"] if self.random_count(space)]

    def curve_files(self) -> list[str]:
        """Figure 4: per space, system and seed, the run at the largest stage count (and the reference)."""
        return [paths.moved(run, "curve", ".csv") for run in plan_jobs.curve_runs(self.config)]

    def sims(self) -> list[str]:
        """Every simulated run directory of the ``simulate`` config key (none without it)."""
        sim = self.config.get("simulate") or {}
        if not sim:
            return []
        runs = [paths.path("sim", hardware=Path(spec).stem, space=space, system=system, stages=stages)
                for spec in sim_hardware(sim) for space in sim["spaces"] for system in sim["systems"]
                for stages in sorted(sim["stages"])]
        return runs + [paths.path("sim_gpus", hardware=Path(spec).stem, space=space, system=system, gpus=gpus)
                       for spec in sim_hardware(sim) for space in sim["spaces"] for system in sim["systems"]
                       if system in plan_jobs.REPLICATED_SYSTEMS for gpus in sorted(sim.get("gpus") or [])]

    def dataset_input(self, space: str) -> list[str]:
        dataset = self.config["spaces"][space].get("dataset")
        return [] if dataset is None else [paths.path("data", dataset=dataset)]

    def partition_costs(self, space: str) -> str:
        """``--costs`` of ``naspipe partition``: the space's profile, or the config's cost source."""
        costs = str(self.config["partition_costs"])
        return paths.path("profile", space=space) if costs == "profile" else costs

    # -- commands -----------------------------------------------------------

    def fitted(self, rule: str, w: Wildcards) -> Fitted:
        """The training job of these wildcards as it will run, and its estimate."""
        if rule == "ablation":
            out = paths.path("ablation", space=w.space, variant=w.variant, stages=w.stages, seed=w.seed)
        else:
            out = plan_jobs.run_dir(w.space, w.system, int(w.stages), int(w.seed), _replicas(w))
        return self.fitted_jobs[out]

    def train_args(self, w: Wildcards, rule: str = "train") -> str:
        """Everything a run depends on: the fitted job's settings (the context manager on where needed)."""
        job = self.fitted(rule, w).job
        data = [o for o in space_options(self.config, w.space) if o.startswith("space.data=")]
        sets = [*data, f"partition_file={paths.path('partition', space=w.space, stages=w.stages)}", *job.sets]
        return (f"--space {w.space} --system {job.system} --stages {w.stages} --steps {job.steps} "
                f"--seed {w.seed} " + set_args(sets))

    def nodes(self, processes: int | str) -> int:
        """Nodes a training job spans: one GPU per process (stage, or stage replica), ``gpus_per_node`` per node (one
        on cpu or locally)."""
        if self.launch != "slurm":
            return 1
        return nodes(int(processes), plan_resources.gpus_per_node(self.config), self.cuda)

    def train_launcher(self, w: Wildcards) -> str:
        """Locally: claim the GPUs (none on cpu). Multi-node cuda under SLURM: srun, one task per stage.

        srun only runs inside a SLURM allocation; the job script runs on the allocation's first node,
        where srun starts task 0 (the rendezvous host).
        """
        processes = _processes(w)
        if self.nodes(processes) > 1:
            rendezvous = "MASTER_ADDR=$(hostname) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
            return f"export {rendezvous}; srun --ntasks={processes} --ntasks-per-gpu=1 --kill-on-bad-exit=1"
        return self.with_gpus(processes)

    def with_gpus(self, gpus: int = 1) -> str:
        """Claim ``gpus`` free GPUs for a cuda job's command (none on cpu)."""
        return f"python -m naspipe with-gpus {gpus if self.cuda else 0} --"

    def simulate_args(self, w: Wildcards) -> str:
        """``naspipe simulate``'s arguments: at ``w.stages`` stages, or (a ``gpus`` wildcard: ``simulate.gpus``) on
        that many GPUs in the layout it finds fastest."""
        sim = self.config["simulate"]
        system = systems.base_name(w.system)
        gpus = getattr(w, "gpus", None)
        layout = f"--gpus {gpus}" if gpus else f"--stages {w.stages}"
        args = [f"--space {shlex.quote(w.space)}", f"--system {system}", layout,
                f"--steps {sim['steps']}", f"--seed {sim['seed']}", f"--hardware {shlex.quote(self._spec(w.hardware))}",
                f"--costs {shlex.quote(str(sim['costs']))}", f"--batch {sim_batch(sim, w.hardware)}",
                f"--partition-by {sim['partition_by']}", f"--set optimizer.name={sim['optimizer']['name']}",
                f"--set optimizer.momentum={sim['optimizer']['momentum']}"]
        if sim.get("precision", "fp32") != "fp32":  # (fp32 is the default: the paper's commands stay as they were)
            args.append(f"--set precision={sim['precision']}")
        if system in mirroring_systems():
            if sim["cache"]:
                args.append("--set cache.enabled=true")  # NASPipe with its context manager, as in the paper
            args.append(f"--set partition_mode={sim['partition_mode']}")
        args += [f"--set {pair}" for pair in plan_jobs.system_sets(self.config, w.system, simulated=True)]
        return " ".join(args)

    def _spec(self, stem: str) -> str:
        """The ``simulate.hardware`` spec whose results directory is ``stem``."""
        return next(spec for spec in sim_hardware(self.config["simulate"]) if Path(spec).stem == stem)

    def synthetic_args(self, w: Wildcards) -> str:
        return datasets.synthetic_args(self.config["datasets"][w.dataset])

    def prepare_input(self, w: Wildcards) -> list[str]:
        return datasets.prepare_input(w.dataset, self.config["datasets"][w.dataset])

    def prepare_workers(self, w: Wildcards) -> int:
        cpus = plan_resources.cpus(self.config, "prepare")
        return datasets.prepare_workers(self.config["datasets"][w.dataset], cpus)

    def prepare_args(self, w: Wildcards) -> str:
        return datasets.prepare_args(w.dataset, self.config["datasets"][w.dataset], self.prepare_workers(w))

    def eval_args(self, w: Wildcards) -> str:
        """The ``naspipe evaluate``/``search`` scoring options shared by the search rules."""
        s = search_settings(self.config, w.space)
        return (f"--split {s['split']} --batches {s['batches']} --beam {s['beam']} --calib-batches "
                f"{s['calib_batches']} --threads {self.config['threads_per_stage']} --device {self.config['device']}")

    def search_args(self, w: Wildcards) -> str:
        s = search_settings(self.config, w.space)
        metric = f" --metric {s['metric']}" if s.get("metric") else ""
        randoms = f" --random-subnets {s['random_subnets']}" if s.get("random_subnets") else ""
        return (f"--method {s['method']} --population {s['population']} --generations {s['generations']} "
                f"--mutation-prob {s['mutation_prob']} --seed {s['seed']}{metric}{randoms} {self.eval_args(w)}")

    def retrain_args(self, w: Wildcards) -> str:
        c = self.config
        sets = [*space_options(c, w.space), f"threads={c['threads_per_stage']}", f"device={c['device']}",
                "progress=off", f"numerics={c.get('numerics', 'native')}"]
        sets += [f"{key}={value}" for key, value in sorted(c["train_options"].items())
                 if key not in ("checkpoint_every", "keep_checkpoints")]
        steps = search_settings(c, w.space)["retrain_steps"]
        return f"--space {w.space} --system csp --stages 1 --steps {steps} --seed {w.seed} {set_args(sets)}"

    def search_memo(self, w: Wildcards) -> str:
        """``--memo`` of a search: bitwise equal weights (sequential, csp at every D) are searched once."""
        return f"--memo {paths.memo_store('search')}"

    def retrain_memo(self, w: Wildcards) -> str:
        """``naspipe memo`` before a retrain: one retrain per (winner's choices, retrain options), copied to the
        other runs whose search found the same winner (naspipe.plan.memo)."""
        key = shlex.quote(f"args={self.retrain_args(w)}")
        return f"python -m naspipe memo --store {paths.memo_store('retrain')} --key {key}"

    def accuracy_memo(self, w: Wildcards) -> str:
        """``naspipe memo`` before a search accuracy: one score per (retrained weights, subnet, options)."""
        key = shlex.quote(f"args={self.eval_args(w)}")
        return f"python -m naspipe memo --store {paths.memo_store('accuracy')} --key {key}"

    def curve_args(self, w: Wildcards) -> str:
        s = search_settings(self.config, w.space)
        return f"--sample {s['curve_subnets']} --seed {s['seed']} {self.eval_args(w)}"

    # -- resources ----------------------------------------------------------

    def partition_resource(self, rule: str) -> dict[str, str]:
        """``slurm_partition`` only when the config names one: an empty one would hide a profile's default."""
        name = plan_resources.partition(self.config, rule)
        return {"slurm_partition": name} if name else {}

    def train_resources(self, rule: str) -> dict[str, Any]:
        """A training rule's resources: D GPUs, one task per stage over nodes under SLURM, predicted time."""
        c = self.config

        def multi(w: Wildcards) -> bool:
            return self.nodes(_processes(w)) > 1

        def estimate_of(w: Wildcards) -> Any:
            return self.fitted(rule, w).estimate

        def per_stage(w: Wildcards) -> int:  # the CPUs of one task: all its processes' threads on one node
            return 1 if multi(w) else _processes(w)

        return dict(
            gpu=lambda w: _processes(w) if self.cuda else 0,
            nodes=lambda w: self.nodes(_processes(w)),
            tasks=lambda w: _processes(w) if multi(w) else 1,
            tasks_per_gpu=lambda w: 1 if multi(w) else 0,
            # only a multi-node job is an MPI job: the jobstep plugin tests for the key (even ""), and without it a
            # one-node job runs in `srun -n1` like every other rule's, its GPUs and CPUs bound to that step
            mpi=lambda w: "srun" if multi(w) else None,
            **self.partition_resource(rule),
            cpus_per_task=lambda w: plan_resources.cpus(c, rule) * per_stage(w),
            mem_mb=lambda w: plan_resources.train_mem_mb(c, rule, _processes(w), estimate_of(w)),
            runtime=lambda w: plan_resources.train_minutes(c, rule, estimate_of(w)),
        )

    def train_threads(self, rule: str) -> Any:
        """A training rule's ``threads``: the cores its stage processes keep busy (plan_resources.local_threads)."""
        return lambda w: plan_resources.local_threads(self.config, int(w.stages), self.fitted(rule, w).estimate,
                                                      _replicas(w))

    def search_resources(self, rule: str) -> dict[str, Any]:
        """A search-phase rule's resources: one GPU, its threads, the supernet on the host, predicted time."""
        c = self.config

        def reference(w: Wildcards) -> Any:
            return self.fitted_jobs[plan_jobs.reference_run(w.space, int(w.seed))].estimate

        limit = plan_resources.settings(c, rule).get("runtime")
        return dict(
            gpu=1 if self.cuda else 0,
            **self.partition_resource(rule),
            cpus_per_task=plan_resources.cpus(c, rule),
            mem_mb=lambda w: plan_resources.search_mem_mb(c, rule, reference(w)),
            runtime=lambda w: limit or plan_resources.minutes(
                c, plan_resources.search_seconds(c, rule, w.space, reference(w))),
        )

    def fixed_resources(self, rule: str, gpus: int = 0) -> dict[str, Any]:
        """Resources without a prediction (synthesize, prepare, profile): the config values or the defaults."""
        return dict(gpu=gpus, **self.partition_resource(rule), cpus_per_task=plan_resources.cpus(self.config, rule),
                    mem_mb=plan_resources.fixed(self.config, rule, "mem_mb"),
                    runtime=plan_resources.fixed(self.config, rule, "runtime"))


def claims_tables(outputs: Iterable[str]) -> list[str]:
    """The calibration tables the claims read, those among the workflow's ``outputs``."""
    planned = set(outputs)
    return [t for t in (paths.path("table", name=name) for name in CLAIMS_TABLES) if t in planned]


def _replicas(w: Wildcards) -> int:
    """A training job's replicas per stage (a replicated layout's wildcard; 1 otherwise)."""
    return int(getattr(w, "replicas", 1) or 1)


def _processes(w: Wildcards) -> int:
    """A training job's processes (GPUs): stages x replicas."""
    return int(w.stages) * _replicas(w)
