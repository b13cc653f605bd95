"""The simulator's golden dump: every observable of ~1000 small runs, hashed, against a committed reference.

Optimising the simulator (the engine's hot loop, the memory model, the bound) must not change
a single decision or number. This check runs a fixed grid of small ``naspipe simulate``
configurations (every system of the grid, ablations included; 1, 2, 3, 4 and 8 stages;
static and per-subnet partitions; shared layers frozen and causal; the context cache off
and on; uniform costs, costs from a profile and analytic costs; three spaces and seeds) and
hashes, per configuration, everything a run shows: each stage's task order, every trace
event, the metrics dict (stats, makespan, bubble, cache hits, memory, bound), the memory
model's per-stage holdings and report, and the longest path. The reference holds one hash
per configuration (``benchmarks/golden/sim_golden.json``); ``--check`` names each
configuration whose hash differs.

    python benchmarks/sim_golden.py --check benchmarks/golden/sim_golden.json    # ~1 min: 0 differ
    python benchmarks/sim_golden.py --check benchmarks/golden/sim_golden.json --every 25   # a sample
    python benchmarks/sim_golden.py --check REF --only 'csp/' --dump /tmp/new  # observables as JSON, to diff
    python benchmarks/sim_golden.py --write benchmarks/golden/sim_golden.json    # only for an intended change

Exit status: 0 when every configuration checked matches, 1 when some differ (each named on
stderr), 2 on bad arguments. The grid is fixed here (systems named, not read from the
registry), so a newly added policy does not change it; a change that is meant to alter
results regenerates the reference and says why in its commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe.fsutil import atomic_write_text  # noqa: E402

SYSTEMS = ("sequential", "csp", "gpipe", "pipedream", "vpipe", "csp-no-scheduler", "csp-no-predictor")
CACHE_SYSTEMS = ("csp", "csp-no-scheduler", "csp-no-predictor")
STAGES = (1, 2, 3, 4, 8)
SHARED = ("frozen", "causal")
HARDWARE = "rtx2080ti-pcie3-40gbe"
# (label, space overrides, seed, subnets): every space has 8 positions, so 8 stages hold one each
SPACES = (
    ("toy6x3", ("space.name=toy", "space.blocks=6", "space.candidates=3"), 0, 24),
    ("nlp.tiny", ("space.name=nlp.tiny",), 1, 20),
    ("cv.tiny", ("space.name=cv.tiny",), 2, 20),
)
ANALYTIC_SPACE = ("toy6x4", ("space.name=toy", "space.blocks=6", "space.candidates=4"), 3, 24)


@dataclass(frozen=True)
class Case:
    """One configuration of the grid; ``name`` is its key in the reference."""

    space: str
    overrides: tuple[str, ...]
    seed: int
    subnets: int
    system: str
    stages: int
    partition: str  # static | per-subnet
    shared: str  # frozen | causal
    cache: bool
    costs: str  # uniform | profile | analytic
    recompute: bool = True
    batch: str = "config"

    @property
    def name(self) -> str:
        return (f"{self.space}/{self.system}/D{self.stages}/{self.partition}/{self.shared}/"
                f"{'cache' if self.cache else 'nocache'}/{self.costs}/{'rc' if self.recompute else 'norc'}/"
                f"batch-{self.batch}")


def grid() -> list[Case]:
    """The fixed grid (1000 configurations), in a stable order."""
    cases = list(_main_grid())
    label, overrides, seed, subnets = ANALYTIC_SPACE
    for stages in (2, 4):
        for shared in SHARED:
            for system in SYSTEMS:  # without recomputation, at the largest batch that fits
                cases.append(Case(label, overrides, seed, subnets, system, stages, "static", shared, False,
                                  "analytic", recompute=False, batch="max"))
            for system in CACHE_SYSTEMS:
                cases.append(Case(label, overrides, seed, subnets, system, stages, "static", shared, True,
                                  "analytic", batch="max"))
    return cases


def _main_grid() -> Iterator[Case]:
    for label, overrides, seed, subnets in SPACES:
        for stages in STAGES:
            for shared in SHARED:
                for costs in ("uniform", "profile"):
                    for partition in ("static", "per-subnet"):
                        for cache in (False, True):
                            systems = SYSTEMS if partition == "static" and not cache else CACHE_SYSTEMS
                            for system in systems:
                                yield Case(label, overrides, seed, subnets, system, stages, partition, shared,
                                           cache, costs)


def synthetic_profile(shape: Any) -> str:
    """A fixed profile CSV of the space ``shape`` (one row per op and position, made-up but varied
    milliseconds), so profile-priced runs are reproducible without measuring anything. Its parameter
    bytes are the layers' own (a profile is checked against the space it prices; the simulator reads
    only the milliseconds)."""
    from naspipe.profile.costs import position_layer_ids, position_role
    from naspipe.profile.rows import ProfileRow, format_profile_csv

    structure = shape.structure
    rows = []
    for position in range(structure.num_positions):
        for lid in position_layer_ids(structure, position):
            op = structure.op_name(lid)
            weight = 1 + int(hashlib.sha256(f"{op}@{position}".encode()).hexdigest()[:4], 16) % 17
            rows.append(ProfileRow(structure.name, op, position_role(structure, position), str(position), 1,
                                   "8x16x64:float32", "cpu", "synthetic", 1, True, 1, 0, 0.25 * weight,
                                   0.75 * weight + 0.125 * (position % 3), 0.01 * weight,
                                   4 * shape.layer_tensors(lid)[0], 2048 * weight))
    return format_profile_csv(rows)


def observables(case: Case, workdir: Path) -> dict[str, Any]:
    """Everything one configuration's simulation shows, as JSON-ready data."""
    from naspipe.commands.simulate import build_setup
    from naspipe.config import load_config
    from naspipe.runplan.job import build_shape
    from naspipe.scheduling.policies import POLICIES
    from naspipe.sim.bound import longest_path
    from naspipe.sim.costs import with_weight_stash
    from naspipe.sim.hardware import load_hardware
    from naspipe.sim.memory import memory_report, stage_holdings
    from naspipe.sim.run import cache_budgets, effective_recompute, simulate_run, uses_cache

    sets = [*case.overrides, f"shared_policy={case.shared}", f"partition_mode={case.partition}",
            f"cache.enabled={str(case.cache).lower()}", f"recompute={str(case.recompute).lower()}"]
    costs_spec = case.costs
    if case.costs == "profile":
        base = load_config(None, list(case.overrides), {})
        path = workdir / f"{case.space}.csv"
        if not path.exists():
            path.write_text(synthetic_profile(build_shape(base)))
        costs_spec = str(path)
        sets.append(f"partition_costs={path}")
    config = load_config(None, sets, {"system": case.system, "stages": case.stages, "steps": case.subnets,
                                      "seed": case.seed, "progress": "off"})
    setup = replace(build_setup(config, load_hardware(HARDWARE), costs_spec), batch=case.batch)
    metrics, trace = simulate_run(setup)
    recompute = effective_recompute(setup.system, setup.recompute)
    costs = with_weight_stash(setup.costs, POLICIES[setup.system].stash_weights)
    priced = replace(setup, costs=costs)
    memory = memory_report(setup.plan, setup.system, costs, setup.options, recompute, setup.subnets,
                           cache_budgets(priced) if uses_cache(priced) else None)
    order: dict[int, list[str]] = {}
    for event in trace:
        if event.get("ph") == "X" and event.get("cat") != "waiting":
            order.setdefault(int(str(event["tid"])), []).append(str(event["name"]))
    data = {
        "order": {str(k): v for k, v in sorted(order.items())},
        "trace": trace,
        "metrics": metrics,
        "holdings": [asdict(h) for h in stage_holdings(setup.plan, costs, setup.subnets)],
        "memory": {**asdict(memory), "per_host": {str(k): v for k, v in memory.per_host.items()}},
        "bound": longest_path(setup.plan, setup.system, setup.subnets, costs, recompute),
    }
    # the profile's temporary path appears in the costs' name: the same everywhere instead
    return json.loads(json.dumps(data).replace(str(workdir), "PROFILE_DIR"))


