"""Damaged run outputs (issue 18, item 3): a changed digit or a truncated file is damage, never a verdict.

A run records the SHA-256 of its result files (``outputs.sha256``); ``compare``,
``reproducibility`` and ``report`` verify what they read against it and stop with one line
naming the damaged file (exit 2, nothing written). A verdict records the digests it judged,
so the report refuses a verdict on files changed since.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.rundigest import DIGESTS, RECORDED, recorded_digests, write_digests

SMALL = ("--set", "space.blocks=4", "--set", "space.candidates=3", "--set", "space.dim=16", "--set", "space.seq_len=8")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("damage") / "run"
    assert main(["train", "--steps", "4", "--set", "progress=off", *SMALL, "--out", str(run)]) == 0
    return run


def copy_run(run: Path, to: Path, edit: Callable[[Path], object] | None = None) -> Path:
    shutil.copytree(run, to, ignore=shutil.ignore_patterns("checkpoints"))
    if edit is not None:
        edit(to)
    return to


def change_digit(name: str) -> Callable[[Path], None]:
    """Change one hex digit of the second line's digest or loss (the file stays well formed)."""

    def edit(run: Path) -> None:
        lines = (run / name).read_text().split("\n")
        row = 1 if len(lines) > 2 else 0
        head, _, tail = lines[row].rpartition(",") if "," in lines[row] else ("", "", lines[row])
        index = next(i for i, c in enumerate(tail) if c in "0123456789abcdef" and i > 2)
        swapped = "1" if tail[index] != "1" else "2"
        lines[row] = (head + "," if head else "") + tail[:index] + swapped + tail[index + 1:]
        (run / name).write_text("\n".join(lines))

    return edit


def header_only(run: Path) -> None:
    path = run / "losses.csv"
    path.write_text(path.read_text().split("\n")[0] + "\n")


def errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("naspipe: error:") and "\n" not in err and "Traceback" not in err, err
    return err


def test_a_run_records_its_result_files_in_sha256sum_format(good_run: Path) -> None:
    recorded = recorded_digests(good_run)
    assert recorded is not None and sorted(recorded) == sorted(RECORDED)
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", DIGESTS], cwd=good_run, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("damage", ["digit-in-losses", "header-only-losses", "digit-in-weights", "digit-in-layers"])
def test_compare_calls_damage_damage_not_a_difference(good_run, tmp_path, capsys, damage):
    name, edit = {"digit-in-losses": ("losses.csv", change_digit("losses.csv")),
                  "header-only-losses": ("losses.csv", header_only),
                  "digit-in-weights": ("weights.sha256", change_digit("weights.sha256")),
                  "digit-in-layers": ("layer_hashes.csv", change_digit("layer_hashes.csv"))}[damage]
    bad = copy_run(good_run, tmp_path / "bad", edit)
    assert main(["compare", str(good_run), str(copy_run(good_run, tmp_path / "same"))]) == 0
    err = errors(capsys, ["compare", str(good_run), str(bad)])
    assert f"{bad / name}: damaged" in err


@pytest.mark.parametrize("damage", ["header-only-losses", "digit-in-weights"])
def test_runs_without_a_digest_file_are_still_checked_for_consistency(good_run, tmp_path, capsys, damage):
    """Runs written before ``outputs.sha256`` existed, named so with ``--undigested``: loss count against
    metrics.json, weights against layers."""
    edit = header_only if damage == "header-only-losses" else change_digit("weights.sha256")
    bad = copy_run(good_run, tmp_path / "bad", edit)
    (bad / DIGESTS).unlink()
    err = errors(capsys, ["compare", str(good_run), str(bad), "--undigested", str(bad)])
    expected = "losses.csv: damaged (0 losses where metrics.json says 4" if damage == "header-only-losses" else \
        "weights.sha256: damaged (does not match the layer digests"
    assert expected in err


