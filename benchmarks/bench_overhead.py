"""NASPipe's runtime against a plain PyTorch loop: same layers, batches and subnet stream.

The reference (:func:`plain_train`) is what a user would write without NASPipe: build the
space with naspipe's own constructors (``space.build_layer``: parameters seeded by (seed,
layer)), draw the same subnet stream, and for each step run the subnet's layers as *one*
autograd graph on batch ``i`` (``space.batch``), ``loss.backward()``, then step a per-layer
SGD (``foreach=False``) of each layer that got gradients. One process, one intra-op thread,
no recomputation, no logs, no trace, no checkpoint.

Each repeat runs, per space and in an order that alternates between repeats, the plain loop
and the whole command a user runs::

    naspipe train --space S --system sequential --stages 1 --steps N --set recompute=false --set device=cpu --out DIR

and the same with ``recompute=true`` (NASPipe's default). Each is its own process; the
figures per run are

- ``rate``: steady-state subnets/s, the training loop alone (naspipe: ``subnets /
  makespan_s`` from its ``metrics.json``; plain: the loop's own clock);
- ``cpu_s``: user + sys CPU seconds of the whole process (start-up, outputs included);
- ``loop_cpu_s``: CPU seconds of the training loop alone (naspipe: ``stage_extra``
  ``loop_cpu_s``), the least sensitive to a loaded machine.

Ratios (naspipe / plain for the rate, plain / naspipe for CPU time, so above 1 is better for
naspipe) are taken within a repeat, then the median over repeats is reported. The plain
loop has no recomputation, so the ``recompute=true`` ratio compares NASPipe's default
(every forward run twice) against a loop that runs it once: the price of the memory saving
plus the overhead, not the overhead alone.

Every run also checks that the two give the very same losses, bit for bit (``float.hex``):
the plain loop is the same computation, not an approximation of it.

    python benchmarks/bench_overhead.py [--spaces nlp.tiny cv.tiny toy] [--steps 400]
        [--repeats 3] [--lockstep-repeats 5] [--lockstep | --in-process] [--json FILE]

Then, per space, ``--lockstep-repeats`` runs of both loops side by side in this process
(:func:`lockstep`, recompute off): plain step ``i``, then naspipe's real stage loop
(``StageWorker.subnets``) up to its ``i``-th subnet, the side that goes first alternating, each
step's CPU seconds recorded. Its plain / naspipe CPU ratio (steps 10 on) is what the issue-22
acceptance (>= 0.95) reads, and the output says so: on one thread a step's CPU time is its wall
time without the load, and stepping both in turn shares whatever load, heap and imports there
are, step by step. The wall-clock rate ratio of separate processes swings by 10-30% between
runs on a shared machine (docs/performance.md, "The runtime against a plain PyTorch loop"); the
loop-CPU ratio per repeat is printed beside its median so the spread can be seen.

``--lockstep`` runs the side-by-side part alone (a minute); ``--in-process`` runs both whole loops
(recompute off) in this one process instead, alternating, and prints the per-repeat loop-CPU
ratios: the loops' own cost on one heap, first steps included, without either process's start-up
(:func:`in_process`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from naspipe.config import Config, load_config  # noqa: E402
from naspipe.determinism import layer_precision, make_deterministic  # noqa: E402
from naspipe.space import make_space  # noqa: E402
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer  # noqa: E402
from naspipe.subnet import SubnetStream  # noqa: E402

SPACES = ("nlp.tiny", "cv.tiny", "toy")
CPU = torch.device("cpu")


def plain_config(space: str, steps: int, seed: int = 0, overrides: tuple[str, ...] = ()) -> Config:
    """The configuration both sides use: naspipe's defaults for ``space`` (optimizer, seed, options)."""
    return load_config(None, [f"space.name={space}", *overrides], {"steps": steps, "seed": seed})


@dataclass
class PlainRun:
    losses: list[float]
    loop_s: float  # wall seconds of the training loop
    loop_cpu_s: float  # CPU seconds of the training loop
    layers: list[SpaceLayer]  # every layer of the supernet after training, by layer id


