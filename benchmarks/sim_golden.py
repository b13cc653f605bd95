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
    python benchmarks/sim_golden.py --micro --check benchmarks/golden/sim_golden.json    # the micro-batched grid

The micro-batched grid (:func:`micro_grid`: part-level schedules, ~100 runs) has its own hashes in the
same file (``micro_hashes``); ``--micro`` checks or writes those, leaving the main grid's as they are.

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
    micro: tuple[int, bool, str] | None = None  # (micro_batches, split_backward, priority): a micro-batched run
    hardware: str = HARDWARE
    partition_by: str = "config"
    trace_subnets: int = -1  # the trace's window (-1: simulate's default)

    @property
    def name(self) -> str:
        name = (f"{self.space}/{self.system}/D{self.stages}/{self.partition}/{self.shared}/"
                f"{'cache' if self.cache else 'nocache'}/{self.costs}/{'rc' if self.recompute else 'norc'}/"
                f"batch-{self.batch}")
        if self.micro is None:
            return name
        m, split, priority = self.micro
        name = f"{name}/m{m}-{'split' if split else 'whole'}-{priority}/{self.hardware}/by-{self.partition_by}"
        return name if self.trace_subnets < 0 else f"{name}/trace-{self.trace_subnets}"


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


# micro-batched runs (the part-level schedules of naspipe.scheduling.policies.micro): (label, overrides, seed, subnets)
MICRO_SPACES = (
    ("toy6x3", ("space.name=toy", "space.blocks=6", "space.candidates=3"), 0, 24),
    ("nlp.tiny", ("space.name=nlp.tiny",), 1, 20),
)
MICRO_SCHEDULES = ((1, True, "critical"), (4, False, "critical"), (4, True, "critical"))


def micro_grid() -> list[Case]:
    """The micro-batched grid (its own reference: ``micro_hashes``), in a stable order: csp at 1, 2 and 4
    stages with m = 1 split, m = 4 whole and split, the cache off and on, free (uniform) and priced
    (analytic) messages; then the reference, fifo priorities, per-subnet partitions, causal shared layers,
    a profile's costs, gloo's blocking sends (cpu-local), and nlp.c1 at 16 stages as the paper plan runs it."""
    cases: list[Case] = []
    for label, overrides, seed, subnets in MICRO_SPACES:
        for stages in (1, 2, 4):
            for micro in MICRO_SCHEDULES:
                for cache in (False, True):
                    for costs in ("uniform", "analytic"):
                        cases.append(Case(label, overrides, seed, subnets, "csp", stages, "static", "frozen", cache,
                                          costs, micro=micro))
        split4 = (4, True, "critical")
        for stages in (2, 4):
            cases.append(Case(label, overrides, seed, subnets, "sequential", stages, "static", "frozen", False,
                              "analytic", micro=split4))
            cases.append(Case(label, overrides, seed, subnets, "csp", stages, "static", "frozen", True, "analytic",
                              micro=(4, True, "fifo")))
            cases.append(Case(label, overrides, seed, subnets, "csp", stages, "static", "causal", False, "analytic",
                              micro=split4))
            cases.append(Case(label, overrides, seed, subnets, "csp", stages, "static", "frozen", True, "profile",
                              micro=split4))
            for cache in (False, True):
                cases.append(Case(label, overrides, seed, subnets, "csp", stages, "per-subnet", "frozen", cache,
                                  "analytic", micro=split4))
                cases.append(Case(label, overrides, seed, subnets, "csp", stages, "static", "frozen", cache,
                                  "analytic", micro=split4, hardware="cpu-local"))
                cases.append(Case(label, overrides, seed, subnets, "csp", stages, "per-subnet", "frozen", cache,
                                  "analytic", micro=(4, False, "critical"), hardware="cpu-local"))
    nlp = ("nlp.c1", ("space.name=nlp.c1", "optimizer.momentum=0.0"), 0, 12)
    for hardware, micro, cache in (("h100-nvlink-ib", (16, True, "critical"), True),
                                   ("h100-nvlink-ib", (16, True, "critical"), False),
                                   ("rtx2080ti-pcie3-40gbe", (32, True, "critical"), True)):
        cases.append(Case(*nlp, "csp", 16, "static", "frozen", cache, "analytic", batch="max", micro=micro,
                          hardware=hardware, partition_by="costs"))
    # longer: the pipeline full, the trace's window dropping the middle subnets
    cases.append(Case(nlp[0], nlp[1], 0, 48, "csp", 16, "static", "frozen", True, "analytic", batch="max",
                      micro=(16, True, "critical"), hardware="h100-nvlink-ib", partition_by="costs", trace_subnets=4))
    cases.append(Case("toy6x3", MICRO_SPACES[0][1], 0, 64, "csp", 4, "static", "frozen", True, "analytic",
                      micro=(4, True, "critical"), hardware="cpu-local", trace_subnets=3))
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
    if case.micro is not None:
        m, split, priority = case.micro
        sets += [f"micro_batches={m}", f"split_backward={str(split).lower()}", f"priority={priority}"]
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
    setup = replace(build_setup(config, load_hardware(case.hardware), costs_spec, case.partition_by), batch=case.batch)
    if case.trace_subnets >= 0:
        setup = replace(setup, trace_subnets=case.trace_subnets)
    metrics, trace = simulate_run(setup)
    if case.micro is not None:  # the metrics hold the bound (the micro-batched longest path) and the memory model
        return _plain({"order": _order(trace), "trace": trace, "metrics": metrics}, workdir)
    recompute = effective_recompute(setup.system, setup.recompute)
    costs = with_weight_stash(setup.costs, POLICIES[setup.system].stash_weights)
    priced = replace(setup, costs=costs)
    memory = memory_report(setup.plan, setup.system, costs, setup.options, recompute, setup.subnets,
                           cache_budgets(priced) if uses_cache(priced) else None)
    data = {
        "order": _order(trace),
        "trace": trace,
        "metrics": metrics,
        "holdings": [asdict(h) for h in stage_holdings(setup.plan, costs, setup.subnets)],
        "memory": {**asdict(memory), "per_host": {str(k): v for k, v in memory.per_host.items()}},
        "bound": longest_path(setup.plan, setup.system, setup.subnets, costs, recompute),
    }
    return _plain(data, workdir)


