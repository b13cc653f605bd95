"""The runtime's golden results (benchmarks/run_golden.py): a sample of the default workflow's runs, bit for bit.

The bitwise tests compare csp with sequential and the baselines at one stage; the golden also
holds every system at 2 and 4 stages, so a change that moves any system's bits (say pipedream's
at D=2, whose asynchronous updates depend on the stage layout) fails here. The sample is chosen
to cover the paths the other tests do not: pipedream's weight stash across a stage boundary and
csp's mirrored layers at 4 stages, both on cv.tiny (one dataset to prepare). The whole grid runs
under ``-m slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

pytest.importorskip("snakemake", reason="the golden runs the workflow's commands, its config validated by snakemake")

GOLDEN = Path(__file__).resolve().parents[1] / "benchmarks" / "golden" / "run_golden.json"
SAMPLE = ("pipedream/cv.tiny/D2", "csp/cv.tiny/D4")


def _check(names: list[str], work: Path) -> None:
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    runs = [run for run in golden.grid(golden.load_config(reference["steps"])) if run.name in names]
    assert sorted(run.name for run in runs) == sorted(names)
    found = golden.run_all(runs, reference["steps"], 2, work)
    assert set(found) == set(names)
    assert golden.differences(reference["runs"], found) == []


def test_sample_matches_golden(tmp_path: Path) -> None:
    _check(list(SAMPLE), tmp_path)


def test_golden_covers_every_system_and_stage_count() -> None:
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    expected = {run.name for run in golden.grid(golden.load_config(reference["steps"]))}
    assert set(reference["runs"]) == expected
    for name, outputs in reference["runs"].items():
        assert {"weights.sha256", "losses.csv", "final_loss_hex"} <= set(outputs), name


def test_differences_name_the_run_and_the_output() -> None:
    golden = load_benchmark("run_golden")
    reference = {"a/x/D2": {"weights.sha256": "1", "losses.csv": "2"}}
    found = {"a/x/D2": {"weights.sha256": "9", "losses.csv": "2"}, "b/x/D1": {}}
    assert golden.differences(reference, found) == ["a/x/D2: weights.sha256 differ", "b/x/D1: not in the reference"]


@pytest.mark.slow
def test_whole_grid_matches_golden(tmp_path: Path) -> None:
    reference = json.loads(GOLDEN.read_text())
    _check(sorted(reference["runs"]), tmp_path)
