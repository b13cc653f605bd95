"""The Snakemake workflow: lint and format, the paper's DAG, config errors, the SLURM profile, a tiny end-to-end run."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import pytest
import yaml

from tests.workflow_dryrun import paper_workdir

ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = ROOT / ".test" / "config" / "config.yaml"
FAKE_SLURM = ROOT / "tests" / "fake_slurm"
BIN = Path(sys.executable).parent

pytest.importorskip("snakemake")


def snakemake(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run snakemake on this repository's Snakefile (workdir and config given by ``args``)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def train_supports_overwrite() -> bool:
    """Whether `naspipe train --overwrite` exists yet (another branch adds it; the train rule passes it).

    The parser is built for "train" itself: the bare top-level parser only holds placeholders
    (commands are imported when used), so it never knew the flag and this check always skipped.
    """
    from naspipe.cli import build_parser

    _, unknown = build_parser("train").parse_known_args(["train", "--overwrite", "--out", "x"])
    return "--overwrite" not in unknown


def _paper_workdir(tmp_path: Path) -> Path:
    """A workdir holding (empty) stand-ins for the paper's datasets, which exist-checks need."""
    return paper_workdir(ROOT / "config" / "paper.yaml", tmp_path)


def test_paper_dry_run_plans_every_training_job(tmp_path: Path) -> None:
    done = snakemake(
        "-n", "-p", "--configfile", str(ROOT / "config" / "paper.yaml"), "--directory", str(_paper_workdir(tmp_path)),
        "--resources", "gpu=16",
    )
    assert done.returncode == 0, done.stderr
    planned = set(re.findall(r"^\s*output: results/runs/([^/]+)/([^/]+)/D(\d+)-seed(\d+)$", done.stdout, re.MULTILINE))
    spaces = ["nlp.c0", "nlp.c1", "nlp.c2", "nlp.c3", "cv.c1", "cv.c2", "cv.c3"]
    systems = ["csp-mb", "csp", "gpipe-mb", "gpipe", "pipedream", "vpipe-mb", "vpipe", "csp-no-scheduler"]
    seeds = ["0", "1", "2"]
    expected = {(sp, sy, d, se) for sp, sy, d, se in product(spaces, systems, ["4", "8", "16"], seeds)}
    expected |= {(sp, ref, "1", se) for sp, ref, se in product(spaces, ["sequential", "sequential-mb"], seeds)}
    assert planned == expected
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout, re.MULTILINE))
    assert counts["train"] == str(len(expected)) == "546"
    # the fast NASPipe: one micro-batch count at 4, 8 and 16 stages, compared with sequential-mb (Table 3)
    trains = r"naspipe train .*--set micro_batches=(\d+) .*--out results/runs/[^/]+/(csp|gpipe|vpipe)-mb/"
    parts = set(re.findall(trains, done.stdout))
    assert parts == {("16", "csp"), ("16", "gpipe"), ("16", "vpipe")}, parts  # GPipe's own form: csp-mb's parts
    compare = re.findall(r"naspipe reproducibility (results/runs/[^/]+/[^/]+/D1-seed\d) results/runs/[^/]+/csp-mb/",
                         done.stdout)
    assert compare and {Path(ref).parent.name for ref in compare} == {"sequential-mb"}
    assert counts["compare"] == str(len(spaces) * len(systems) * len(seeds))
    assert counts["prepare"] == "2" and counts["profile"] == "7" and counts["report"] == "1"
    ablations = set(re.findall(r"^\s*output: results/ablations/([^/]+)/([^/]+)/D(\d+)-seed(\d+)$", done.stdout, re.M))
    variants = ["naspipe", "no-predictor", "no-mirroring", "no-scheduler"]
    assert ablations == set(product(spaces, variants, ["8"], seeds))  # Figure 6
    assert counts["ablation"] == str(len(spaces) * len(variants) * len(seeds))
    report = re.search(r"^rule report:\n\s*input: (.*)\n\s*output: (.*)\n", done.stdout, re.MULTILINE)
    assert report is not None
    assert "results/ablations/cv.c3/no-scheduler/D8-seed2" in report.group(1).split(", ")
    planned = set(report.group(2).split(", "))
    for name in ("fig4_loss_vs_time", "fig4_search_score", "fig5_throughput", "fig6_ablation", "fig7_scaling",
                 "fig_search_convergence", "sim_fig5_throughput", "sim_fig7_scaling"):
        assert f"results/figures/{name}.png" in planned, name
    for name in ("table1_spaces", "table2_systems", "table3_reproducibility", "table4_access_order",
                 "table5_profile", "sim_table2_systems"):
        assert {f"results/tables/{name}.csv", f"results/tables/{name}.md"} <= planned, name
    assert "results/report.md" in planned