@dataclass
class PlainLoop:
    """The plain loop's set-up (everything a user builds before the loop): the space, every layer, a
    per-layer SGD for each layer with trainable parameters, the subnet stream; on ``device``, each layer
    and the loss under ``cast`` (bf16 autocast or nothing: the run's precision, as a user would write it)."""

    space: SearchSpace
    layers: list[SpaceLayer]
    sgd: list[torch.optim.SGD | None]
    stream: SubnetStream
    seed: int
    device: torch.device = CPU
    cast: Any = contextlib.nullcontext

    def step(self, step: int) -> float:
        """One training step, sequential semantics (DESIGN.md section 2); its loss."""
        ids = self.space.structure.position_layers(self.stream[step])
        batch = self.space.batch(step, self.seed)
        batch = Batch(*(tuple(t.to(self.device) for t in part) for part in (batch.inputs, batch.targets)))
        state = batch.inputs
        for lid in ids:
            with self.cast():
                state = self.layers[lid](state, LayerContext(self.seed, step, lid))
        with self.cast():
            loss = self.space.loss(state, batch)
        loss.backward()
        value = loss.item()
        for lid in ids:
            optimizer = self.sgd[lid]
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return value


def plain_setup(config: Config, device: torch.device = CPU) -> PlainLoop:
    """Build what the plain loop needs, as a user would before the loop (the optimizers too), on ``device``
    at the config's precision."""
    make_deterministic(1, device, config.precision)
    space = make_space(config.space_name, config.space_options, config.shared_policy)
    structure, seed, opt = space.structure, config.seed, config.optimizer
    if opt.name != "sgd":
        raise ValueError("the plain loop is the SGD reference")
    layers = [space.build_layer(lid, seed).to(device) for lid in range(structure.num_layers)]
    sgd = [torch.optim.SGD(ps, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay, foreach=False)
           if (ps := [p for p in layer.parameters() if p.requires_grad]) else None for layer in layers]
    return PlainLoop(space, layers, sgd, SubnetStream(structure.choices_per_block, seed), seed, device,
                     layer_precision(config.precision, device))


def plain_train(config: Config) -> PlainRun:
    """Train ``config.steps`` subnets the plain way (sequential semantics, DESIGN.md section 2,
    written as one ordinary PyTorch loop)."""
    loop = plain_setup(config)
    losses: list[float] = []
    start, cpu = time.perf_counter(), time.process_time()
    for step in range(config.steps):
        losses.append(loop.step(step))
    return PlainRun(losses, time.perf_counter() - start, time.process_time() - cpu, loop.layers)


