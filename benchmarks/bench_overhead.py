"""NASPipe's runtime against a plain PyTorch loop: same layers, batches and subnet stream.

The reference (:func:`plain_train`) is what a user would write without NASPipe: build the
space with naspipe's own constructors (``space.build_layer``: parameters seeded by (seed,
layer)), draw the same subnet stream, and for each step run the subnet's layers as *one*
autograd graph on batch ``i`` (``space.batch``), ``loss.backward()``, then step a per-layer
SGD (``foreach=False``) of each layer that got gradients. One process, one intra-op thread,
no recomputation, no logs, no trace, no checkpoint.

Each repeat runs, per space and in an order that alternates between repeats, the plain loop
and the whole command a user runs::

    naspipe train --space S --system sequential --stages 1 --steps N --set recompute=false --out DIR

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
        [--repeats 3] [--json FILE]

``--in-process`` runs both loops (recompute off) in this one process instead, alternating,
and prints the per-repeat loop-CPU ratios: the loops' own cost on one heap, without either
process's start-up (:func:`in_process`).
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
from naspipe.determinism import make_deterministic  # noqa: E402
from naspipe.space import make_space  # noqa: E402
from naspipe.space.base import LayerContext, SpaceLayer  # noqa: E402
from naspipe.subnet import SubnetStream  # noqa: E402

SPACES = ("nlp.tiny", "cv.tiny", "toy")


def plain_config(space: str, steps: int, seed: int = 0, overrides: tuple[str, ...] = ()) -> Config:
    """The configuration both sides use: naspipe's defaults for ``space`` (optimizer, seed, options)."""
    return load_config(None, [f"space.name={space}", *overrides], {"steps": steps, "seed": seed})


@dataclass
class PlainRun:
    losses: list[float]
    loop_s: float  # wall seconds of the training loop
    loop_cpu_s: float  # CPU seconds of the training loop
    layers: list[SpaceLayer]  # every layer of the supernet after training, by layer id


def plain_train(config: Config) -> PlainRun:
    """Train ``config.steps`` subnets the plain way (sequential semantics, DESIGN.md section 2,
    written as one ordinary PyTorch loop)."""
    make_deterministic(1, torch.device("cpu"))
    space = make_space(config.space_name, config.space_options, config.shared_policy)
    structure, seed, opt = space.structure, config.seed, config.optimizer
    if opt.name != "sgd":
        raise ValueError("the plain loop is the SGD reference")
    layers = [space.build_layer(lid, seed) for lid in range(structure.num_layers)]
    sgd = [torch.optim.SGD(ps, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay, foreach=False)
           if (ps := [p for p in layer.parameters() if p.requires_grad]) else None for layer in layers]
    stream = SubnetStream(structure.choices_per_block, seed)
    losses: list[float] = []
    start, cpu = time.perf_counter(), time.process_time()
    for step in range(config.steps):
        ids = structure.position_layers(stream[step])
        batch = space.batch(step, seed)
        state = batch.inputs
        for lid in ids:
            state = layers[lid](state, LayerContext(seed, step, lid))
        loss = space.loss(state, batch)
        loss.backward()
        losses.append(loss.item())
        for lid in ids:
            optimizer = sgd[lid]
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return PlainRun(losses, time.perf_counter() - start, time.process_time() - cpu, layers)


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
               "--out", str(out), "--overwrite"]  # stderr is a pipe: the progress bar is off (progress=auto)
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
                              str(steps), "--set", "recompute=false", "--set", "progress=off", "--out", str(out)])
            metrics = json.loads((out / "metrics.json").read_text())
            cpu[kind] = sum(e["loop_cpu_s"] for e in metrics["stage_extra"])
        ratios.append(cpu["plain"] / cpu["naspipe"])
    return ratios


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
    """Medians of the raw figures and of the per-repeat ratios (naspipe against plain)."""
    summary: dict[str, Any] = {}
    for space in repeats[0]:
        rows = [r[space] for r in repeats]
        entry: dict[str, Any] = {kind: {m: statistics.median(row[kind][m] for row in rows) for m in rows[0][kind]}
                                 for kind in rows[0]}
        for kind in ("off", "on"):
            entry[f"ratio_{kind}"] = {
                "rate": statistics.median(row[kind]["rate"] / row["plain"]["rate"] for row in rows),
                "cpu": statistics.median(row["plain"]["cpu_s"] / row[kind]["cpu_s"] for row in rows),
                "loop_cpu": statistics.median(row["plain"]["loop_cpu_s"] / row[kind]["loop_cpu_s"] for row in rows),
            }
        summary[space] = entry
    return summary


def _table(summary: dict[str, Any]) -> str:
    lines = ["space     recompute  plain/s  naspipe/s  rate x  loop-CPU x  process-CPU x"]
    for space, entry in summary.items():
        for kind in ("off", "on"):
            r = entry[f"ratio_{kind}"]
            lines.append(f"{space:9} {kind:9} {entry['plain']['rate']:8.1f} {entry[kind]['rate']:10.1f} "
                         f"{r['rate']:7.3f} {r['loop_cpu']:11.3f} {r['cpu']:14.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=list(SPACES))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the raw runs and the summary here")
    parser.add_argument("--plain", metavar="SPACE", help=argparse.SUPPRESS)  # internal: one plain run
    parser.add_argument("--in-process", action="store_true",
                        help="recompute off only: both loops in this process, loop-CPU ratios per repeat")
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
        repeats = [one_repeat(args.spaces, args.steps, i, Path(tmp)) for i in range(args.repeats)]
    summary = summarise(repeats)
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; "
          f"{args.steps} steps, {args.repeats} repeats; losses bitwise equal in every run")
    print(_table(summary))
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "repeats": repeats, "summary": summary,
                                         "rusage_self": resource.getrusage(resource.RUSAGE_SELF).ru_utime},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