def test_reproducibility_refuses_a_damaged_run_and_writes_nothing(good_run, tmp_path, capsys):
    bad = copy_run(good_run, tmp_path / "bad", change_digit("losses.csv"))
    out = tmp_path / "verdict.json"
    err = errors(capsys, ["reproducibility", str(good_run), str(bad), "--out", str(out)])
    assert f"{bad / 'losses.csv'}: damaged" in err and not out.exists()


def test_the_report_refuses_damaged_runs_and_stale_verdicts(good_run, tmp_path, capsys):
    run = copy_run(good_run, tmp_path / "run")
    verdict = tmp_path / "verdict.json"
    assert main(["reproducibility", str(good_run), str(run), "--out", str(verdict)]) == 0
    assert json.loads(verdict.read_text())["runs"][0]["digests"]["losses.csv"] == recorded_digests(run)["losses.csv"]
    out = tmp_path / "results"
    report = ["report", "--runs", str(good_run), "--reproducibility", str(verdict), "--out", str(out)]
    assert main(report) == 0
    shutil.rmtree(out)
    change_digit("losses.csv")(run)  # damage: the file no longer matches the run's own digests
    assert f"{run / 'losses.csv'}: damaged" in errors(capsys, report)
    write_digests(run)  # the run re-recorded as it now is: undamaged, but not what the verdict judged
    assert f"{run / 'losses.csv'} changed since the verdict was made" in errors(capsys, report)
    assert not out.exists()


def test_the_report_refuses_a_damaged_weights_file_among_its_runs(good_run, tmp_path, capsys):
    bad = copy_run(good_run, tmp_path / "bad", change_digit("weights.sha256"))
    out = tmp_path / "results"
    err = errors(capsys, ["report", "--runs", str(bad), "--out", str(out)])
    assert f"{bad / 'weights.sha256'}: damaged" in err and not out.exists()


def test_a_damaged_digest_file_is_named(good_run, tmp_path, capsys):
    bad = copy_run(good_run, tmp_path / "bad", lambda r: (r / DIGESTS).write_text("not a digest line\n"))
    err = errors(capsys, ["compare", str(good_run), str(bad)])
    assert f"{bad / DIGESTS} line 1: damaged" in err


