"""The simulator's memory model against what the runtime really holds: peak RSS of CPU stages.

On the CPU a stage's "device" is its process, so what the memory model charges a stage shows
up in the process's peak resident set (``stage_extra[k]["max_rss_mb"]`` of a ``naspipe
train`` run). The absolute figure also holds torch, the interpreter and allocator slack, so
this compares *differences* between runs that change one term of the model, with layers large
enough (toy space, ``dim`` 512: megabytes per layer) that the term dominates the noise:

- ``sgd, momentum 0.9`` minus ``momentum 0``: the momentum buffer of every trained layer;
- ``adam`` minus ``momentum 0``: two moments per trained parameter;
- ``gpipe`` minus ``csp`` (both momentum 0): the bulk's stashed gradients less csp's one share;
- ``pipedream`` minus ``csp``: weight stash, gradients and kept activations (no recompute);
- the micro-batched terms, on an activation-heavy toy space (``dim`` 64, 64 tokens, batch 128): csp with
  ``micro_batches`` 4 minus csp with one part (a backward holds one part's activations, ``1/m`` of the batch's,
  and the last stage keeps its parts' forward state instead of recomputing it), and the split backward minus
  the unsplit one (the parts whose weight task waits keep their activations: :func:`live_parts`).

For each, the simulator's prediction is the same difference of its per-stage bytes
(:func:`naspipe.sim.memory.memory_report` at the run's batch). Medians over ``--repeats``.

    python benchmarks/bench_sim_memory.py [--repeats 3] [--steps 48] [--stages 2] [--only micro]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe import cli  # noqa: E402
from naspipe.commands.simulate import build_setup  # noqa: E402
from naspipe.config import load_config  # noqa: E402
from naspipe.sim.hardware import load_hardware  # noqa: E402
from naspipe.sim.memory import memory_report  # noqa: E402
from naspipe.sim.run import effective_recompute  # noqa: E402

SPACE = ["space.dim=512", "space.heads=4", "space.blocks=8", "space.candidates=3", "space.seq_len=16",
         "space.batch_size=8"]
RUNS: dict[str, tuple[str, list[str]]] = {
    "csp sgd m=0": ("csp", ["optimizer.momentum=0"]),
    "csp sgd m=0.9": ("csp", ["optimizer.momentum=0.9"]),
    "csp adam": ("csp", ["optimizer.name=adam"]),
    "gpipe sgd m=0": ("gpipe", ["optimizer.momentum=0"]),
    "pipedream sgd m=0": ("pipedream", ["optimizer.momentum=0"]),
}
ACTIVATIONS = ["space.dim=64", "space.heads=4", "space.blocks=8", "space.candidates=3", "space.seq_len=64",
               "space.batch_size=128", "optimizer.momentum=0"]
RUNS.update({
    "csp 1 part": ("csp", ACTIVATIONS),
    "csp 4 parts": ("csp", [*ACTIVATIONS, "micro_batches=4"]),
    "csp 4 parts split": ("csp", [*ACTIVATIONS, "micro_batches=4", "split_backward=true"]),
})
DIFFS = [("csp sgd m=0.9", "csp sgd m=0"), ("csp adam", "csp sgd m=0"), ("gpipe sgd m=0", "csp sgd m=0"),
         ("pipedream sgd m=0", "csp sgd m=0"), ("csp 4 parts", "csp 1 part"), ("csp 4 parts split", "csp 4 parts")]


def settings(sets: list[str]) -> list[str]:
    """The run's ``--set`` pairs: the weight-heavy space unless the run names its own (the activation one)."""
    return sets if any(s.startswith("space.") for s in sets) else [*SPACE, *sets]


def measured(system: str, sets: list[str], args: argparse.Namespace) -> list[float]:
    """Peak RSS per stage in bytes, median over repeats."""
    per_repeat = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            argv = ["train", "--space", "toy", "--system", system, "--stages", str(args.stages), "--steps",
                    str(args.steps), "--out", str(out), "--set", "device=cpu", "--set", "final_checkpoint=false",
                    *(x for s in settings(sets) for x in ("--set", s))]
            with contextlib.redirect_stdout(io.StringIO()):
                if cli.main(argv) != 0:
                    raise SystemExit(f"failed: naspipe {' '.join(argv)}")
            m = json.loads((out / "metrics.json").read_text())
            per_repeat.append([e["max_rss_mb"] * 2**20 for e in m["stage_extra"]])
    return [statistics.median(r[k] for r in per_repeat) for k in range(args.stages)]


def simulated(system: str, sets: list[str], args: argparse.Namespace) -> list[float]:
    config = load_config(None, settings(sets), {"system": system, "stages": args.stages, "steps": args.steps})
    setup = build_setup(config, load_hardware("cpu-local"), "analytic")
    recompute = effective_recompute(system, setup.recompute)
    report = memory_report(setup.plan, system, setup.costs, setup.options, recompute, setup.subnets)
    return [s.at(setup.costs.batch) for s in report.per_stage]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--only", choices=["micro"], help="only the micro-batched terms' runs")
    args = p.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    diffs = [d for d in DIFFS if args.only is None or "part" in d[0]]
    for name, (system, sets) in RUNS.items():
        if not any(name in d for d in diffs):
            continue
        rows[name] = {"measured": measured(system, sets, args), "simulated": simulated(system, sets, args)}
    print("| difference | stage | measured MB | simulated MB |\n|---|---|---|---|")
    for a, b in diffs:
        for k in range(args.stages):
            dm = (rows[a]["measured"][k] - rows[b]["measured"][k]) / 2**20
            ds = (rows[a]["simulated"][k] - rows[b]["simulated"][k]) / 2**20
            print(f"| {a} - {b} | {k} | {dm:.1f} | {ds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
