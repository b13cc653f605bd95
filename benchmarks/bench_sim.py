"""The simulator against the runtime, and the simulator at scale (benchmarks, not timed tests).

``--runtime`` (default): on this machine, profile the space once (``naspipe profile``, the
same space, batch and thread count as training), then for every system run the real
multi-process runtime (D = 2, gloo) and ``naspipe simulate`` with ``--costs PROFILE.csv
--hardware cpu-local`` on the same config and subnet stream; print measured and simulated
throughput and bubble side by side, medians over ``--repeats`` (systems rotated per repeat
as in bench_systems.py), the relative throughput error, the bubble difference, and whether
the systems rank the same. Targets: within 10% and 0.05, same ranking.

``--scale``: time the simulation of ``--scale-stages`` (64) stages x ``--scale-subnets``
(100,000) subnets of a 126-block x 24-candidate space (128 positions; analytic costs of the
paper's testbed) for each system of ``--scale-systems`` in one process: CPU seconds
(``time.process_time``, the measure on a shared machine) and wall seconds, medians over
``--repeats``, and simulated tasks per CPU second. Every system runs with the copy model
``naspipe simulate`` gives it (vpipe swaps; ``csp+cache`` drives the context cache and its
predictor). Target (issue 10): 100,000 x 64 in under a minute on one core.

    .venv/bin/python benchmarks/bench_sim.py [--stages 2] [--steps 48] [--repeats 3] [--json FILE]
    .venv/bin/python benchmarks/bench_sim.py --scale [--scale-subnets 100000] [--scale-systems csp,gpipe] \
        [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe.cli import main as naspipe_main  # noqa: E402
from naspipe.config import load_config  # noqa: E402
from naspipe.sim.hardware import load_hardware  # noqa: E402

SYSTEMS = ("sequential", "csp", "gpipe", "pipedream", "vpipe", "csp-no-scheduler")
TINY = ("space.blocks=8", "space.candidates=4", "space.dim=64", "space.seq_len=16", "space.batch_size=8")
KEYS = ("throughput_samples_s", "bubble_ratio")


def runtime_vs_sim(args: argparse.Namespace) -> dict[str, Any]:
    from naspipe.runtime.launch import train
    from naspipe.sim.cli import simulate_to

    systems = args.systems.split(",")
    hardware = load_hardware("cpu-local")
    runs: dict[str, dict[str, list[float]]] = {s: {f"{w}_{k}": [] for w in ("measured", "simulated") for k in KEYS}
                                               for s in systems}
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile.csv"
        sets = [f"--set={item}" for item in TINY if item.startswith("space.")]
        sets = [s.replace("--set=space.", "--set=") for s in sets]
        assert naspipe_main(["profile", "--space", "toy", *sets, "--threads", "1", "--quiet",
                             "--out", str(profile)]) == 0
        for repeat in range(args.repeats):
            order = systems[repeat % len(systems):] + systems[:repeat % len(systems)]
            for system in order:
                config = load_config(None, [*TINY, "threads=1", f"partition_costs={profile}"],
                                     {"system": system, "stages": args.stages, "steps": args.steps,
                                      "seed": args.seed, "progress": "off"})
                measured = train(config, Path(tmp) / f"run-{system}-{repeat}")
                simulated = simulate_to(config, hardware, str(profile), Path(tmp) / f"sim-{system}-{repeat}", False)
                assert measured is not None
                for key in KEYS:
                    runs[system][f"measured_{key}"].append(measured[key])
                    runs[system][f"simulated_{key}"].append(simulated[key])
    medians = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in runs.items()}
    print(f"D={args.stages} steps={args.steps} repeats={args.repeats} space=toy {' '.join(TINY)}")
    print(f"{'system':18} {'thr meas':>10} {'thr sim':>10} {'err':>7} {'bub meas':>9} {'bub sim':>8} {'diff':>6}")
    for s in systems:
        m = medians[s]
        err = m["simulated_throughput_samples_s"] / m["measured_throughput_samples_s"] - 1
        diff = m["simulated_bubble_ratio"] - m["measured_bubble_ratio"]
        print(f"{s:18} {m['measured_throughput_samples_s']:10.1f} {m['simulated_throughput_samples_s']:10.1f} "
              f"{err:+7.1%} {m['measured_bubble_ratio']:9.3f} {m['simulated_bubble_ratio']:8.3f} {diff:+6.3f}")
    rank_m = sorted(systems, key=lambda s: -medians[s]["measured_throughput_samples_s"])
    rank_s = sorted(systems, key=lambda s: -medians[s]["simulated_throughput_samples_s"])
    print("ranking measured: ", " > ".join(rank_m))
    print("ranking simulated:", " > ".join(rank_s), "(same)" if rank_m == rank_s else "(differs)")
    return {"runs": runs, "medians": medians}


SCALE_SYSTEMS = ("csp", "gpipe", "pipedream", "vpipe", "csp-no-scheduler")


def scale(args: argparse.Namespace) -> dict[str, Any]:
    """Time whole simulations, one after another on one core; CPU seconds are the measure (others share the box)."""
    import os

    from naspipe.config import CacheConfig
    from naspipe.partition import balanced_partition
    from naspipe.scheduling import PipelinePlan, PolicyOptions
    from naspipe.sim.costs import LayerInfo, analytic_costs
    from naspipe.sim.engine import simulate
    from naspipe.sim.run import SimSetup, effective_recompute, residency_for
    from naspipe.space.structure import SpaceStructure
    from naspipe.subnet import SubnetStream

    d, n = args.scale_stages, args.scale_subnets
    structure = SpaceStructure("scale", ("embedding",), tuple(tuple(f"op{c}" for c in range(24)) for _ in range(126)),
                               ("output",))
    info = [LayerInfo(1_000_000 + 1000 * (lid % 7), 2e7 * (1 + lid % 3), 65536.0, 262144.0)
            for lid in range(structure.num_layers)]
    costs = analytic_costs(info, load_hardware("rtx2080ti-pcie3-40gbe"), 32, "sgd")
    options = PolicyOptions(max_inflight=2 * d, bulk_size=d)
    out: dict[str, Any] = {"stages": d, "subnets": n, "repeats": args.repeats, "systems": {}}
    print(f"{d} stages x {n} subnets, {args.repeats} repeat(s), one process; load average {os.getloadavg()[0]:.2f}")
    print(f"{'system':18} {'cpu s':>8} {'wall s':>8} {'tasks':>10} {'tasks/cpu s':>12} {'us/task':>8}  makespan")
    for spec in args.scale_systems.split(","):
        system, _, extra = spec.partition("+")
        cache = CacheConfig(enabled=True) if extra == "cache" else None
        runs: list[tuple[float, float, int, float]] = []
        for _ in range(args.repeats):
            plan = PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, d),
                                SubnetStream(structure.choices_per_block, args.seed))  # fresh caches per repeat
            setup = SimSetup(plan, system, n, options, costs, True, cache=cache)
            cpu, wall = time.process_time(), time.perf_counter()
            result = simulate(plan, system, n, options, costs, effective_recompute(system, True), residency_for(setup))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            runs.append((cpu, wall, sum(s.tasks for s in result.stages), result.makespan))
        if len({r[2:] for r in runs}) != 1:
            raise SystemExit(f"{spec}: repeats disagree on tasks or makespan: {runs}")
        cpu, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        tasks, makespan = runs[0][2], runs[0][3]
        out["systems"][spec] = {"cpu_s": cpu, "wall_s": wall, "tasks": tasks, "tasks_per_cpu_s": tasks / cpu,
                                "makespan_s": makespan, "cpu_s_each": [r[0] for r in runs],
                                "wall_s_each": [r[1] for r in runs]}
        print(f"{spec:18} {cpu:8.1f} {wall:8.1f} {tasks:10d} {tasks / cpu:12,.0f} {cpu / tasks * 1e6:8.2f}  "
              f"{makespan:.6g} s", flush=True)
    out["load_average_end"] = os.getloadavg()[0]
    print(f"load average at the end {out['load_average_end']:.2f} (medians of CPU and wall over repeats)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--scale", action="store_true", help="time the simulator at 64 stages x 100,000 subnets")
    parser.add_argument("--scale-systems", default=",".join(SCALE_SYSTEMS),
                        help="systems to time with --scale; SYSTEM+cache runs it with the context cache")
    parser.add_argument("--scale-stages", type=int, default=64)
    parser.add_argument("--scale-subnets", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    args = parser.parse_args()
    result = scale(args) if args.scale else runtime_vs_sim(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
