"""naspipe against a plain PyTorch loop on one GPU, on full-width paper subnets, in fp32 and bf16.

Per space and precision, the same subnet stream (seed 0) through

- ``plain``: the loop ``benchmarks/bench_overhead.py`` writes (every layer built up front, the
  subnet's layers as one autograd graph, per-layer SGD), on the device, each layer and the loss
  under the run's precision (bf16 autocast);
- ``seq``: ``naspipe train --system sequential --stages 1 --set recompute=false`` (what the plain
  loop computes, through the runtime);
- ``csp1-cache``: csp at D=1 with the context manager (host store, device cache; it needs
  recomputation, so every forward runs twice);
- ``csp2``: csp at D=2, both stages on the one GPU (gloo through host memory), recompute off.

Each is its own process, run one at a time. Figures: samples/s of the training loop (naspipe:
``metrics.json`` ``throughput_samples_s``; plain: its own clock over the same steps), the ratio to
the plain loop, executed TFLOP/s (2 x multiply-accumulates x (3, or 4 with recomputation) per
step, from the space's analytic costs) against the device's peak at that precision (from a
hardware spec, ``--hardware``), peak device memory (CUDA: the most in use on the device during the
run, polled, less what was in use before; CPU: the process's peak RSS), and whether the losses equal
the plain loop's bit for bit (``float.hex``; required at fp32, the issue's check).

Targets the output names: seq >= 0.95 x plain, csp1-cache >= 0.9 x plain, in both precisions (the
cache run pays its recomputed forward: its TFLOP/s ratio is printed beside its samples/s ratio).

    python benchmarks/gpu_throughput.py --device cuda --spaces nlp.c3 cv.c3 --set space.candidates=2 \\
        --precisions fp32 bf16 --steps 30 --hardware h200-nvlink-ib --out DIR
    python benchmarks/gpu_throughput.py --device cpu --spaces nlp.tiny cv.tiny --steps 6 --out DIR  # dry run

Writes ``DIR/gpu_throughput.json`` and prints one table; exits 1 if a run fails or the fp32 losses of
naspipe and the plain loop differ.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# name -> (system, stages, --set overrides)
RUNS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "seq": ("sequential", 1, ("recompute=false",)),
    "csp1-cache": ("csp", 1, ("cache.enabled=true",)),
    "csp2": ("csp", 2, ("recompute=false",)),
}
TARGETS = {"seq": 0.95, "csp1-cache": 0.9}


# -- the plain loop (its own process) -------------------------------------------
def plain_child(space: str, sets: list[str], steps: int, device_name: str) -> dict[str, Any]:
    """The plain loop on ``device_name``: its losses (hex), loop seconds and peak device bytes."""
    import torch
    from bench_overhead import plain_config, plain_setup

    device = torch.device(device_name)
    loop = plain_setup(plain_config(space, steps, overrides=tuple(sets)), device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        losses.append(float(loop.step(step)).hex())
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"losses": losses, "loop_s": seconds, "max_allocated_bytes": peak, "max_rss_bytes": rss}


# -- measuring a child ----------------------------------------------------------
class DeviceMemory:
    """The most device memory in use while a child runs (CUDA: polled every 20 ms), less the idle use."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.peak, self._stop = cuda, 0, threading.Event()
        self._thread: threading.Thread | None = None
        if cuda:
            import torch

            free, total = torch.cuda.mem_get_info()
            self._base, self._total = total - free, total

    def __enter__(self) -> DeviceMemory:
        if self.cuda:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _poll(self) -> None:
        import torch

        while not self._stop.wait(0.02):
            free, _ = torch.cuda.mem_get_info()
            self.peak = max(self.peak, self._total - free - self._base)


def run_child(command: list[str], cuda: bool) -> tuple[int, str, float | None]:
    """Exit status, stderr tail and peak memory (bytes on the device, else the child's peak RSS)."""
    with DeviceMemory(cuda) as memory:
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              check=False)
    err = proc.stderr
    peak = float(memory.peak) if cuda else None
    return proc.returncode, err[-3000:], peak