def digest(data: dict[str, Any]) -> str:
    """A short hash of the observables (floats as exact ``repr`` through ``json``)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def run(cases: list[Case], dump: Path | None) -> dict[str, str]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            data = observables(case, Path(tmp))
            out[case.name] = digest(data)
            if dump is not None:
                target = dump / (re.sub(r"[^A-Za-z0-9.+-]+", "_", case.name) + ".json")
                atomic_write_text(target, json.dumps(data, sort_keys=True, indent=1))
    return out


def select(cases: list[Case], every: int, only: str | None) -> list[Case]:
    """Every ``every``-th case (a spread sample: the grid's order cycles through systems fastest),
    of those whose name contains ``only``."""
    chosen = [c for c in cases if only is None or only in c.name]
    return chosen[::every]


def check(reference: dict[str, str], got: dict[str, str]) -> list[str]:
    """Names of the configurations whose hash differs from (or is missing in) the reference."""
    return [name for name, value in got.items() if reference.get(name) != value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, metavar="FILE", help="write the reference (the whole grid)")
    action.add_argument("--check", type=Path, metavar="FILE", help="compare with the reference, naming each difference")
    parser.add_argument("--every", type=int, default=1, help="check only every N-th configuration (default 1: all)")
    parser.add_argument("--only", help="check only configurations whose name contains this text")
    parser.add_argument("--dump", type=Path, metavar="DIR", help="also write each configuration's observables here")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every {args.every}: must be >= 1")
    cases = grid()
    if args.write:
        if args.every != 1 or args.only:
            parser.error("--write covers the whole grid: no --every or --only")
        hashes = run(cases, args.dump)
        atomic_write_text(args.write, json.dumps({"configurations": len(hashes), "hashes": hashes}, indent=0) + "\n")
        print(f"wrote {len(hashes)} configurations to {args.write}")
        return 0
    try:
        reference = json.loads(args.check.read_text())["hashes"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"{args.check}: not a golden reference ({exc})", file=sys.stderr)
        return 2
    got = run(select(cases, args.every, args.only), args.dump)
    differ = check(reference, got)
    for name in differ:
        print(f"differs: {name}", file=sys.stderr)
    print(f"{len(got)} configurations checked, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
