"""The workflow on a real SLURM cluster started here (tests/slurm_cluster.py), against a local run of the same config.

Marked ``cluster`` and left out of the default suite (``make test-cluster`` runs it): it installs Debian's
SLURM packages when missing and runs the CI configuration twice, locally and through profiles/slurm. It
skips with one line where it cannot run (not root, no apt-get). What it shows and where it stops:
docs/cluster.md, "Checking the profile on a real cluster".
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from naspipe.space.registry import make_shape
from tests.slurm_cluster import ACCOUNT, GPUS_PER_NODE, NODES, Cluster, Unavailable, install_packages, running_cluster
from tests.test_workflow import ROOT, TEST_CONFIG, snakemake, write_config

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(3 * 3600)]  # two whole workflow runs on 2 cores

PROFILE = str(ROOT / "profiles" / "slurm")
# the plugin polls every 40 s by default, growing by 10 s while nothing finishes: poll sooner on a toy run
POLL = ("--slurm-init-seconds-before-status-checks", "2")
# Columns that are measurements of time (or derived from it), per table; every other cell must be byte-equal.
TIMING = {
    "table2_systems": {"throughput_samples_s", "bubble_ratio", "exec_s", "throughput_vs_gpipe"},
    "table5_profile": {"fwd_ms", "bwd_ms", "copy_ms", "copy_over_compute"},
    "run_summary": {"measured", "shows", "why"},
}
# ... and where only some rows are timings: the run summary's throughput and CPU lines (the other lines are
# losses, spreads and search scores, which must agree)
TIMING_ROWS = {"run_summary": ("phenomenon", {"csp faster than gpipe", "cores kept busy"})}
RUN_FILES = ("losses.csv", "layer_hashes.csv", "weights.sha256")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("slurm")
    with ExitStack() as stack:
        try:
            install_packages(root / "apt.log")
            started = stack.enter_context(running_cluster(root))
        except Unavailable as exc:
            pytest.skip(str(exc))
        yield started


def on_cluster(cluster: Cluster, work: Path, *args: str, timeout: float = 5400):
    """snakemake through profiles/slurm against ``cluster`` (its SLURM_CONF), charged to the test account."""
    return snakemake(*args, "--profile", PROFILE, "--directory", str(work), *POLL, "--default-resources",
                     f"slurm_account={ACCOUNT}", env={"SLURM_CONF": cluster.env["SLURM_CONF"]}, timeout=timeout)


def run_dirs(results: Path) -> dict[str, Path]:
    """Every finished run under ``results`` (training, retrains), by its path relative to ``results``; not the
    memo stores' copies (``.memo``: which run's result is stored first depends on which finished first)."""
    found = (d.parent.relative_to(results) for d in results.rglob("outputs.sha256"))
    return {str(r): results / r for r in found if not any(part.startswith(".") for part in r.parts)}


def frozen_layers(run: Path) -> set[str]:
    """The run's layers that nobody writes (shared layers under ``frozen``), from its metrics.json's config."""
    config = json.loads((run / "metrics.json").read_text())["config"]
    options = {k: v for k, v in config["space"].items() if k != "name"}
    structure = make_shape(config["space"]["name"], options, config["shared_policy"]).structure
    return {str(layer) for layer in range(structure.num_layers) if not structure.is_trainable(layer)}


def access_rows(run: Path, skip: set[str]) -> dict[str, str]:
    rows = csv.reader(io.StringIO((run / "access_order.csv").read_text()))
    return {row[0]: ",".join(row[1:]) for row in rows if row[0] not in skip}


def assert_runs_equal(local: Path, remote: Path) -> None:
    """The same runs, each bitwise the same: losses, every layer's digest, weights, and every written layer's
    access order. A frozen layer's row records the order its reads happened in, which the version rule leaves
    free (only writes are ordered): under csp at D > 1 it follows timing, so it is compared as a set of layers."""
    mine, theirs = run_dirs(local), run_dirs(remote)
    assert sorted(theirs) == sorted(mine) and mine
    for name, run in mine.items():
        for file in RUN_FILES:
            assert (theirs[name] / file).read_bytes() == (run / file).read_bytes(), f"{name}/{file}"
        frozen = frozen_layers(run)
        assert access_rows(theirs[name], frozen) == access_rows(run, frozen), f"{name}/access_order.csv"
        assert set(access_rows(theirs[name], set())) == set(access_rows(run, set())), f"{name}/access_order.csv"


def table_cells(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    return list(rows[0]) if rows else text.splitlines()[:1], rows


def assert_tables_equal(local: Path, remote: Path) -> None:
    """Every table: the same columns and rows, cells byte-equal but in the TIMING columns; the rest byte-equal."""
    mine = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
    assert sorted(p.relative_to(remote) for p in remote.rglob("*") if p.is_file()) == mine and mine
    for name in (p for p in mine if p.suffix == ".csv"):
        (columns, rows), (their_columns, their_rows) = table_cells(local / name), table_cells(remote / name)
        assert their_columns == columns and len(their_rows) == len(rows), name
        key, timed_rows = TIMING_ROWS.get(name.stem, ("", set()))
        for row, theirs in zip(rows, their_rows, strict=True):
            timing = TIMING.get(name.stem, set()) if not key or row[key] in timed_rows else set()
            same = {k: v for k, v in row.items() if k not in timing}
            assert {k: v for k, v in theirs.items() if k not in timing} == same, (name, row)
        if name.stem not in TIMING:
            assert (remote / name).read_bytes() == (local / name).read_bytes(), name


def clock_lines(results: Path) -> list[list[str]]:
    return [line.split("\t") for line in (results / "benchmarks" / "jobclock.tsv").read_text().splitlines()]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, cluster: Cluster) -> Path:
    """The CI configuration run locally, as tests/test_workflow.py's tiny run (after the cluster is known up)."""
    work = tmp_path_factory.mktemp("local")
    done = snakemake("--cores", "2", "--configfile", str(TEST_CONFIG), "--directory", str(work), timeout=5400)
    assert done.returncode == 0, done.stderr[-3000:]
    return work


