"""The search winner's baseline: random subnets written by ``naspipe search --random-subnets K``, retrained
like the winner, and scored in one process by ``naspipe evaluate --own-subnet`` (the run summary's search line).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from naspipe.cli import main
from tests.test_search import SEARCH, search, train


@pytest.fixture(scope="module")
def supernet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("supernet") / "run", "cv.tiny", "csp", 1)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_search_writes_the_random_subnets_evaluate_samples(supernet, tmp_path):
    out = search(supernet, tmp_path / "s", "--random-subnets", "3")
    drawn = [json.loads((out / f"random-{k}.json").read_text())["choices"] for k in range(3)]
    assert not (out / "random-3.json").exists()
    assert len({tuple(c) for c in drawn}) == 3
    assert main(["evaluate", "--run", str(supernet), "--sample", "3", "--seed", "3", "--batches", "1",
                 "--calib-batches", "1", "--out", str(tmp_path / "sample.csv")]) == 0
    assert [json.loads(r["choices"]) for r in rows(tmp_path / "sample.csv")] == drawn


def test_own_subnet_scores_each_retrain_on_its_subnet_in_one_process(supernet, tmp_path):
    out = search(supernet, tmp_path / "s", "--random-subnets", "2")
    retrains = [train(tmp_path / f"r{k}", "cv.tiny", "csp", 1, "--subnet", str(out / f"random-{k}.json"), steps=4)
                for k in range(2)]
    scoring = ["--batches", "1", "--calib-batches", "1"]
    assert main(["evaluate", "--run", str(retrains[0]), "--own-subnet", str(retrains[1]), *scoring,
                 "--out", str(tmp_path / "own.csv")]) == 0
    together = rows(tmp_path / "own.csv")
    assert [r["space"] for r in together] == ["cv.tiny", "cv.tiny"]
    for k, run in enumerate(retrains):
        assert main(["evaluate", "--run", str(run), "--subnets", str(out / f"random-{k}.json"), *scoring,
                     "--out", str(tmp_path / f"alone{k}.csv")]) == 0
        (alone,) = rows(tmp_path / f"alone{k}.csv")
        assert {m: together[k][m] for m in ("choices", "top1", "loss")} == {m: alone[m] for m in ("choices", "top1",
                                                                                                   "loss")}


def test_own_subnet_refuses_a_supernet_run_in_one_line(supernet, tmp_path, capsys):
    assert main(["evaluate", "--run", str(supernet), "--own-subnet", "--out", str(tmp_path / "x.csv")]) == 2
    assert "trained no fixed subnet" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_a_negative_count_of_random_subnets_is_refused(supernet, tmp_path):
    assert main(["search", "--run", str(supernet), *SEARCH, "--random-subnets", "-1", "--out",
                 str(tmp_path / "s")]) == 2
    assert not (tmp_path / "s").exists()