def _order(trace: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each stage's tasks in the order they ran, from the trace's compute spans."""
    order: dict[int, list[str]] = {}
    for event in trace:
        if event.get("ph") == "X" and event.get("cat") != "waiting":
            order.setdefault(int(str(event["tid"])), []).append(str(event["name"]))
    return {str(k): v for k, v in sorted(order.items())}


def _plain(data: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """``data`` as JSON-ready values; the profile's temporary path appears in the costs' name: the same
    everywhere instead."""
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
    parser.add_argument("--micro", action="store_true",
                        help="the micro-batched grid (the reference's micro_hashes) instead of the main one")
    parser.add_argument("--every", type=int, default=1, help="check only every N-th configuration (default 1: all)")
    parser.add_argument("--only", help="check only configurations whose name contains this text")
    parser.add_argument("--dump", type=Path, metavar="DIR", help="also write each configuration's observables here")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every {args.every}: must be >= 1")
    cases, key = (micro_grid(), MICRO_KEY) if args.micro else (grid(), "hashes")
    if args.write:
        if args.every != 1 or args.only:
            parser.error("--write covers the whole grid: no --every or --only")
        hashes = run(cases, args.dump)
        write_reference(args.write, key, hashes)
        print(f"wrote {len(hashes)} configurations to {args.write} ({key})")
        return 0
    try:
        reference = json.loads(args.check.read_text())[key]
    except (OSError, ValueError, KeyError) as exc:
        print(f"{args.check}: not a golden reference ({exc})", file=sys.stderr)
        return 2
    got = run(select(cases, args.every, args.only), args.dump)
    differ = check(reference, got)
    for name in differ:
        print(f"differs: {name}", file=sys.stderr)
    print(f"{len(got)} configurations checked, {len(differ)} differ")
    return 1 if differ else 0


MICRO_KEY = "micro_hashes"


def write_reference(path: Path, key: str, hashes: dict[str, str]) -> None:
    """``hashes`` under ``key`` in the reference at ``path``, the other grid's kept as they were."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    data[key] = hashes
    if key == "hashes":
        data["configurations"] = len(hashes)
    ordered = {k: data[k] for k in ("configurations", "hashes", MICRO_KEY) if k in data}
    atomic_write_text(path, json.dumps(ordered, indent=0) + "\n")


if __name__ == "__main__":
    sys.exit(main())