def test_the_ci_config_through_the_profile_equals_a_local_run(cluster: Cluster, local_run: Path,
                                                              tmp_path: Path) -> None:
    done = on_cluster(cluster, tmp_path, "--configfile", str(TEST_CONFIG))
    assert done.returncode == 0, done.stderr[-5000:]
    results = tmp_path / "results"
    ids = set(re.findall(r"has been submitted with SLURM jobid (\d+)", done.stdout + done.stderr))
    states = dict(line.split("|", 1) for line in cluster.run("sacct", "-X", "-n", "-P", "-o",
                                                                   "JobID,State,Account").stdout.split())
    assert ids and {states.get(i) for i in ids} == {f"COMPLETED|{ACCOUNT}"}, (ids, states)
    assert_runs_equal(local_run / "results", results)
    assert_tables_equal(local_run / "results" / "tables", results / "tables")
    # item 1 of issue 37: one session for the whole invocation, every job counted, the SLURM ones named
    lines = clock_lines(results)
    assert len({line[0] for line in lines}) == 1 and {line[6] for line in lines} - {""} == ids, lines
    summary = (results / "tables" / "run_summary.csv").read_text()
    # the jobs the report saw: not its own, nor `published`, which reads the report's tables and so runs after it
    jobs = len([line for line in lines if "naspipe report" not in line[4] and "naspipe published" not in line[4]])
    assert f"{jobs} jobs, " in summary and f": {len(ids)} SLURM jobs (" in summary, summary
    assert f"{len(ids)} of the {jobs} jobs ran in SLURM allocations" in summary


GPU_CONFIG = {  # toy space, "cuda" on fake GPUs: the stage processes compute on the CPU (train_options wins)
    "device": "cuda",
    "hardware": "h100-nvlink-ib",
    "seeds": [0],
    "steps": 6,
    "stages": [GPUS_PER_NODE, GPUS_PER_NODE * len(NODES)],  # one node; more stages than GPUs per node: both nodes
    "systems": ["csp", "csp-mb"],
    "micro": {"micro_batches": 4, "split_backward": True, "priority": "critical"},
    "layouts": [f"{GPUS_PER_NODE}x{len(NODES)}"],  # csp-mb on 2 stages x 2 replicas: 4 processes over both nodes
    "partition_costs": "params",
    "train_options": {"device": "cpu"},
    "datasets": {},
    "spaces": {"toy": {}},
    "resources": {"train": {"cpus_per_stage": 1, "mem_mb_per_stage": 1000, "runtime": 30,
                            "gpus_per_node": GPUS_PER_NODE}},
}


