"""Replicated pipeline stages in the runtime (issue 42): a run on D stages x R replicas equals sequential with the
same micro_batches bit for bit, whatever the layout, with the cache and per-subnet partitions, SGD and Adam; the
replicas hold identical bits at the end; a run killed mid-way resumes at another layout, bitwise.

Most runs are threaded (the real stage workers and exchange, exact-byte messages: tests/baselines_harness.py);
one layout runs as spawned processes over gloo, and the 8-process layouts are in the slow set."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from naspipe.runtime.launch import replica_zero
from naspipe.runtime.recorder import StageReport
from naspipe.scheduling.replicas import ProcessGrid
from tests.conftest import ROOT, run_cli
from tests.test_runtime_micro import ADAM, CACHE, PER_SUBNET, _runs_here, run, same  # noqa: F401 - the fixture

M = 6  # parts: R = 2 and R = 3 both divide it, and 8 samples make uneven parts (2, 2, 1, 1, 1, 1)


@pytest.mark.parametrize("space", ["nlp.tiny", "cv.tiny"])
@pytest.mark.parametrize("adam", [False, True], ids=["sgd", "adam"])
def test_every_layout_equals_sequential_with_the_same_parts(space: str, adam: bool) -> None:
    settings = (f"micro_batches={M}", "split_backward=true", *(ADAM if adam else ()))
    reference = run("sequential", 1, space, *settings, steps=4)
    layouts = {(2, 2): CACHE, (1, 3): CACHE, (2, 3): PER_SUBNET, (3, 1): ()}
    for (stages, replicas), extra in layouts.items():
        result = run("csp", stages, space, *settings, f"replicas={replicas}", *extra, steps=4)
        assert same(result, reference), (space, adam, stages, replicas, extra)


@pytest.mark.parametrize("space", ["nlp.tiny", "cv.tiny"])
def test_windowed_shared_layers_take_the_replicas_sum(space: str) -> None:
    """The default config's shared layers: updated once per window from the subnets' gradients in subnet order, each
    subnet's summed over its parts in part order, across the replicas too."""
    settings = ("micro_batches=4", "split_backward=true", *ADAM, "shared_policy=windowed", "shared_window=4")
    reference = run("sequential", 1, space, *settings, steps=6)
    for stages, replicas in ((1, 2), (2, 2), (2, 4)):
        result = run("csp", stages, space, *settings, f"replicas={replicas}", steps=6)
        assert same(result, reference), (space, stages, replicas)


def test_replicas_without_a_split_and_with_one_part_each() -> None:
    """m = R: each replica runs one part (the policy's own count is 1, its update still waits for the sum)."""
    reference = run("sequential", 1, "toy", "micro_batches=4", *ADAM)
    for stages in (1, 2):
        assert same(run("csp", stages, "toy", "micro_batches=4", "replicas=4", *ADAM), reference), stages


def test_the_parts_really_are_shared_out() -> None:
    """Replicas are not copies running every part: with R = 2 each replica's executor reads half the parts, and the
    replicas' sums travel (metrics.json counts their bytes per stage)."""
    _, _, out = run("csp", 2, "toy", "micro_batches=4", "replicas=2")
    import json

    extra = json.loads((out / "metrics.json").read_text())["stage_extra"]
    assert all(e["replica_sum_bytes"] > 0 for e in extra)


def test_replicas_that_drift_apart_are_an_error_not_a_result() -> None:
    grid = ProcessGrid(2, 2)
    reports = [StageReport(0, {0: "a"}), StageReport(1, {1: "b"}), StageReport(0, {0: "a"}), StageReport(1, {1: "c"})]
    with pytest.raises(RuntimeError, match="stage 1: replica 1 ends with other bits than replica 0 in layers"):
        replica_zero(reports, grid)
    reports[3] = StageReport(1, {1: "b"})
    assert replica_zero(reports, grid) == reports[:2]