def naspipe_run(space: str, sets: list[str], precision: str, name: str, steps: int, device: str,
                out: Path) -> dict[str, Any]:
    system, stages, extra = RUNS[name]
    run_dir = out / space / precision / name
    command = [sys.executable, "-m", "naspipe", "train", "--space", space, "--system", system, "--stages",
               str(stages), "--steps", str(steps), "--seed", "0", "--overwrite", "--out", str(run_dir),
               *[a for s in (*sets, f"device={device}", f"precision={precision}", "progress=off", *extra)
                 for a in ("--set", s)]]
    start = time.perf_counter()
    code, err, peak = run_child(command, device == "cuda")
    record: dict[str, Any] = {"command": " ".join(command[2:]), "exit": code, "wall_s": time.perf_counter() - start}
    if code != 0:
        return {**record, "stderr_tail": err}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    with open(run_dir / "losses.csv", encoding="utf-8") as f:
        losses = [row["loss_hex"] for row in csv.DictReader(f)]
    cache = {k: metrics[k] for k in ("cache_hit_rate", "peak_device_bytes") if k in metrics}
    rss = max(e.get("max_rss_mb", 0.0) for e in metrics["stage_extra"]) * 2**20
    return {**record, "samples_s": metrics["throughput_samples_s"], "losses": losses, "recompute": "recompute=false"
            not in extra, "peak_memory_bytes": peak if peak is not None else rss, **cache}


def plain_run(space: str, sets: list[str], precision: str, steps: int, device: str, out: Path) -> dict[str, Any]:
    result = out / space / precision / "plain.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--plain", "--device", device, "--spaces", space, "--steps", str(steps),
               *[a for s in (*sets, f"precision={precision}") for a in ("--set", s)], "--json", str(result)]
    start = time.perf_counter()
    code, err, peak = run_child(command, device == "cuda")
    record: dict[str, Any] = {"exit": code, "wall_s": time.perf_counter() - start}
    if code != 0:
        return {**record, "stderr_tail": err}
    data = json.loads(result.read_text())
    batch = batch_size(space, sets)
    return {**record, "samples_s": steps * batch / data["loop_s"], "losses": data["losses"], "recompute": False,
            "peak_memory_bytes": data["max_rss_bytes"] if peak is None else peak,
            "max_allocated_bytes": data["max_allocated_bytes"]}


# -- figures ----------------------------------------------------------------------
def batch_size(space: str, sets: list[str]) -> int:
    from naspipe.config import load_config
    from naspipe.runplan.job import build_shape

    shape = build_shape(load_config(None, [f"space.name={space}", *sets], {}))
    return int(shape.options.get("batch_size", 1))


def step_flops(space: str, sets: list[str], steps: int, recompute: bool) -> float:
    """Mean FLOPs a step executes: 2 x MACs x (forward, backward twice, and the recomputed forward)."""
    from naspipe.config import load_config
    from naspipe.runplan.job import build_shape
    from naspipe.subnet import SubnetStream

    config = load_config(None, [f"space.name={space}", *sets], {})
    shape = build_shape(config)
    stream = SubnetStream(shape.structure.choices_per_block, config.seed)
    layers = [shape.structure.position_layers(stream[i]) for i in range(steps)]
    macs = [sum(shape.layer_cost(lid) - 1.0 for lid in ids) for ids in layers]
    return 2.0 * sum(macs) / steps * (4.0 if recompute else 3.0)


def peak_flops(hardware: str, precision: str) -> float | None:
    from naspipe.errors import UsageError
    from naspipe.sim.hardware import load_hardware

    try:
        return load_hardware(hardware).at_precision(precision).peak_flops
    except UsageError:
        return None