CONFIG_ERRORS = [
    ({"bogus": 1}, "bogus: unknown key"),
    (
        {"spaces": {"nlp.tiny": {"dataset": "synthetic-translation", "optoins": {}}}},
        "spaces.nlp.tiny.optoins: unknown key",
    ),
    ({"steps": "many"}, "steps: 'many' is not of type 'integer'"),
    ({"stages": [0, 2]}, "stages.0: 0 is less than the minimum of 1"),
    (
        {"datasets": {"wmt": {"kind": "wmt", "src": "missing/train.en", "tgt": "missing/train.de", "vocab_size": 8}}},
        "datasets.wmt.src: path 'missing/train.en' does not exist",
    ),
    ({"spaces": {"cv.tiny": {"dataset": "nope"}}}, "spaces.cv.tiny.dataset: 'nope' is not a key of datasets"),
    # one micro-batch count at every stage count: the count that followed the stage count (Nx) is gone
    ({"micro": {"micro_batches": "1x"}}, "micro.micro_batches: '1x' is not of type 'integer'"),
    ({"micro": {"micro_batches": 64}}, "micro.micro_batches: 64 exceeds space nlp.tiny's batch_size 32"),
    ({"micro": {"micro_batches": 1, "split_backward": False}}, "micro: micro_batches 1 without split_backward is"),
]