@pytest.mark.parametrize(("settings", "why"), [
    (("replicas=3", "micro_batches=4"), "must divide micro_batches"),
    (("replicas=2", "micro_batches=2", "system=gpipe"), "needs system csp"),
    (("replicas=0",), "must be >= 1"),
])
def test_bad_layouts_are_one_line(tmp_path: Path, settings: tuple[str, ...], why: str) -> None:
    args = [arg for s in settings for arg in ("--set", s)]
    result = run_cli("train", "--space", "toy", "--steps", "2", "--out", str(tmp_path / "run"), *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "replicas" in lines[0] and why in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def _train(out: Path, stages: int, replicas: int, steps: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("train", "--system", "csp", "--space", "nlp.tiny", "--stages", str(stages), "--steps", str(steps),
                   "--set", f"micro_batches={M}", "--set", f"replicas={replicas}", "--set", "timeout_s=120",
                   "--set", "cache.enabled=true", "--set", "split_backward=true", "--out", str(out), *extra,
                   timeout=300)


def test_spawned_replicas_over_gloo_equal_the_threaded_run(tmp_path: Path) -> None:
    """Four processes (D = 2 x R = 2) over gloo: the launcher's grid, links and process count, same bits."""
    result = _train(tmp_path / "spawned", 2, 2, 4)
    assert result.returncode == 0, result.stderr
    threaded = run("sequential", 1, "nlp.tiny", f"micro_batches={M}", "split_backward=true", steps=4)
    for name in ("losses.csv", "weights.sha256"):
        assert (tmp_path / "spawned" / name).read_text() == (threaded[2] / name).read_text(), name


def test_a_run_killed_mid_way_resumes_at_another_layout_bitwise(tmp_path: Path) -> None:
    """SIGKILL the launcher of a D = 2 x R = 2 run once its first checkpoint is complete (its stages die with it),
    then resume that checkpoint at D = 4 x R = 1: the straight run's bits."""
    work = tmp_path / "killed.partial"
    command = [sys.executable, "-m", "naspipe", "train", "--system", "csp", "--space", "nlp.tiny", "--stages", "2",
               "--steps", "400", "--set", f"micro_batches={M}", "--set", "replicas=2", "--set", "split_backward=true",
               "--set", "timeout_s=120", "--checkpoint-every", "4", "--out", str(tmp_path / "killed")]
    launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    first = work / "checkpoints" / "step-00000004"
    try:
        while not (first / "manifest.json").is_file() and launcher.poll() is None:
            time.sleep(0.05)
        launcher.send_signal(signal.SIGKILL)
    finally:
        _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == -signal.SIGKILL, stderr
    assert not (tmp_path / "killed").exists()
    resumed = run_cli("train", "--system", "csp", "--space", "nlp.tiny", "--stages", "4", "--steps", "12",
                      "--set", f"micro_batches={M}", "--set", "replicas=1", "--set", "split_backward=true",
                      "--set", "timeout_s=120", "--resume", str(first), "--out", str(tmp_path / "resumed"),
                      timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    straight = run("sequential", 1, "nlp.tiny", f"micro_batches={M}", "split_backward=true", steps=12)
    for name in ("losses.csv", "weights.sha256"):
        assert (tmp_path / "resumed" / name).read_text() == (straight[2] / name).read_text(), name


@pytest.mark.slow
@pytest.mark.parametrize(("stages", "replicas"), [(4, 2), (2, 4)])
def test_eight_spawned_processes_equal_sequential(tmp_path: Path, stages: int, replicas: int) -> None:
    """Eight processes over gloo, two layouts of the same m: the same bits as sequential."""
    result = _train(tmp_path / "run", stages, replicas, 6, "--set", "optimizer.name=adam")
    assert result.returncode == 0, result.stderr
    reference = run("sequential", 1, "nlp.tiny", f"micro_batches={M}", "split_backward=true", *ADAM[:1], steps=6)
    for name in ("losses.csv", "weights.sha256"):
        assert (tmp_path / "run" / name).read_text() == (reference[2] / name).read_text(), name