# -- the side-by-side benchmark ------------------------------------------------
def _child(command: list[str]) -> tuple[float, float]:
    """Run ``command``; its wall seconds and CPU seconds (user + sys of it and its children)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr is not None else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def run_plain(space: str, steps: int, out: Path) -> dict[str, Any]:
    """The plain loop in its own process (like the naspipe command), so both pay their start-up."""
    out.mkdir(parents=True, exist_ok=True)
    result = out / "plain.json"
    wall, cpu = _child([sys.executable, __file__, "--plain", space, "--steps", str(steps), "--json", str(result)])
    data = json.loads(result.read_text())
    return {"rate": steps / data["loop_s"], "cpu_s": cpu, "loop_cpu_s": data["loop_cpu_s"], "wall_s": wall,
            "losses": data["losses"]}


def run_naspipe(space: str, steps: int, recompute: bool, out: Path) -> dict[str, Any]:
    """``naspipe train`` exactly as a user runs it; the rate and loop CPU from its metrics.json."""
    command = [sys.executable, "-m", "naspipe", "train", "--space", space, "--system", "sequential",
               "--stages", "1", "--steps", str(steps), "--set", f"recompute={str(recompute).lower()}",
               "--set", "device=cpu", "--out", str(out), "--overwrite"]
    # stderr is a pipe: the progress bar is off (progress=auto); on the CPU, as the plain loop
    wall, cpu = _child(command)
    metrics = json.loads((out / "metrics.json").read_text())
    with open(out / "losses.csv", encoding="utf-8") as f:
        losses = [row["loss_hex"] for row in csv.DictReader(f)]
    loop_cpu = sum(e.get("loop_cpu_s", float("nan")) for e in metrics["stage_extra"])
    return {"rate": metrics["subnets"] / metrics["makespan_s"], "cpu_s": cpu, "loop_cpu_s": loop_cpu,
            "wall_s": wall, "losses": losses}


def in_process(space: str, steps: int, repeats: int, tmp: Path) -> list[float]:
    """Per repeat, plain / naspipe loop CPU with both run in this one process (alternating order):
    one heap, one set of imports, the load of the moment shared; the loop's cost without either
    process's start-up. naspipe runs as ``naspipe.cli.main`` (a one-stage run trains in-process)."""
    from naspipe.cli import main as naspipe_main

    ratios = []
    for repeat in range(repeats):
        cpu: dict[str, float] = {}
        for kind in ("plain", "naspipe") if repeat % 2 == 0 else ("naspipe", "plain"):
            if kind == "plain":
                cpu[kind] = plain_train(plain_config(space, steps)).loop_cpu_s
                continue
            out = tmp / f"{space}-inproc-{repeat}"
            with open(os.devnull, "w", encoding="utf-8") as null, contextlib.redirect_stdout(null):
                naspipe_main(["train", "--space", space, "--system", "sequential", "--stages", "1", "--steps",
                              str(steps), "--set", "recompute=false", "--set", "device=cpu", "--set", "progress=off",
                              "--out", str(out)])
            metrics = json.loads((out / "metrics.json").read_text())
            cpu[kind] = sum(e["loop_cpu_s"] for e in metrics["stage_extra"])
        ratios.append(cpu["plain"] / cpu["naspipe"])
    return ratios


# the command compared; on the CPU as the plain loop is (``device=auto`` would pick a GPU where there is one)
TRAIN_ARGS = ("--system", "sequential", "--stages", "1", "--set", "recompute=false", "--set", "device=cpu")


def naspipe_config(space: str, steps: int) -> Config:
    """The configuration ``naspipe train --space S --steps N`` + :data:`TRAIN_ARGS` runs (parsed as the CLI does)."""
    from naspipe.cli import build_parser
    from naspipe.config import config_from_args

    args = build_parser("train").parse_args(["train", "--space", space, "--steps", str(steps), *TRAIN_ARGS,
                                             "--set", "progress=off", "--out", "unused"])
    return config_from_args(args, checkpoint_every=args.checkpoint_every, subnet=None)


@dataclass
class Lockstep:
    """Both loops stepped in turn in one process: each step's CPU seconds, per side."""

    plain_cpu: list[float]
    naspipe_cpu: list[float]

    def ratio(self, warmup: int) -> float:
        """plain / naspipe CPU of the steps after ``warmup`` (whichever side runs a kernel first in
        the process pays its first-call set-up: the warm-up leaves that out of both)."""
        return sum(self.plain_cpu[warmup:]) / sum(self.naspipe_cpu[warmup:])


