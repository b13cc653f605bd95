"""The runtime's golden results (benchmarks/run_golden.py): a sample of the default workflow's runs, bit for bit,
under portable numerics: one reference that every x86-64 machine with AVX2 must match (no skip anywhere).

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
    """The runs match the portable reference (one for every x86-64 machine with AVX2, run_golden.py): strict on
    every machine, a machine of a vendor with no reference of its own included."""
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    refs = golden.references(reference)
    runs = [run for run in golden.grid(golden.load_config(reference["steps"])) if run.name in names]
    assert sorted(run.name for run in runs) == sorted(names)
    found = golden.run_all(runs, reference["steps"], 2, work)
    assert set(found) == set(names)
    closest, bad = golden.closest(refs, found)
    assert bad == [], f"against the reference of {closest['machine']} (this machine: {golden.kernel_family()})"


def test_sample_matches_golden(tmp_path: Path) -> None:
    _check(list(SAMPLE), tmp_path)


def test_golden_covers_every_system_and_stage_count() -> None:
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    expected = {run.name for run in golden.grid(golden.load_config(reference["steps"]))}
    refs = golden.references(reference)
    assert reference["numerics"] == "portable" and golden.load_config(72)["numerics"] == "portable"
    assert len({ref["machine"] for ref in refs}) == len(refs)  # at most one reference per machine (vendor)
    for ref in refs:
        assert set(ref["runs"]) == expected, ref["machine"]
        for name, outputs in ref["runs"].items():
            assert {"weights.sha256", "losses.csv", "final_loss_hex"} <= set(outputs), name


def test_the_check_takes_the_family_every_run_matches() -> None:
    golden = load_benchmark("run_golden")
    refs = [{"machine": "m1", "runs": {"a/x/D1": {"w": "1"}, "a/x/D2": {"w": "2"}}},
            {"machine": "m2", "runs": {"a/x/D1": {"w": "7"}, "a/x/D2": {"w": "8"}}}]
    assert golden.closest(refs, {"a/x/D1": {"w": "7"}, "a/x/D2": {"w": "8"}}) == (refs[1], [])
    # runs matching different families are not a pass: one family's reference must hold for all of them
    ref, bad = golden.closest(refs, {"a/x/D1": {"w": "1"}, "a/x/D2": {"w": "8"}})
    assert ref is refs[0] and bad == ["a/x/D2: w differ"]
    with pytest.raises(ValueError, match="references"):
        golden.references({"runs": {}})  # the one-reference format of before


def test_recording_writes_the_one_reference_or_keeps_other_vendors() -> None:
    golden = load_benchmark("run_golden")
    body = {"steps": 72, "numerics": "portable",
            "references": [{"machine": "m1", "runs": {"a": {}}}, {"machine": "m2", "runs": {"b": {}}}]}
    assert golden.recorded(body, "m2", {"c": {}}, 72)["references"] == [{"machine": "m2", "runs": {"c": {}}}]
    after = golden.recorded(body, "m2", {"c": {}}, 72, per_vendor=True)
    assert after["references"] == [{"machine": "m1", "runs": {"a": {}}}, {"machine": "m2", "runs": {"c": {}}}]
    assert golden.recorded(body, "m1", {"e": {}}, 36, per_vendor=True)["references"] == [
        {"machine": "m1", "runs": {"e": {}}}]  # another length: the others' runs no longer apply


def test_differences_name_the_run_and_the_output() -> None:
    golden = load_benchmark("run_golden")
    reference = {"a/x/D2": {"weights.sha256": "1", "losses.csv": "2"}}
    found = {"a/x/D2": {"weights.sha256": "9", "losses.csv": "2"}, "b/x/D1": {}}
    assert golden.differences(reference, found) == ["a/x/D2: weights.sha256 differ", "b/x/D1: not in the reference"]


@pytest.mark.slow
def test_whole_grid_matches_golden(tmp_path: Path) -> None:
    reference = json.loads(GOLDEN.read_text())
    _check(sorted(load_benchmark("run_golden").references(reference)[0]["runs"]), tmp_path)
