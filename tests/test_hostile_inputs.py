"""Issue 41, items 4 and 7-12: inputs a hostile user tried that still ended in a traceback, a silent choice
or an untrue message. Each gets one line on stderr and the exit status of the contract (2 for bad input, 1 for
output lost); the run-shaped ones through ``naspipe.cli.main`` in-process, the exit statuses and signals of
items 9 and 10 through a real ``python -m naspipe`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.plan.workflow import set_args
from tests.conftest import ROOT, run_cli

TOY = ("--space", "toy", "--set", "progress=off")


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, asserted to be exactly one ``naspipe: error:`` line."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("naspipe: error: "), err
    return lines[0]


# -- item 4: a repeated --set key is refused, naming it ---------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["train", *TOY, "--steps", "2", "--set", "micro_batches=banana", "--set", "micro_batches=1", "--out", "{out}"],
    ["simulate", *TOY, "--steps", "2", "--set", "micro_batches=1", "--set", "micro_batches=1", "--out", "{out}"],
    ["partition", "--space", "toy", "--stages", "2", "--set", "dim=3", "--set", "space.dim=4", "--out", "{out}"],
    ["profile", "--space", "toy", "--set", "dim=8", "--set", "dim=4", "--repeats", "1", "--warmup", "0",
     "--out", "{out}"],
], ids=["train", "simulate", "partition", "profile"])
def test_a_repeated_set_key_is_refused_naming_it(argv: list[str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main([a.replace("{out}", str(out)) for a in argv]) == 2
    line = one_error_line(capsys)
    assert "given twice" in line and ("micro_batches" in line or "dim" in line), line
    assert not out.exists()


def test_a_section_set_after_one_of_its_keys_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--set cache.budget=2x --set 'cache={enabled: true}'`` would drop the budget without a word."""
    out = tmp_path / "out"
    assert main(["simulate", *TOY, "--steps", "2", "--set", "cache.budget=2x", "--set", "cache={enabled: true}",
                 "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert "'cache'" in line and "'cache.budget'" in line, line
    assert not out.exists()


def test_the_workflow_gives_each_set_key_once_and_train_options_still_win() -> None:
    """config/README.md: train_options are applied after the workflow's own keys and override them."""
    assert set_args(["device=cuda", "threads=1", "device=cpu"]) == "--set device=cpu --set threads=1"


# -- item 7: micro_batches larger than the batch, in simulate and plan -------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--batch", "4", "--set", "micro_batches=6"]],
                         ids=["config-batch", "given-batch"])
def test_simulate_refuses_more_micro_batches_than_samples(extra: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    sets = ["--set", "micro_batches=9"] if "micro_batches=6" not in extra else []
    assert main(["simulate", *TOY, "--system", "csp", "--stages", "2", "--steps", "2", *sets, *extra,
                 "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert "micro_batches" in line and "exceeds" in line, line
    assert not out.exists()


def test_plan_refuses_more_micro_batches_than_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("seeds: [0]\nsteps: 4\nstages: [2]\nsystems: [csp]\nspaces: {toy: {}}\ndatasets: {}\n"
                      "partition_costs: params\ntrain_options: {micro_batches: 9}\n")
    assert main(["plan", "--configfile", str(config)]) == 2
    line = one_error_line(capsys)
    assert "job runs/toy/csp/D2-seed0: micro_batches 9 exceeds the batch 8" in line, line


# -- item 8: timeout_s has a sane range ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0.001", "9.5", "1.0e+10"])
def test_timeout_out_of_range_is_one_line(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", *TOY, "--stages", "2", "--steps", "2", "--set", f"timeout_s={value}", "--out",
                 str(out)]) == 2
    line = one_error_line(capsys)
    assert "'timeout_s'" in line and "between 10 and 604800" in line, line
    assert not out.exists() and not out.with_name("run.partial").exists()


# -- item 9: NASPIPE_DIE_WITH naming no process -------------------------------------------------------------------
def test_die_with_a_process_that_does_not_run_is_one_line(tmp_path: Path) -> None:
    try:
        missing = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # above every pid the kernel hands out
    except OSError:
        missing = 2**22 + 1
    out = tmp_path / "run"
    done = run_cli("train", *TOY, "--steps", "2", "--out", str(out), env={"NASPIPE_DIE_WITH": str(missing)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "NASPIPE_DIE_WITH" in lines[0] and f"process {missing}" in lines[0], done.stderr
    assert not out.exists() and not out.with_name("run.partial").exists()


# -- item 10: a full stdout after a complete run -------------------------------------------------------------------
def _to_full_stdout(args: list[str], unbuffered: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        return subprocess.run([sys.executable, "-m", "naspipe", *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT, timeout=300)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_complete_run_with_a_full_stdout_says_so(unbuffered: bool, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _to_full_stdout(["train", *TOY, "--steps", "2", "--out", str(out)], unbuffered)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "standard output" in lines[0] and f"complete and published in {out}" in lines[0], lines[0]
    assert "resume" not in lines[0] and "interrupted" not in lines[0], lines[0]
    assert (out / "metrics.json").is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_any_command_with_a_full_stdout_says_its_output_was_lost(unbuffered: bool, tmp_path: Path) -> None:
    done = _to_full_stdout(["partition", "--space", "toy", "--stages", "2", "--out", str(tmp_path / "p.json")],
                           unbuffered)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "cannot write to standard output" in lines[0], done.stderr
    assert "resume" not in lines[0] and "free some space" not in lines[0], lines[0]


# -- item 11: control characters in an error line ----------------------------------------------------------------
def test_a_newline_in_a_path_stays_on_the_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *TOY, "--steps", "2", "--resume", str(tmp_path / "no\nsuch\x1b[2J"), "--out",
                 str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert "no\\nsuch\\x1b[2J" in line, line


# -- item 12: compare names settings that differ although the bits agree -----------------------------------------
@pytest.fixture(scope="module")
def fp32_and_tf32_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("precision")
    runs = (root / "fp32", root / "tf32")
    for run in runs:
        assert main(["train", *TOY, "--steps", "2", "--set", f"precision={run.name}", "--set", "device=cpu",
                     "--out", str(run)]) == 0
    return runs


def test_compare_says_which_settings_differ_when_the_bits_agree(fp32_and_tf32_runs: tuple[Path, Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    fp32, tf32 = fp32_and_tf32_runs
    capsys.readouterr()
    assert main(["compare", str(fp32), str(tf32)]) == 0  # the CPU has no TF32 kernels: the same bits, by design
    out = capsys.readouterr().out
    assert out.startswith("IDENTICAL") and "settings differ: precision fp32 vs tf32" in out, out
    assert "on cpu they compute the same bits" in out, out


def test_compare_of_runs_with_equal_settings_names_none(fp32_and_tf32_runs: tuple[Path, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    fp32, _ = fp32_and_tf32_runs
    capsys.readouterr()
    assert main(["compare", str(fp32), str(fp32)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("IDENTICAL") and "settings differ" not in out, out
