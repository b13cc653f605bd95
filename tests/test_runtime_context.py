"""The context manager and mirroring in the runtime: csp with a small device cache and per-subnet
partitions is bitwise the sequential reference (any D, SGD and Adam, toy/nlp.tiny/cv.tiny, across
resume), and the measured device peak never exceeds the budget (activations are not in the arena)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from naspipe import cli

SMALL = ["--set", "space.blocks=6", "--set", "space.candidates=3", "--set", "space.dim=16", "--set", "space.seq_len=8"]
ADAM = ["--set", "optimizer.name=adam", "--set", "optimizer.lr=0.01"]
PER_SUBNET = ["--set", "partition_mode=per-subnet"]


def cache(budget: str = "1x", horizon: int = 8) -> list[str]:
    return ["--set", "cache.enabled=true", "--set", f"cache.budget={budget}", "--set", f"cache.horizon={horizon}"]


def train(out: Path, system: str, stages: int, *extra: str, steps: int = 8, seed: int = 0,
          space: str = "toy") -> Path:
    args = ["train", "--space", space, "--system", system, "--stages", str(stages), "--steps", str(steps),
            "--seed", str(seed), "--out", str(out), *(SMALL if space == "toy" else []), *extra]
    assert cli.main(args) == 0
    return out


def assert_identical(capsys: pytest.CaptureFixture[str], *runs: Path) -> None:
    capsys.readouterr()
    assert cli.main(["compare", *map(str, runs)]) == 0
    assert capsys.readouterr().out.count("IDENTICAL") == len(runs) - 1


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def assert_within_budget(run: Path) -> None:
    m = metrics(run)
    for extra in m["stage_extra"]:
        assert 0 < extra["cache_peak_bytes"] <= extra["cache_budget_bytes"]
        assert 0 <= extra["cache_hit_rate"] <= 1 and extra["swap_in_bytes"] > 0
        if m["device"] == "cpu":  # no separate device memory: the device's peak is the cache's
            assert extra["peak_device_bytes"] == extra["cache_peak_bytes"]
        else:  # on CUDA the allocator's peak also holds activations and workspaces
            assert extra["peak_device_bytes"] >= extra["cache_peak_bytes"]
    assert m["cache_peak_bytes"] <= m["cache_budget_bytes"]


def test_cached_and_mirrored_csp_equal_sequential_and_stay_in_budget(tmp_path, capsys):
    reference = train(tmp_path / "seq", "sequential", 1)
    runs = [train(tmp_path / "c2", "csp", 2, *cache("1x")),
            train(tmp_path / "c4", "csp-no-predictor", 4, *cache("1.5x", 0)),
            train(tmp_path / "m3", "csp", 3, *PER_SUBNET, *cache("1x"))]
    assert_identical(capsys, reference, *runs)
    for run in runs:
        assert_within_budget(run)
    assert metrics(runs[0])["swap_out_bytes"] > 0  # a small cache evicts updated layers: written back
    assert metrics(runs[2])["mirror_bytes"] > 0  # per-subnet partitions: layers really moved between stages


def test_cached_mirrored_adam_across_checkpoint_and_resume(tmp_path, capsys):
    reference = train(tmp_path / "seq", "sequential", 1, *ADAM, steps=10)
    part = train(tmp_path / "part", "csp", 3, *ADAM, *PER_SUBNET, *cache("1x", 4), "--checkpoint-every", "3",
                 steps=6)
    assert metrics(part)["mirror_bytes"] > 0
    resumed = ["train", "--system", "csp", "--stages", "2", "--steps", "10", "--seed", "0", "--resume", str(part),
               "--out", str(tmp_path / "resumed"), *SMALL, *ADAM, *cache("2x")]
    assert cli.main(resumed) == 0
    assert_identical(capsys, reference, tmp_path / "resumed")


def test_a_budget_below_one_layer_names_the_layer_its_bytes_and_the_budget(tmp_path, capsys):
    args = ["train", "--system", "csp", "--stages", "1", "--steps", "2", "--out", str(tmp_path / "r"), *SMALL,
            *cache("1000")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'cache.budget': 1000 bytes is below one subnet's share of stage 0" in err[0]
    assert "largest: layer" in err[0] and not (tmp_path / "r").exists()


@pytest.mark.parametrize("space", ["cv.tiny"])  # batch-norm buffers move too; nlp.tiny is in the slow grid
def test_cached_mirrored_csp_in_the_real_spaces(tmp_path, capsys, space):
    reference = train(tmp_path / "seq", "sequential", 1, space=space, steps=4)
    run = train(tmp_path / "c4", "csp", 4, *PER_SUBNET, *cache("1x"), space=space, steps=4)
    assert_identical(capsys, reference, run)
    assert_within_budget(run)
    assert metrics(run)["mirror_bytes"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("space", ["toy", "nlp.tiny", "cv.tiny"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cached_csp_equals_sequential_wide_grid(tmp_path, capsys, space, optimizer):
    opt = ADAM if optimizer == "adam" else []
    reference = train(tmp_path / "seq", "sequential", 1, *opt, space=space, steps=6)
    runs = [train(tmp_path / f"c{d}", "csp", d, *opt, *PER_SUBNET, *cache("1x", 8), space=space, steps=6)
            for d in (1, 2, 3, 4)]
    assert_identical(capsys, reference, *runs)
    for run in runs:
        assert_within_budget(run)
