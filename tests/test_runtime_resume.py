"""Checkpoint and resume: the resumed run is bitwise the uninterrupted one; crashes keep checkpoints."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.conftest import run_cli
from tests.test_runtime_repro import SMALL, assert_identical, train

BYTE_IDENTICAL = ("losses.csv", "weights.sha256")


def assert_same_bytes(a, b) -> None:
    """Byte-identical outputs across stage counts: losses and weights; in ``layer_hashes.csv`` all but
    the stage column; in ``access_order.csv`` the rows of the choice layers, whose order CSP fixes (a
    frozen shared layer's interleaving of forwards and backwards depends on the stage count)."""
    for name in BYTE_IDENTICAL:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    hashes_a, hashes_b = ([row.split(",")[::3] + row.split(",")[1:2]
                           for row in (run / "layer_hashes.csv").read_text().splitlines()]
                          for run in (a, b))
    assert hashes_a == hashes_b
    rows_a, rows_b = ((run / "access_order.csv").read_text().splitlines() for run in (a, b))
    assert len(rows_a) == len(rows_b)
    assert rows_a[2:-1] == rows_b[2:-1]  # header, the embedding and the head left out (toy space)


def test_resume_is_bitwise_the_uninterrupted_run(tmp_path):
    adam = ["--set", "optimizer.name=adam", "--set", "optimizer.lr=0.01"]
    full = train(tmp_path / "full", "csp", 2, 0, *adam, steps=12)
    part = train(tmp_path / "part", "csp", 2, 0, *adam, "--checkpoint-every", "4", steps=8)
    checkpoints = sorted(p.name for p in (part / "checkpoints").iterdir())
    assert checkpoints == ["step-00000004", "step-00000008"]  # a drain point and the run's final checkpoint
    result = run_cli("train", "--system", "csp", "--stages", "3", "--steps", "12", "--seed", "0", "--resume", str(part),
                     "--out", str(tmp_path / "resumed"), *SMALL, *adam)
    assert result.returncode == 0, result.stderr
    assert_identical(full, tmp_path / "resumed")
    assert_same_bytes(full, tmp_path / "resumed")


def test_resume_rejects_a_different_config(tmp_path):
    part = train(tmp_path / "part", "csp", 1, 0, "--checkpoint-every", "2", steps=4)
    result = run_cli("train", "--system", "csp", "--stages", "1", "--steps", "8", "--seed", "1", "--resume", str(part),
                     "--out", str(tmp_path / "resumed"), *SMALL)
    assert result.returncode == 2
    assert "config key 'seed'" in result.stderr
    assert not (tmp_path / "resumed").exists()


def test_a_crashing_stage_stops_every_process_and_keeps_the_checkpoint_resumable(tmp_path):
    out = tmp_path / "run"
    # A hang would exceed run_cli's timeout (TimeoutExpired fails the test); no wall-clock assertion.
    result = run_cli("train", "--system", "csp", "--stages", "3", "--steps", "40", "--seed", "0", "--out", str(out),
                     "--checkpoint-every", "4", *SMALL, env={"NASPIPE_FAIL_AT": "1:10"}, timeout=120)
    assert result.returncode != 0
    assert "injected failure" in result.stderr and "Traceback" in result.stderr
    assert "stage 1 failed" in result.stderr
    assert not out.exists()  # nothing published
    work = tmp_path / "run.partial"
    complete = sorted(p.parent.name for p in (work / "checkpoints").glob("step-*/manifest.json"))
    assert complete == ["step-00000004", "step-00000008"]
    manifest = json.loads((work / "checkpoints" / "step-00000008" / "manifest.json").read_text())
    assert manifest["step"] == 8 and manifest["stages"] == 3
    for name in manifest["files"]:
        if name.endswith(".pt"):
            shard = torch.load(work / "checkpoints" / "step-00000008" / name, weights_only=True)
            assert shard["params"]
    # Continue the interrupted run in place at another stage count: bitwise the straight run.
    result = run_cli("train", "--system", "csp", "--stages", "2", "--steps", "12", "--seed", "0", "--out", str(out),
                     "--resume", str(work), *SMALL)
    assert result.returncode == 0, result.stderr
    assert not work.exists()
    assert_same_bytes(train(tmp_path / "straight", "csp", 1, 0, steps=12), out)


def resume(tmp_path, source, system: str, stages: int, steps: int, *extra: str, out: str = "resumed"):
    return run_cli("train", "--system", system, "--stages", str(stages), "--steps", str(steps), "--seed", "0",
                   "--resume", str(source), "--out", str(tmp_path / out), *SMALL, *extra)


def assert_refused(result, *names: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert all(name in lines[0] for name in names), lines[0]


def test_bsp_resumes_only_at_its_own_bulk_size(tmp_path):
    """GPipe's numbers depend on the bulk (0 means --stages): another bulk would train a hybrid (issue 18.1)."""
    part = train(tmp_path / "part", "gpipe", 2, 0, "--checkpoint-every", "4", steps=4)
    assert_refused(resume(tmp_path, part, "gpipe", 4, 8), "'gpipe'", "bulk_size", "= 2 in the checkpoint but 4")
    assert not (tmp_path / "resumed").exists() and not (tmp_path / "resumed.partial").exists()
    full = train(tmp_path / "full", "gpipe", 2, 0, steps=8)
    same_bulk = resume(tmp_path, part, "gpipe", 4, 8, "--set", "bulk_size=2")  # another D, the same numbers
    assert same_bulk.returncode == 0, same_bulk.stderr
    assert_identical(full, tmp_path / "resumed")


@pytest.mark.slow  # five PipeDream runs (~75 s); the bsp and csp resume contracts stay in the default suite
def test_asp_resumes_only_with_its_own_pipeline_and_drain_points(tmp_path):
    """PipeDream's updates land as backwards finish: stages and drain points decide its numbers (issue 18.1)."""
    part = train(tmp_path / "part", "pipedream", 2, 0, "--checkpoint-every", "3", steps=6)
    assert_refused(resume(tmp_path, part, "pipedream", 3, 9, "--checkpoint-every", "3"), "'pipedream'", "stages")
    assert_refused(resume(tmp_path, part, "pipedream", 2, 9), "checkpoint_every")
    ended = train(tmp_path / "ended", "pipedream", 2, 0, "--checkpoint-every", "4", steps=6)  # final step 6: no drain
    assert_refused(resume(tmp_path, ended, "pipedream", 2, 8, "--checkpoint-every", "4"), "drains its pipeline")
    full = train(tmp_path / "full", "pipedream", 2, 0, "--checkpoint-every", "3", steps=9)
    same = resume(tmp_path, part, "pipedream", 2, 9, "--checkpoint-every", "3")
    assert same.returncode == 0, same.stderr
    assert_identical(full, tmp_path / "resumed")


def test_a_run_killed_after_its_final_checkpoint_is_finished_bitwise(tmp_path):
    """``--resume DIR.partial`` with the run's own --steps assembles and publishes the outputs (issue 18.5)."""
    full = train(tmp_path / "full", "csp", 2, 0, "--checkpoint-every", "4", steps=8)
    partial = tmp_path / "run.partial"
    shutil.copytree(full, partial)
    for name in ("losses.csv", "weights.sha256", "layer_hashes.csv", "access_order.csv", "trace.json", "metrics.json"):
        (partial / name).unlink()  # as if killed between the final checkpoint and the outputs
    result = resume(tmp_path, partial, "csp", 2, 8, out="run")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["subnets"] == 8
    assert not partial.exists()
    assert_identical(full, tmp_path / "run")
    assert_same_bytes(full, tmp_path / "run")