def lockstep(space: str, steps: int, tmp: Path) -> Lockstep:
    """plain step ``i`` and naspipe's stage loop up to its ``i``-th finished subnet, in turn (the side
    that goes first alternates per step), each timed in CPU seconds: one heap, one set of imports, and
    whatever load the machine has, shared step by step. naspipe's side is its real one-stage loop
    (``StageWorker.subnets``: policy, executor, logs, trace), built as ``naspipe train`` builds it;
    only the run directory's publishing around it is left out. The losses are checked bitwise."""
    from naspipe.runplan.job import build_job, build_space
    from naspipe.runtime.recorder import LOSSES
    from naspipe.runtime.transport import LocalTransport
    from naspipe.runtime.worker import StageWorker

    config = naspipe_config(space, steps)
    make_deterministic(config.threads, torch.device("cpu"))
    worker = StageWorker(build_job(config, build_space(config)), 0, LocalTransport(), torch.device("cpu"), tmp)
    plain = plain_setup(plain_config(space, steps))
    ticks = worker.subnets()
    worker.recorder.t0 = time.perf_counter()
    run = Lockstep([], [])
    losses = []
    for step in range(steps):
        for side in ("plain", "naspipe") if step % 2 == 0 else ("naspipe", "plain"):
            cpu = time.process_time()
            if side == "plain":
                losses.append(float.hex(plain.step(step)))
                run.plain_cpu.append(time.process_time() - cpu)
            else:
                next(ticks)
                run.naspipe_cpu.append(time.process_time() - cpu)
    worker.recorder.logs.close()
    logged = [line.split(",")[1] for line in (tmp / "logs" / LOSSES).read_text(encoding="utf-8").splitlines()]
    if logged != losses:
        raise AssertionError(f"{space}: naspipe's loop and the plain loop differ in their losses")
    return run


