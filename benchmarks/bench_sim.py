"""The simulator against the runtime, and the simulator at scale (benchmarks, not timed tests).

``--runtime`` (default): on this machine, profile the space once (``naspipe profile``, the
same space, batch and thread count as training), then for every system run the real
multi-process runtime (D = 2, gloo) and ``naspipe simulate`` with ``--costs PROFILE.csv
--hardware cpu-local`` on the same config and subnet stream; print measured and simulated
throughput and bubble side by side, medians over ``--repeats`` (systems rotated per repeat
as in bench_systems.py), the relative throughput error, the bubble difference, and whether
the systems rank the same. Targets: within 10% and 0.05, same ranking.

``--scale``: time the simulation of ``--scale-stages`` (64) stages x ``--scale-subnets``
(100,000) subnets of a 126-block x 24-candidate space (128 positions) for each system given
with ``--systems``, on one core: wall-clock seconds and simulated tasks per second.

    .venv/bin/python benchmarks/bench_sim.py [--stages 2] [--steps 48] [--repeats 3] [--json FILE]
    .venv/bin/python benchmarks/bench_sim.py --scale [--scale-subnets 100000] [--systems csp,gpipe]
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


def scale(args: argparse.Namespace) -> dict[str, Any]:
    from naspipe.partition import balanced_partition
    from naspipe.scheduling import PipelinePlan, PolicyOptions
    from naspipe.sim.costs import LayerInfo, analytic_costs
    from naspipe.sim.engine import simulate
    from naspipe.space.structure import SpaceStructure
    from naspipe.subnet import SubnetStream

    d, n = args.scale_stages, args.scale_subnets
    structure = SpaceStructure("scale", ("embedding",), tuple(tuple(f"op{c}" for c in range(24)) for _ in range(126)),
                               ("output",))
    plan = PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, d),
                        SubnetStream(structure.choices_per_block, args.seed))
    info = [LayerInfo(1_000_000 + 1000 * (lid % 7), 2e7 * (1 + lid % 3), 65536.0, 262144.0)
            for lid in range(structure.num_layers)]
    costs = analytic_costs(info, load_hardware("rtx2080ti-pcie3-40gbe"), 32, "sgd")
    out: dict[str, Any] = {}
    for system in args.systems.split(","):
        start = time.perf_counter()
        result = simulate(plan, system, n, PolicyOptions(max_inflight=2 * d, bulk_size=d), costs, True)
        wall = time.perf_counter() - start
        tasks = sum(s.tasks for s in result.stages)
        out[system] = {"wall_s": wall, "tasks": tasks, "tasks_per_s": tasks / wall}
        print(f"{system:18} {d} stages x {n} subnets: {wall:7.1f} s wall, {tasks} tasks, {tasks / wall:,.0f} tasks/s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--scale", action="store_true", help="time the simulator at 64 stages x 100,000 subnets")
    parser.add_argument("--scale-stages", type=int, default=64)
    parser.add_argument("--scale-subnets", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    args = parser.parse_args()
    result = scale(args) if args.scale else runtime_vs_sim(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