@pytest.mark.timeout(1500)
@pytest.mark.slow  # a small workflow end to end (~3-5 min on 2 busy cores), then the report twice
def test_workflow_report_job_fails_naming_a_damaged_file(tmp_path: Path) -> None:
    """Damage a finished run's losses.csv, then its weights.sha256: the report job fails, its log one
    line naming the file (the verdict in results/reproducibility/ says identical and is refused)."""
    pytest.importorskip("snakemake")
    from tests.test_workflow import snakemake, write_config

    config = write_config(tmp_path / "c.yaml", {
        "device": "cpu", "seeds": [0], "steps": 4, "stages": [2], "systems": ["csp"],
        "partition_costs": "uniform", "profile": {"repeats": 1, "warmup": 0},
        "search": {"population": 2, "generations": 1, "batches": 1, "calib_batches": 1, "retrain_steps": 2,
                   "curve_subnets": 1, "checkpoint_every": 2},
        "datasets": {}, "spaces": {"toy": {}},
    })
    work = tmp_path / "work"
    args = ("--cores", "2", "--configfile", str(config), "--directory", str(work))
    done = snakemake(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    run = work / "results" / "runs" / "toy" / "csp" / "D2-seed0"
    for name, edit in (("losses.csv", change_digit("losses.csv")), ("weights.sha256", change_digit("weights.sha256"))):
        original = (run / name).read_bytes()
        edit(run)
        failed = snakemake(*args, "--forcerun", "report")
        assert failed.returncode != 0
        log = (work / "results" / "logs" / "report.log").read_text().strip().splitlines()
        assert len(log) == 1 and log[0].startswith("naspipe: error: "), log
        assert f"results/runs/toy/csp/D2-seed0/{name}: damaged" in log[0], log
        (run / name).write_bytes(original)
    assert snakemake(*args, "--forcerun", "report").returncode == 0  # undamaged again: the report is whole


# -- issue 34: one verifier for every reader; a missing digest file is damage, its paths stay in the run ----------
def change_loss_hex(run: Path) -> None:
    """One hex digit of the first loss's ``loss_hex`` changed (compare reads that column, not ``loss``)."""
    lines = (run / "losses.csv").read_text().split("\n")
    fields = lines[1].split(",")
    assert fields[2].startswith("0x1."), fields[2]
    fields[2] = "0x1." + ("1" if fields[2][4] != "1" else "2") + fields[2][5:]
    lines[1] = ",".join(fields)
    (run / "losses.csv").write_text("\n".join(lines))


def without_digests(edit: Callable[[Path], object]) -> Callable[[Path], None]:
    def both(run: Path) -> None:
        edit(run)
        (run / DIGESTS).unlink()

    return both


@pytest.mark.parametrize("reader", ["compare", "reproducibility", "report"])
def test_a_deleted_digest_file_does_not_switch_the_damage_check_off(good_run, tmp_path, capsys, reader):
    """Item 1: a copied run, outputs.sha256 deleted, one hex digit of a loss changed: never a verdict."""
    bad = copy_run(good_run, tmp_path / "bad", without_digests(change_loss_hex))
    out = tmp_path / "out"
    args = {"compare": ["compare", str(good_run), str(bad)],
            "reproducibility": ["reproducibility", str(good_run), str(bad), "--out", str(out)],
            "report": ["report", "--runs", str(good_run), str(bad), "--out", str(out)]}[reader]
    err = errors(capsys, args)
    assert f"{bad / DIGESTS}: missing" in err and f"--undigested {bad}" in err
    assert not out.exists()


def test_a_run_named_undigested_is_compared_and_its_difference_reported(good_run, tmp_path, capsys):
    """The explicit way to read a run from before digests: its (real) difference is a verdict, exit 1."""
    old = copy_run(good_run, tmp_path / "old", without_digests(change_loss_hex))
    assert main(["compare", str(good_run), str(old), "--undigested", str(old)]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


@pytest.mark.parametrize("reader", ["compare", "reproducibility", "report"])
def test_every_reader_refuses_a_truncated_metrics_file(good_run, tmp_path, capsys, reader):
    """Item 3: compare said IDENTICAL for a run whose metrics.json was cut to 40 bytes."""
    bad = copy_run(good_run, tmp_path / "bad")
    metrics = bad / "metrics.json"
    metrics.write_bytes(metrics.read_bytes()[:40])
    out = tmp_path / "out"
    args = {"compare": ["compare", str(good_run), str(bad)],
            "reproducibility": ["reproducibility", str(good_run), str(bad), "--out", str(out)],
            "report": ["report", "--runs", str(bad), "--out", str(out)]}[reader]
    assert f"{metrics}: not valid JSON" in errors(capsys, args)
    assert not out.exists()


@pytest.mark.parametrize("name", ["../../../../etc/hostname", "/etc/hostname", "link"])
@pytest.mark.parametrize("reader", ["compare", "reproducibility", "report"])
def test_digest_paths_are_confined_to_the_run(good_run, tmp_path, capsys, reader, name):
    """Item 3: a line naming a file outside the run (up the tree, absolute, or through a link) is damage:
    no reader hashes a file that is not the run's."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not the run's\n")

    def escape(run: Path) -> None:
        if name == "link":
            (run / "link").symlink_to(outside)
        line = f"{hashlib.sha256(outside.read_bytes()).hexdigest()}  {name}\n"
        with (run / DIGESTS).open("a") as f:
            f.write(line)

    bad = copy_run(good_run, tmp_path / "bad", escape)
    out = tmp_path / "out"
    args = {"compare": ["compare", str(good_run), str(bad)],
            "reproducibility": ["reproducibility", str(good_run), str(bad), "--out", str(out)],
            "report": ["report", "--runs", str(bad), "--out", str(out)]}[reader]
    err = errors(capsys, args)
    assert f"{bad / DIGESTS} line 5: damaged (names {name!r}, which is not a file inside the run" in err
    assert not out.exists()
