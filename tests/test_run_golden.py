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
    """The runs match a recorded kernel family's reference; on a machine of a family with none recorded (the
    bits are also the CPU kernels', see run_golden.py), a mismatch cannot tell a code change from the
    machine: skipped, naming the family, unless some family's reference still matches."""
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    refs = golden.references(reference)
    runs = [run for run in golden.grid(golden.load_config(reference["steps"])) if run.name in names]
    assert sorted(run.name for run in runs) == sorted(names)
    found = golden.run_all(runs, reference["steps"], 2, work)
    assert set(found) == set(names)
    closest, bad = golden.closest(refs, found)
    machine = golden.kernel_family()
    if bad and machine not in {ref["machine"] for ref in refs}:
        pytest.skip(f"no golden reference for this machine's CPU kernels ({machine}) and none of the recorded "
                    f"families' matches ({bad[0]}): record one with run_golden.py --record")
    assert bad == [], f"against the reference of {closest['machine']}"


def test_sample_matches_golden(tmp_path: Path) -> None:
    _check(list(SAMPLE), tmp_path)


def test_golden_covers_every_system_and_stage_count() -> None:
    golden = load_benchmark("run_golden")
    reference = json.loads(GOLDEN.read_text())
    expected = {run.name for run in golden.grid(golden.load_config(reference["steps"]))}
    refs = golden.references(reference)
    assert len({ref["machine"] for ref in refs}) == len(refs)  # one reference per kernel family
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


def test_recording_replaces_only_this_family() -> None:
    golden = load_benchmark("run_golden")
    body = {"steps": 72, "references": [{"machine": "m1", "runs": {"a": {}}}, {"machine": "m2", "runs": {"b": {}}}]}
    after = golden.recorded(body, "m2", {"c": {}}, 72)
    assert after["references"] == [{"machine": "m1", "runs": {"a": {}}}, {"machine": "m2", "runs": {"c": {}}}]
    assert golden.recorded(body, "m3", {"d": {}}, 72)["references"][-1] == {"machine": "m3", "runs": {"d": {}}}
    assert golden.recorded(body, "m1", {"e": {}}, 36)["references"] == [{"machine": "m1", "runs": {"e": {}}}]


def test_differences_name_the_run_and_the_output() -> None:
    golden = load_benchmark("run_golden")
    reference = {"a/x/D2": {"weights.sha256": "1", "losses.csv": "2"}}
    found = {"a/x/D2": {"weights.sha256": "9", "losses.csv": "2"}, "b/x/D1": {}}
    assert golden.differences(reference, found) == ["a/x/D2: weights.sha256 differ", "b/x/D1: not in the reference"]


@pytest.mark.slow
def test_whole_grid_matches_golden(tmp_path: Path) -> None:
    reference = json.loads(GOLDEN.read_text())
    _check(sorted(load_benchmark("run_golden").references(reference)[0]["runs"]), tmp_path)