def test_more_stages_than_gpus_per_node_run_one_srun_task_per_stage_each_on_its_own_gpu(
        cluster: Cluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "gpu.yaml", GPU_CONFIG)
    spanning, one_node = GPUS_PER_NODE * len(NODES), GPUS_PER_NODE
    runs = ["results/runs/toy/sequential/D1-seed0", f"results/runs/toy/csp/D{one_node}-seed0",
            f"results/runs/toy/csp/D{spanning}-seed0"]
    replicated = ["results/runs/toy/sequential-mb/D1-seed0",
                  f"results/runs/toy/csp-mb/D{GPUS_PER_NODE}xR{len(NODES)}-seed0"]
    done = on_cluster(cluster, tmp_path / "cluster", *runs, *replicated, "--configfile", str(config), timeout=1800)
    assert done.returncode == 0, done.stderr[-5000:]
    digests = {(tmp_path / "cluster" / run / "weights.sha256").read_bytes() for run in runs}
    assert len(digests) == 1  # csp on 2 GPUs of one node and on 4 over two nodes: bitwise the sequential reference
    digests = {(tmp_path / "cluster" / run / "weights.sha256").read_bytes() for run in replicated}
    assert len(digests) == 1  # csp-mb on 2 stages x 2 replicas over two nodes: bitwise its reference
    runs += replicated
    # the same config run locally (the fake GPUs named by CUDA_VISIBLE_DEVICES, with-gpus claiming them) agrees
    local = snakemake(*runs, "--cores", "2", "--resources", f"gpu={spanning}", "--configfile", str(config),
                      "--directory", str(tmp_path / "local"), "--config", "launch=local",
                      env={"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(spanning)))}, timeout=1800)
    assert local.returncode == 0, local.stderr[-3000:]
    assert_runs_equal(tmp_path / "local" / "results", tmp_path / "cluster" / "results")
    # which GPU every task was bound to (the cluster's task prolog): the spanning job's step has one task per
    # stage, two per node, each with one GPU of its node, all different
    tasks = [line.split() for line in cluster.tasks_log.read_text().splitlines()]
    steps: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for job, *rest in tasks:
        if len(rest) == 4:  # job step rank node gpus (a batch step has no step id: 3 fields)
            step, rank, node, gpus = rest
            steps.setdefault((job, step), []).append((rank, node, gpus))
    spanning_steps = [sorted(t) for t in steps.values() if len(t) == spanning]
    assert len(spanning_steps) == 2, tasks  # csp on 4 stages, csp-mb on 2 stages x 2 replicas
    for placed in spanning_steps:
        assert [rank for rank, _, _ in placed] == [str(r) for r in range(spanning)]
        assert {(node, gpus) for _, node, gpus in placed} == {(n, str(g)) for n in NODES for g in range(GPUS_PER_NODE)}
    # the one-node job ran in the jobstep plugin's `srun -n1` (no mpi resource), holding both of the node's GPUs
    one = [t for t in steps.values() if len(t) == 1 and t[0][2] == ",".join(map(str, range(one_node)))]
    log = (tmp_path / "cluster" / "results" / "logs" / "train" / "toy" / "csp" / f"D{one_node}-seed0.log")
    assert one and "claimed 0,1" in log.read_text(), (tasks, log.read_text()[-2000:])


def test_an_account_the_user_lacks_is_refused_before_any_job_is_submitted(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.run("squeue", "-h", "-t", "all").stdout
    done = snakemake("results/runs/toy/csp/D2-seed0", "--profile", PROFILE, "--directory", str(tmp_path),
                     "--configfile", str(write_config(tmp_path / "gpu.yaml", GPU_CONFIG)), "--default-resources",
                     "slurm_account=nosuch", env={"SLURM_CONF": cluster.env["SLURM_CONF"]}, timeout=600)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(
        "naspipe workflow: config error: slurm_account: 'nosuch' (jobs of train) is not an account of user root on "
        f"this cluster (sacctmgr lists: {ACCOUNT}, root)"), done.stderr  # root: SLURM's own account
    assert cluster.run("squeue", "-h", "-t", "all").stdout == before