def one_repeat(spaces: list[str], steps: int, repeat: int, tmp: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Every space's three runs (plain, recompute off, recompute on), in an order rotated per repeat."""
    kinds = ["plain", "off", "on"]
    shift = repeat % len(kinds)
    order = kinds[shift:] + kinds[:shift]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for space in spaces:
        runs: dict[str, dict[str, Any]] = {}
        for kind in order:
            out = tmp / f"{space}-{kind}-{repeat}"
            runs[kind] = (run_plain(space, steps, out) if kind == "plain"
                          else run_naspipe(space, steps, kind == "on", out))
        for kind in ("off", "on"):
            if runs[kind]["losses"] != runs["plain"]["losses"]:
                raise AssertionError(f"{space}: naspipe (recompute {kind}) and the plain loop differ in their losses")
        results[space] = {k: {m: v for m, v in r.items() if m != "losses"} for k, r in runs.items()}
    return results


def summarise(repeats: list[dict[str, dict[str, dict[str, Any]]]]) -> dict[str, Any]:
    """Medians of the raw figures and of the per-repeat ratios (naspipe against plain), and the
    per-repeat loop-CPU ratios themselves (their spread says how far a median can be trusted)."""
    summary: dict[str, Any] = {}
    for space in repeats[0]:
        rows = [r[space] for r in repeats]
        entry: dict[str, Any] = {kind: {m: statistics.median(row[kind][m] for row in rows) for m in rows[0][kind]}
                                 for kind in rows[0]}
        for kind in ("off", "on"):
            loop_cpu = [row["plain"]["loop_cpu_s"] / row[kind]["loop_cpu_s"] for row in rows]
            entry[f"ratio_{kind}"] = {
                "rate": statistics.median(row[kind]["rate"] / row["plain"]["rate"] for row in rows),
                "cpu": statistics.median(row["plain"]["cpu_s"] / row[kind]["cpu_s"] for row in rows),
                "loop_cpu": statistics.median(loop_cpu),
                "loop_cpu_each": loop_cpu,
            }
        summary[space] = entry
    return summary


def _table(summary: dict[str, Any]) -> str:
    lines = ["space     recompute  plain/s  naspipe/s  rate x  loop-CPU x  process-CPU x  loop-CPU x per repeat"]
    for space, entry in summary.items():
        for kind in ("off", "on"):
            r = entry[f"ratio_{kind}"]
            lines.append(f"{space:9} {kind:9} {entry['plain']['rate']:8.1f} {entry[kind]['rate']:10.1f} "
                         f"{r['rate']:7.3f} {r['loop_cpu']:11.3f} {r['cpu']:14.3f}  "
                         f"{' '.join(f'{x:.3f}' for x in r['loop_cpu_each'])}")
    return "\n".join(lines)


TARGET = 0.95  # issue 22: naspipe's loop at >= 0.95x the plain loop's rate, recompute off
WARMUP = 10  # lockstep steps left out of its ratio (first calls of each kernel)


def lockstep_ratios(spaces: list[str], steps: int, repeats: int, tmp: Path) -> dict[str, list[float]]:
    """Per space, ``repeats`` lockstep runs' plain / naspipe CPU ratios (after :data:`WARMUP` steps)."""
    ratios: dict[str, list[float]] = {}
    for space in spaces:
        ratios[space] = []
        for repeat in range(repeats):
            out = tmp / f"{space}-lockstep-{repeat}"
            out.mkdir(parents=True)
            ratios[space].append(lockstep(space, steps, out).ratio(WARMUP))
    return ratios


def _verdict(ratios: dict[str, list[float]]) -> str:
    """The acceptance, read from the lockstep ratios: met, not met, or undecided when the repeats
    fall on both sides of the target."""
    lines = [f"side by side in one process, per step (plain / naspipe CPU, recompute off, steps {WARMUP}+):",
             "space     median  min    max    repeats"]
    verdicts = []
    for space, each in ratios.items():
        median = statistics.median(each)
        lines.append(f"{space:9} {median:.3f}  {min(each):.3f}  {max(each):.3f}  {' '.join(f'{x:.3f}' for x in each)}")
        state = ("met" if min(each) >= TARGET else "NOT met" if max(each) < TARGET
                 else "undecided (repeats on both sides)")
        verdicts.append(f"{space} {median:.3f} {state}")
    lines.append(f"acceptance (issue 22: >= {TARGET}x the plain loop, recompute off) reads this per-step CPU ratio "
                 "(a step's rate on one thread, without the load; separate processes' rate x is wall clock, "
                 "for reference): " + "; ".join(verdicts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=list(SPACES))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lockstep-repeats", type=int, default=5,
                        help="side-by-side runs in this process per space (the figure the acceptance reads)")
    parser.add_argument("--json", type=Path, help="write the raw runs and the summary here")
    parser.add_argument("--plain", metavar="SPACE", help=argparse.SUPPRESS)  # internal: one plain run
    parser.add_argument("--in-process", action="store_true",
                        help="recompute off only: both loops in this process, loop-CPU ratios per repeat")
    parser.add_argument("--lockstep", action="store_true",
                        help="recompute off only: the side-by-side per-step ratios alone (no separate processes)")
    args = parser.parse_args(argv)
    if args.in_process:
        print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} steps; plain / naspipe loop CPU, in-process")
        with tempfile.TemporaryDirectory(prefix="naspipe-overhead-") as tmp:
            for space in args.spaces:
                ratios = in_process(space, args.steps, args.repeats, Path(tmp))
                print(f"{space:9} median {statistics.median(ratios):.3f}  ({' '.join(f'{r:.3f}' for r in ratios)})")
        return 0
    if args.plain:
        run = plain_train(plain_config(args.plain, args.steps))
        args.json.write_text(json.dumps({"losses": [float.hex(x) for x in run.losses], "loop_s": run.loop_s,
                                         "loop_cpu_s": run.loop_cpu_s}))
        return 0
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="naspipe-overhead-") as tmp:
        repeats = [] if args.lockstep else [one_repeat(args.spaces, args.steps, i, Path(tmp))
                                            for i in range(args.repeats)]
        side_by_side = lockstep_ratios(args.spaces, args.steps, args.lockstep_repeats, Path(tmp))
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; "
          f"{args.steps} steps; losses bitwise equal in every run")
    summary = summarise(repeats) if repeats else {}
    if repeats:
        print(f"each loop in its own process, {args.repeats} repeats (medians of per-repeat ratios):")
        print(_table(summary))
    print(_verdict(side_by_side))
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "repeats": repeats, "summary": summary,
                                         "lockstep": side_by_side, "lockstep_warmup": WARMUP,
                                         "rusage_self": resource.getrusage(resource.RUSAGE_SELF).ru_utime},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