def figures(runs: dict[str, dict[str, Any]], space: str, sets: list[str], precision: str, steps: int,
            hardware: str) -> None:
    """Ratios to the plain loop, TFLOP/s and their share of the peak, loss equality, in place."""
    plain = runs["plain"]
    peak = peak_flops(hardware, precision)
    batch = batch_size(space, sets)
    for name, run in runs.items():
        if run["exit"] != 0:
            continue
        tflops = run["samples_s"] / batch * step_flops(space, sets, steps, run["recompute"]) / 1e12
        run["tflops"] = tflops
        run["of_peak"] = tflops * 1e12 / peak if peak else None
        if name != "plain" and plain["exit"] == 0:
            run["ratio"] = run["samples_s"] / plain["samples_s"]
            run["tflops_ratio"] = tflops / plain["tflops"]
            run["losses_equal_plain"] = run["losses"] == plain["losses"]
            run["target"] = TARGETS.get(name)


HEADER = (f"{'space':9} {'prec':5} {'run':11} {'samples/s':>10} {'x plain':>8} {'TFLOP/s':>8} {'x plain':>8} "
          f"{'of peak':>8} {'mem GiB':>8} {'losses = plain':>15}")


def table(cases: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """One row per run: the figures of :func:`figures`."""
    lines = []
    for key, runs in cases.items():
        space, precision = key.split("/")
        for name, r in runs.items():
            if r["exit"] != 0:
                lines.append(f"{space:9} {precision:5} {name:11} FAILED (exit {r['exit']})")
                continue
            ratio = f"{r['ratio']:.3f}" if "ratio" in r else "-"
            tratio = f"{r['tflops_ratio']:.3f}" if "tflops_ratio" in r else "-"
            share = f"{r['of_peak']:.1%}" if r.get("of_peak") is not None else "-"
            equal = "-" if "losses_equal_plain" not in r else ("bitwise" if r["losses_equal_plain"] else "DIFFER")
            target = f" (target {r['target']})" if r.get("target") else ""
            mem = (r.get("peak_memory_bytes") or 0.0) / 2**30
            lines.append(f"{space:9} {precision:5} {name:11} {r['samples_s']:10.1f} {ratio:>8} {r['tflops']:8.2f} "
                         f"{tratio:>8} {share:>8} {mem:8.2f} {equal:>15}{target}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--spaces", nargs="+", default=["nlp.c3", "cv.c3"])
    parser.add_argument("--set", dest="sets", action="append", default=None, metavar="KEY=VALUE",
                        help="config overrides for every run (default: space.candidates=2 on the c-spaces)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "tf32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--hardware", default="h200-nvlink-ib", help="spec whose peak FLOP/s the figures use")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sets = args.sets if args.sets is not None else []
    if args.plain:
        assert args.json is not None
        args.json.write_text(json.dumps(plain_child(args.spaces[0], sets, args.steps, args.device)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_throughput: no CUDA device (use --device cpu for a dry run)", file=sys.stderr)
            return 2
    report: dict[str, Any] = {"device": args.device, "steps": args.steps, "sets": sets, "cases": {},
                              "hardware": args.hardware, "cpus": os.cpu_count()}
    ok = True
    print(HEADER, flush=True)
    for space in args.spaces:
        paper = re.fullmatch(r"(nlp|cv)\.c\d", space) is not None  # a paper space: a small supernet of it
        space_sets = sets if args.sets is not None or not paper else ["space.candidates=2"]
        for precision in args.precisions:
            runs = {"plain": plain_run(space, space_sets, precision, args.steps, args.device, args.out)}
            for name in args.runs:
                runs[name] = naspipe_run(space, space_sets, precision, name, args.steps, args.device, args.out)
            figures(runs, space, space_sets, precision, args.steps, args.hardware)
            report["cases"][f"{space}/{precision}"] = runs
            ok &= all(r["exit"] == 0 for r in runs.values())
            ok &= precision != "fp32" or all(r.get("losses_equal_plain", True) for r in runs.values())
            print("\n".join(table({f"{space}/{precision}": runs})), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for runs in report["cases"].values():
        for run in runs.values():
            run.pop("losses", None)
    (args.out / "gpu_throughput.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
