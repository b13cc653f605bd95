"""The simulator's golden dump (benchmarks/sim_golden.py) against its committed reference.

Every observable of a fixed grid of small simulations (task order, trace, metrics, memory,
bound) must hash as it did when the reference was written: optimisations of the simulator
keep every decision and number. The default suite checks a spread sample (every 37th
configuration: each system, stage count, space, cost model and option appears); the whole grid runs under
``-m slow`` and as ``python benchmarks/sim_golden.py --check benchmarks/golden/sim_golden.json``.
"""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from tests.conftest import ROOT, load_benchmark

REFERENCE = ROOT / "benchmarks" / "golden" / "sim_golden.json"


def golden() -> ModuleType:
    return load_benchmark("sim_golden")


def reference() -> dict[str, str]:
    hashes: dict[str, str] = json.loads(REFERENCE.read_text())["hashes"]
    return hashes


def test_the_reference_covers_the_whole_grid():
    names = [case.name for case in golden().grid()]
    assert len(names) == len(set(names)) == 1000
    assert set(names) == set(reference())


def test_a_sample_of_the_grid_matches_the_reference():
    g = golden()
    sample = g.select(g.grid(), 37, None)
    assert {c.system for c in sample} == set(g.SYSTEMS) and {c.stages for c in sample} == set(g.STAGES)
    options = {(c.partition, c.cache, c.shared) for c in sample}
    assert options >= {("per-subnet", True, "causal"), ("static", False, "frozen")}
    assert {c.costs for c in sample} == {"uniform", "profile", "analytic"}
    got = g.run(sample, None)
    assert g.check(reference(), got) == []


def test_a_changed_observable_is_named(tmp_path):
    g = golden()
    case = g.grid()[1]
    got = g.run([case], tmp_path)
    assert g.check(reference(), got) == []
    dumped = json.loads(next(tmp_path.iterdir()).read_text())
    dumped["metrics"]["makespan_s"] += 1e-12
    assert g.check(reference(), {case.name: g.digest(dumped)}) == [case.name]


def test_check_exits_1_naming_a_difference_and_2_on_a_bad_reference(tmp_path, capsys):
    g = golden()
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps({"hashes": {**reference(), g.grid()[0].name: "0" * 20}}))
    assert g.main(["--check", str(bad), "--every", "1000"]) == 1
    assert g.grid()[0].name in capsys.readouterr().err
    bad.write_text("not json")
    assert g.main(["--check", str(bad)]) == 2


@pytest.mark.slow
def test_the_whole_grid_matches_the_reference():
    g = golden()
    assert g.check(reference(), g.run(g.grid(), None)) == []


def test_the_micro_batched_grid_matches_its_reference():
    """The part-level schedules (micro-batches, split backward; cache, blocking sends, per-subnet partitions,
    nlp.c1 at 16 stages), every configuration: ~10 s."""
    g = golden()
    micro: dict[str, str] = json.loads(REFERENCE.read_text())[g.MICRO_KEY]
    cases = g.micro_grid()
    assert {c.name for c in cases} == set(micro)
    assert g.check(micro, g.run(cases, None)) == []