@pytest.mark.parametrize(("change", "message"), CONFIG_ERRORS, ids=[m.split(":")[0] for _, m in CONFIG_ERRORS])
def test_config_error_fails_before_any_job_naming_the_key(tmp_path: Path, change: dict, message: str) -> None:
    config = {**load("config/config.yaml"), **change}
    done = snakemake(
        "--cores", "1", "--configfile", str(write_config(tmp_path / "c.yaml", config)), "--directory", str(tmp_path)
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [line for line in errors if line.startswith("naspipe workflow: config error: ")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert not (tmp_path / "results").exists()


def _slurm_config(path: Path) -> Path:
    """Toy space on 'cuda' with one GPU per node: D=1 is a one-node job, D=2 a two-node srun job.

    The fake cluster has no GPU, so the stage processes are told device=cpu (train_options wins).
    """
    return write_config(
        path,
        {
            "device": "cuda",
            "hardware": "h100-nvlink-ib",
            "seeds": [0],
            "steps": 4,
            "stages": [1, 2],
            "systems": ["csp"],
            "partition_costs": "params",
            "train_options": {"device": "cpu"},
            "datasets": {},
            "spaces": {"toy": {}},
            "resources": {
                "train": {
                    "partition": "gpu",
                    "cpus_per_stage": 2,
                    "mem_mb_per_stage": 1000,
                    "runtime": 30,
                    "gpus_per_node": 1,
                }
            },
        },
    )


def _flags(argv: list[str]) -> dict[str, str]:
    """sbatch's flags as a dict (`--mem 1000`, `-p 'gpu'`, `--gpus=2` all become key -> value)."""
    flags: dict[str, str] = {}
    words = " ".join(argv).split()
    for i, word in enumerate(words):
        if word.startswith("-") and "=" in word and not word.startswith("--wrap"):
            key, value = word.split("=", 1)
            flags[key] = value
        elif word in ("-p", "-t", "--mem", "--job-name", "--output", "-D") and i + 1 < len(words):
            flags[word] = words[i + 1].strip("'")
    return flags


# slow: three training jobs through the fake sbatch (~50 s); the dry-run resource checks of tests/test_cluster_plan.py
# stay in the default suite, and make test-cluster submits to a real SLURM cluster
@pytest.mark.slow
def test_slurm_profile_submits_the_configured_resources(tmp_path: Path) -> None:
    state = tmp_path / "fake"
    state.mkdir()
    runs = [f"results/runs/toy/{s}/D{d}-seed0" for s, d in (("sequential", 1), ("csp", 1), ("csp", 2))]
    env = {"FAKE_SLURM_DIR": str(state), "PATH": f"{FAKE_SLURM}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = snakemake(
        "--profile",
        str(ROOT / "profiles" / "slurm"),
        "--configfile",
        str(_slurm_config(tmp_path / "c.yaml")),
        "--directory",
        str(tmp_path),
        "--keep-going",
        "--slurm-init-seconds-before-status-checks",
        "1",
        *runs,
        env=env,
    )
    submitted = [json.loads(line) for line in (state / "sbatch.jsonl").read_text().splitlines()]
    by_comment = {next(w for w in " ".join(a).split() if w.startswith("rule_")): _flags(a) for a in submitted}
    assert set(by_comment) == {
        f"rule_train_wildcards_toy_{s}_{d}_0" for s, d in (("sequential", 1), ("csp", 1), ("csp", 2))
    }, by_comment
    one = by_comment["rule_train_wildcards_toy_csp_1_0"]
    assert (one["-p"], one["--gpus"], one["--cpus-per-task"], one["--mem"], one["-t"]) == (
        "gpu",
        "1",
        "2",
        "1000",
        "30",
    )
    assert "--ntasks-per-gpu" not in one and "--nodes" in one  # one task: the script runs once, not once per GPU
    two = by_comment["rule_train_wildcards_toy_csp_2_0"]
    assert (two["-p"], two["--gpus"], two["--nodes"], two["--ntasks"], two["--ntasks-per-gpu"]) == (
        "gpu",
        "2",
        "2",
        "2",
        "1",
    )
    assert (two["--cpus-per-task"], two["--mem"], two["-t"]) == ("2", "1000", "30")  # per task / per node
    srun_log = state / "srun.jsonl"
    calls = [json.loads(line) for line in srun_log.read_text().splitlines()] if srun_log.exists() else []
    assert all(call["depth"] == 0 for call in calls), calls  # never an srun inside another srun
    spanning = [call for call in calls if "--ntasks=2" in call["argv"]]
    assert len(spanning) == 1 and "--ntasks-per-gpu=1" in spanning[0]["argv"], calls  # one task per stage, once
    if train_supports_overwrite():
        assert done.returncode == 0, done.stderr[-3000:]
        for run in runs:
            assert (tmp_path / run / "weights.sha256").is_file()
        digests = {(tmp_path / run / "weights.sha256").read_text() for run in runs}
        assert len(digests) == 1  # csp over two srun tasks is bitwise the sequential reference


def test_slurm_profile_refuses_an_account_before_submitting_anything(tmp_path: Path) -> None:
    """An account the user has no association with stops the run with one line before the first sbatch."""
    state = tmp_path / "fake"
    state.mkdir()
    env = {"FAKE_SLURM_DIR": str(state), "FAKE_SLURM_ACCOUNTS": "naspipe other",
           "PATH": f"{FAKE_SLURM}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = snakemake("results/runs/toy/csp/D1-seed0", "--profile", str(ROOT / "profiles" / "slurm"), "--configfile",
                     str(_slurm_config(tmp_path / "c.yaml")), "--directory", str(tmp_path), "--default-resources",
                     "slurm_account=nosuch", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == ["naspipe workflow: config error: slurm_account: 'nosuch' (jobs of train) is not an account of "
                      f"user {getpass.getuser()} on this cluster (sacctmgr lists: naspipe, other)"], done.stderr
    assert not (state / "sbatch.jsonl").exists() and not (tmp_path / "results" / "runs").exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`.test/config/config.yaml` run end to end once in a temporary workdir."""
    if not train_supports_overwrite():
        pytest.skip("needs `naspipe train --overwrite` (merged from another branch)")
    work = tmp_path_factory.mktemp("tiny")
    done = snakemake("--cores", "2", "--configfile", str(TEST_CONFIG), "--directory", str(work))
    assert done.returncode == 0, done.stderr[-3000:]
    return work


@pytest.mark.slow  # the whole tiny workflow, search phase included: ~6 min on 2 busy cores
def test_tiny_config_end_to_end(tiny_run: Path) -> None:
    import pandas as pd
    from PIL import Image

    tables = sorted((tiny_run / "results" / "tables").glob("*.csv"))
    assert [t.stem for t in tables] == [
        "claims",
        "fig6_ablation",  # Figure 6's numbers for its claims: no rows, .test/config/config.yaml has no ablation
        "run_summary",  # what this run shows
        "sim_table2_systems",
        "table1_spaces",
        "table2_systems",
        "table3_reproducibility",
        "table4_access_order",
        "table5_profile",
    ]
    frames = {t.stem: pd.read_csv(t) for t in tables}
    assert all(len(frame) > 0 for name, frame in frames.items() if name != "fig6_ablation")
    table3 = frames["table3_reproducibility"]
    verdict = {(r.space, r.system, int(r.stages)): str(r.identical_to_sequential) for r in table3.itertuples()}
    assert verdict[("nlp.tiny", "csp", 2)] == verdict[("toy", "csp", 2)] == "yes"
    assert verdict[("nlp.tiny", "csp-mb", 2)] == verdict[("toy", "csp-mb", 2)] == "yes"  # against sequential-mb
    assert verdict[("nlp.tiny", "gpipe", 2)] == "no"
    weights = {(r.space, r.system): r.weights for r in table3.itertuples() if int(r.stages) == 2}
    assert weights[("toy", "csp-mb")] != weights[("toy", "csp")]  # 2 parts train other bits than 1
    assert set(frames["sim_table2_systems"]["system"]) == {"csp-mb", "csp", "gpipe"}  # the config's simulate key
    for figure in ("fig4_loss_vs_time", "fig5_throughput", "fig7_scaling", "sim_fig5_throughput", "sim_fig7_scaling"):
        with Image.open(tiny_run / "results" / "figures" / f"{figure}.png") as image:
            image.verify()
    assert "Table 3" in (tiny_run / "results" / "report.md").read_text()
    # the search phase: one search per run, its winner retrained and scored (Table 3), Figure 4's curves
    searched = {(r.space, r.system, int(r.stages)): r.search_accuracy for r in table3.itertuples()}
    assert set(searched) == set(verdict) | {(space, ref, 1) for space in ("nlp.tiny", "toy")
                                            for ref in ("sequential", "sequential-mb")}
    assert all(pd.notna(v) for v in searched.values())
    assert searched[("toy", "csp", 2)] == searched[("toy", "sequential", 1)]
    for figure in ("fig4_search_score", "fig_search_convergence"):
        with Image.open(tiny_run / "results" / "figures" / f"{figure}.png") as image:
            image.verify()
    assert not list((tiny_run / "results").rglob("*.partial"))


@pytest.mark.slow  # the whole tiny workflow, search phase included: ~6 min on 2 busy cores
def test_rerun_does_nothing_and_a_change_reruns_only_what_it_affects(tiny_run: Path, tmp_path: Path) -> None:
    again = snakemake("-n", "--configfile", str(TEST_CONFIG), "--directory", str(tiny_run))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout
    config = load(".test/config/config.yaml")
    config["spaces"]["toy"] = {"options": {"blocks": 5}}
    changed = snakemake(
        "-n", "--configfile", str(write_config(tmp_path / "c.yaml", config)), "--directory", str(tiny_run)
    )
    assert changed.returncode == 0, changed.stderr
    outputs = re.findall(r"^\s*output: (\S+)", changed.stdout, re.MULTILINE)
    report = ("results/tables/", "results/figures/", "results/report.md", "results/published.")
    assert outputs and all("/toy" in o or o.startswith(report) for o in outputs), outputs
    assert not [o for o in outputs if "nlp.tiny" in o]


@pytest.mark.slow
def test_killed_run_resumes_with_nothing_partial_left(tmp_path: Path) -> None:
    """SIGKILL the whole run mid-training (a lost node); unlock + --rerun-incomplete finishes it cleanly."""
    if not train_supports_overwrite():
        pytest.skip("needs `naspipe train --overwrite` (merged from another branch)")
    config = write_config(
        tmp_path / "c.yaml",
        {
            "device": "cpu",
            "seeds": [0],
            "steps": 400,
            "stages": [2],
            "systems": ["csp"],
            "partition_costs": "params",
            "datasets": {},
            "spaces": {"toy": {}},
        },
    )
    run = tmp_path / "results" / "runs" / "toy" / "csp" / "D2-seed0"
    args = ["--cores", "2", "--configfile", str(config), "--directory", str(tmp_path), str(run.relative_to(tmp_path))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    first = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    partial = run.with_name(run.name + ".partial")
    deadline = time.monotonic() + 300
    while not partial.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert partial.exists() and first.poll() is None, "the run finished or failed before it could be killed"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not run.exists()
    assert snakemake("--unlock", *args[2:]).returncode == 0
    again = snakemake("--rerun-incomplete", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run / "weights.sha256").is_file()
    assert not list((tmp_path / "results").rglob("*.partial"))


@pytest.mark.slow
def test_default_config_end_to_end(tmp_path: Path) -> None:
    """The default evaluation (README: `make artifact`) from scratch; csp identical everywhere, gpipe/pipedream not."""
    if not train_supports_overwrite():
        pytest.skip("needs `naspipe train --overwrite` (merged from another branch)")
    done = snakemake(
        "--cores", "2", "--configfile", str(ROOT / "config" / "config.yaml"), "--directory", str(tmp_path), timeout=3600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import pandas as pd

    table3 = pd.read_csv(tmp_path / "results" / "tables" / "table3_reproducibility.csv")
    for system, want in (("csp", {"yes"}), ("gpipe", {"yes", "no"}), ("pipedream", {"yes", "no"})):
        got = set(table3[table3.system == system].identical_to_sequential.astype(str))
        assert got == want or (want == {"yes", "no"} and "no" in got), (system, got)
    shutil.rmtree(tmp_path / "results" / "runs")
