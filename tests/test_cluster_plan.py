"""The workflow's job plan before anything runs: the fit check, launch matching, validation up front.

The paper plan is checked with the project's own memory model against the hardware it names;
an oversized job, a plan needing more GPUs than one machine has, and config errors that once
surfaced only after jobs ran each stop the workflow with one line before any job starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from naspipe.errors import UsageError
from naspipe.plan.cost import estimate
from naspipe.plan.fit import CACHE_ON, fit_jobs
from naspipe.plan.jobs import all_training_jobs, reference_run
from naspipe.plan.launch import check_local

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytest.importorskip("snakemake")


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def paper_estimator(config: dict):
    return lambda job: estimate(job.space, job.system, job.stages, config["steps"], job.sets, config["hardware"])


def snakemake(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("naspipe workflow: config error: "), errors
    return errors[0]


def tiny_config(tmp_path: Path, **change: object) -> Path:
    config = {"seeds": [0], "steps": 8, "stages": [1, 2], "systems": ["csp", "gpipe"], "partition_costs": "params",
              "datasets": {}, "spaces": {"nlp.tiny": {}}, **change}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow  # ~150 estimates of the paper's spaces when the estimate cache is cold (a few minutes)
def test_paper_plan_fits_its_hardware_with_the_context_manager_where_needed() -> None:
    config = load("config/paper.yaml")
    fitted = fit_jobs(all_training_jobs(config), paper_estimator(config))
    assert all(f.estimate.fits for f in fitted.values())
    cached = {f.job.space for out, f in fitted.items() if f.job.rule == "train" and CACHE_ON in f.job.sets}
    # the sequential references of the three largest supernets (91-200 GB resident) hold their layers on the host
    assert cached == {"nlp.c0", "nlp.c1", "nlp.c2"}
    assert all(CACHE_ON in fitted[reference_run(space, 0)].job.sets for space in cached)
    assert all(f.job.system == "sequential" for f in fitted.values() if f.job.rule == "train"
               and CACHE_ON in f.job.sets)
    assert {f.job.rule for f in fitted.values()} == {"train", "ablation"}


def test_a_reference_too_large_for_the_device_runs_with_the_host_store() -> None:
    resident = estimate("nlp.c2", "sequential", 1, 256, ("optimizer.name=sgd", "optimizer.momentum=0.9"),
                        "h100-nvlink-ib")
    assert not resident.fits and resident.device_bytes > 90e9 > resident.device_limit  # ~91 GB on one 80 GB GPU
    config = {"seeds": [0], "steps": 256, "stages": [4], "systems": ["csp"], "spaces": {"nlp.c2": {}},
              "device": "cuda", "train_options": {"optimizer.name": "sgd", "optimizer.momentum": 0.9},
              "hardware": "h100-nvlink-ib"}
    fitted = fit_jobs(all_training_jobs(config), paper_estimator(config))
    reference = fitted[reference_run("nlp.c2", 0)]
    assert reference.job.system == "sequential" and CACHE_ON in reference.job.sets and reference.estimate.fits
    assert CACHE_ON not in fitted["results/runs/nlp.c2/csp/D4-seed0"].job.sets  # fits resident


def test_an_oversized_job_stops_the_workflow_before_any_job_naming_it(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "config" / "hardware" / "cpu-local.yaml").read_text())
    spec.update(name="tiny-host", host_memory=2.0e6, device_memory=2.0e6)  # 2 MB: no nlp.tiny run fits
    (tmp_path / "tiny-host.yaml").write_text(yaml.safe_dump(spec))
    config = tiny_config(tmp_path, hardware=str(tmp_path / "tiny-host.yaml"))
    line = one_error(snakemake("--cores", "1", "--configfile", str(config), "--directory", str(tmp_path),
                               cwd=tmp_path))
    assert "hardware (" in line and "job runs/nlp.tiny/" in line and "more than the 2.0 GB" not in line
    assert " GB" in line and "needs" in line
    assert not (tmp_path / "results").exists()


CONFIG_ERRORS = [  # issue 18 item 7: each once failed only after jobs ran
    ({"stages": [2, 50]}, "stages: job runs/nlp.tiny/csp/D50-seed0: --stages 50 exceeds the 8 layers"),
    ({"train_options": {"optimizer.lrr": 1}}, "train_options: job runs/nlp.tiny/csp/D1-seed0: unknown config key "
                                              "'optimizer.lrr'"),
    ({"ablation": {"stages": [64]}}, "ablation.stages: job ablations/nlp.tiny/naspipe/D64-seed0: --stages 64"),
    ({"search": {"checkpoint_every": 3}}, "search.checkpoint_every: job runs/nlp.tiny/gpipe/D2-seed0: system "
                                          "'gpipe': checkpoint_every (3) must be a multiple of the bulk size 2"),
    ({"spaces": {"nlp.tiny": {"options": {"blocks": "abc"}}}}, "spaces.nlp.tiny.options: job "),
    ({"simulate": {"hardware": "nosuch-hw", "spaces": ["nlp.tiny"], "systems": ["csp"], "stages": [2], "steps": 4}},
     "simulate.hardware: "),
    ({"simulate": {"hardware": "cpu-local", "spaces": ["nlp.tiny"], "systems": ["csp"], "stages": [40],
                   "steps": 4}}, "simulate.stages: nlp.tiny: --stages 40 exceeds"),
]


@pytest.mark.parametrize(("change", "message"), CONFIG_ERRORS, ids=[m.split(":")[0] for _, m in CONFIG_ERRORS])
def test_workflow_config_errors_are_found_up_front(tmp_path: Path, change: dict, message: str) -> None:
    done = snakemake("-n", "--configfile", str(tiny_config(tmp_path, **change)), "--directory", str(tmp_path),
                     cwd=tmp_path)
    assert message in one_error(done)
    assert not (tmp_path / "results").exists()


def test_local_launch_refuses_stage_counts_above_the_gpu_cap() -> None:
    """Counted in GPUs: a replicated layout's D x R processes (the workflow passes each job's count)."""
    with pytest.raises(UsageError, match=r"^jobs of 16 GPUs \(stages x replicas\) need more than the 8 GPUs of "
                       r"--resources gpu=8"):
        check_local({1, 4, 8, 16}, 8, cuda=True)
    check_local({1, 4, 8}, 8, cuda=True)  # fits: no error
    check_local({16}, None, cuda=True)  # no cap given: with-gpus waits for free devices
    check_local({16}, 2, cuda=False)  # cpu jobs claim no GPU


def test_paper_plan_on_an_8_gpu_machine_stops_naming_the_stage_counts(tmp_path: Path) -> None:
    from tests.test_workflow import _paper_workdir

    paper = str(ROOT / "config" / "paper.yaml")
    done = snakemake("-n", "--cores", "all", "--resources", "gpu=8", "--configfile", paper,
                     "--directory", str(_paper_workdir(tmp_path)), cwd=tmp_path)
    expected = "stages: jobs of 16 GPUs (stages x replicas) need more than the 8 GPUs of --resources gpu=8"
    assert expected in one_error(done)


def _jobs(dry_run: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, resources, shell command) of every job a dry run prints."""
    jobs = []
    for block in dry_run.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        found = re.search(r"^\s*resources: (.*)$", block, re.MULTILINE)
        pairs = [p.split("=", 1) for p in found.group(1).split(", ")] if found else []
        shell = re.search(r"^Shell command: (.*)$", block, re.MULTILINE)
        jobs.append((rule, {k: v for k, v in pairs}, shell.group(1) if shell else ""))
    return jobs


