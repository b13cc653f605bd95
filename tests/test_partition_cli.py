"""``naspipe partition`` and the ``partition_file`` config key: the file round-trips and training uses its bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from naspipe.cli import main as cli_main
from naspipe.config import load_config
from naspipe.partition import balanced_partition
from naspipe.partition_file import read_partition_file
from naspipe.runplan.job import build_job, position_costs
from tests.baselines_harness import SMALL

SPACE_SETS = [a for s in SMALL if s.startswith("space.") for a in ("--set", s)]


def partition(tmp_path: Path, stages: int, costs: str = "params", name: str = "p.json") -> Path:
    out = tmp_path / name
    assert (
        cli_main(
            ["partition", "--space", "toy", *SPACE_SETS, "--stages", str(stages), "--costs", costs, "--out", str(out)]
        )
        == 0
    )
    return out


@pytest.mark.parametrize("costs", ["params", "uniform"])
def test_file_round_trips_and_holds_the_bounds_training_would_compute(tmp_path, costs, capsys):
    path = partition(tmp_path, 3, costs)
    data = read_partition_file(path)
    raw = json.loads(path.read_text())
    assert raw["bounds"] == list(data.bounds) and raw["stages"] == 3 and raw["costs"] == costs
    assert raw["space"] == "toy" and raw["space_options"]["blocks"] == 4
    assert raw["imbalance"] == pytest.approx(max(raw["stage_costs"]) / (sum(raw["stage_costs"]) / 3))
    config = load_config(None, [*SMALL, f"partition_costs={costs}"], {"stages": 3})
    job = build_job(config)
    assert data.bounds == job.partition.bounds
    costs_list = position_costs(job.space, costs)
    assert data.bounds == balanced_partition(costs_list, 3).bounds
    assert list(data.stage_costs) == [sum(costs_list[p] for p in job.partition.positions(k)) for k in range(3)]
    printed = capsys.readouterr().out
    assert sum(line.startswith("stage ") for line in printed.splitlines()) == 3 and "imbalance" in printed


def test_training_uses_the_file_bounds_instead_of_its_own(tmp_path):
    path = partition(tmp_path, 2)
    raw = json.loads(path.read_text())
    raw["bounds"] = [0, 1, raw["bounds"][-1]]  # deliberately unbalanced: only the file can produce it
    raw["stage_costs"] = [1.0, 5.0]
    path.write_text(json.dumps(raw))
    job = build_job(load_config(None, [*SMALL, f"partition_file={path}"], {"stages": 2, "system": "csp"}))
    assert job.partition.bounds == (0, 1, 6)
    assert build_job(load_config(None, list(SMALL), {"stages": 2})).partition.bounds != (0, 1, 6)


def test_a_file_for_another_run_is_a_one_line_error_and_nothing_is_written(tmp_path, capsys):
    path = partition(tmp_path, 3)
    other_space = tmp_path / "other.json"
    other_space.write_text(json.dumps({**json.loads(path.read_text()), "space": "cv.tiny"}))
    capsys.readouterr()
    base = ["train", "--space", "toy", "--system", "csp", "--steps", "2"]

    def sets(*items: str) -> list[str]:  # each key once (a repeated --set is refused): an item replaces SMALL's
        given = {item.partition("=")[0] for item in items}
        return [a for s in SMALL if s.startswith("space.") and s.partition("=")[0] not in given
                for a in ("--set", s)] + [a for s in items for a in ("--set", s)]

    cases = [
        (["--stages", "2", *sets(f"partition_file={path}")], "made for 3 stages"),
        (["--stages", "3", *sets(f"partition_file={path}", "space.blocks=5")], "positions"),
        (["--stages", "3", *sets(f"partition_file={other_space}")], "made for space 'cv.tiny'"),
    ]
    for extra, why in cases:
        out = tmp_path / "run"
        assert cli_main([*base, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("naspipe: error: partition file") and why in err and "\n" not in err
        assert not out.exists()


def test_bad_partition_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "p.json"
    cases = [("toy", "2", str(tmp_path / "missing.csv")), ("toy", "99", "params"), ("nope", "2", "params")]
    for space, stages, costs in cases:
        argv = ["partition", "--space", space, *SPACE_SETS, "--stages", stages, "--costs", costs, "--out", str(out)]
        assert cli_main(argv) == 2
        assert capsys.readouterr().err.startswith("naspipe: error:")
        assert not out.exists()
    broken = tmp_path / "broken.json"
    broken.write_text('{"space": "toy", "stages": 2, "bounds": [0, 3]}')
    assert (
        cli_main(
            [
                "train",
                "--space",
                "toy",
                "--stages",
                "2",
                *SPACE_SETS,
                "--set",
                f"partition_file={broken}",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    assert "partition file" in capsys.readouterr().err