def test_paper_plan_under_slurm_gives_every_job_its_resources(tmp_path: Path) -> None:
    from tests.test_workflow import _paper_workdir

    done = snakemake("-n", "--profile", str(ROOT / "profiles" / "slurm"), "--configfile",
                     str(ROOT / "config" / "paper.yaml"), "--directory", str(_paper_workdir(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = _jobs(done.stdout)
    # localrules (the Snakefile's): run on the submitting host
    local = {"all", "partition", "compare", "simulate", "simulate_gpus", "report", "published", "calibrate",
             "attribute", "bubble_models"}
    submitted = [(rule, r, shell) for rule, r, shell in jobs if rule not in local]
    assert {rule for rule, _, _ in submitted} == {"prepare", "profile", "train", "train_replicated", "ablation",
                                                  "search", "retrain", "search_accuracy", "curve", "retrain_random",
                                                  "random_accuracy"}
    threads = load("config/paper.yaml")["threads_per_stage"]
    for rule, r, shell in submitted:
        assert int(r["mem_mb"]) > 0 and int(r["runtime"]) > 0, (rule, r)
        if rule == "prepare":  # CPU only
            assert r["gpu"] == "0" and r["slurm_partition"] == "cpu", r
            continue
        assert r["slurm_partition"] == "gpu", (rule, r)
        training = rule in ("train", "train_replicated", "ablation")
        stages = int(re.search(r"--stages (\d+)", shell).group(1)) if training else 1
        replicas = re.search(r"--set replicas=(\d+)", shell)
        assert (replicas is not None) == (rule == "train_replicated"), (rule, shell)
        stages *= int(replicas.group(1)) if replicas else 1  # a replicated layout: D x R processes, one GPU each
        assert r["gpu"] == str(stages), (rule, r)
        if training and stages > 8:  # spans nodes: one task (and CPUs) per process, one srun
            assert (r["nodes"], r["tasks"], r["tasks_per_gpu"], r["mpi"]) == (str(stages // 8), str(stages), "1",
                                                                                "srun"), r
            assert r["cpus_per_task"] == str(threads) and shell.count("srun ") == 1 and "with-gpus" not in shell
        else:
            per_task = threads * stages if training else (threads if rule != "profile" else 1)
            assert r["cpus_per_task"] == str(per_task), (rule, r)
            # no mpi key at all (not even an empty one): the jobstep plugin then runs the job in `srun -n1`
            assert "srun" not in shell and "mpi" not in r and r.get("tasks", "1") == "1", (rule, r, shell)
    limits = {int(r["runtime"]) for rule, r, _ in submitted if rule == "train"}
    assert max(limits) < 24 * 60  # from the simulator's prediction, not a flat day per job


def test_the_sequential_reference_with_the_host_store_is_still_the_reference(tmp_path: Path) -> None:
    """What lets the fit check give a too-large reference the context manager: the same bytes."""
    base = [sys.executable, "-m", "naspipe", "train", "--space", "nlp.tiny", "--system", "sequential", "--steps", "12",
            "--set", "progress=off"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, extra in (("resident", []), ("cached", ["--set", "cache.enabled=true", "--set", "cache.budget=2x"])):
        done = subprocess.run([*base, *extra, "--out", str(tmp_path / name)], env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    for name in ("weights.sha256", "losses.csv"):
        assert (tmp_path / "resident" / name).read_bytes() == (tmp_path / "cached" / name).read_bytes(), name


def test_naspipe_plan_prints_the_cost_and_refuses_a_job_that_cannot_fit(tmp_path: Path) -> None:
    config = tiny_config(tmp_path, ablation={"stages": [2]}, search={"checkpoint_every": 4})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "naspipe", "plan", "--configfile", str(config)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    rules_table = done.stdout.split("\n\n")[1].splitlines()[1:]
    rows = {line.split()[0]: line.split() for line in rules_table}
    assert rows["train"][1] == "5" and rows["ablation"][1] == "4"  # csp/gpipe x D1, D2 + reference; 4 variants
    assert rows["search"][1] == rows["retrain"][1] == rows["search_accuracy"][1] == "5" and rows["curve"][1] == "3"
    assert int(rows["total"][1]) == 5 * 4 + 4 + 3 + 1  # + the profile of nlp.tiny
    jobs = [line.split() for line in done.stdout.split("\n\n")[3].splitlines()[1:]]
    assert {(j[0], j[1], j[2], j[3]) for j in jobs} >= {("train", "nlp.tiny", "sequential", "1"),
                                                        ("ablation", "nlp.tiny", "no-mirroring", "2")}
    spec = yaml.safe_load((ROOT / "config" / "hardware" / "cpu-local.yaml").read_text())
    spec.update(name="tiny-host", host_memory=2.0e6, device_memory=2.0e6)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec))
    refused = subprocess.run([sys.executable, "-m", "naspipe", "plan", "--configfile", str(config), "--hardware",
                              str(tmp_path / "tiny.yaml")], env=env, capture_output=True, text=True, timeout=600,
                             check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and "job runs/nlp.tiny/" in refused.stderr and "GB" in refused.stderr
