"""What ``numerics: portable`` costs: training time per subnet under native and portable kernels, side by side.

For each space (nlp.tiny and cv.tiny as the default workflow trains them, and wider versions of both whose
matrix products and convolutions dominate a step), the modes run interleaved (native, portable, native, ...)
in fresh processes, ``--repeat`` times; the figure is the median CPU time per subnet in steady state (one stage,
one thread, in the process: from the first subnet's end to the last's, so start-up, the space's build and the
final outputs are left out; CPU time rather than wall time, because on a loaded shared machine wall time
measures the other tenants) and the slowdown is the median of the paired
ratios, so load that drifts over the run cancels.
``portable-mkl-avx2`` is ``portable`` with MKL's AVX2 branch in place of its COMPATIBLE one: the price of MKL's
cross-vendor promise (docs/numerics.md); it is not a mode of the config and is run through this script's own
driver.

    python benchmarks/numerics_cost.py                     # the table in docs/numerics.md
    python benchmarks/numerics_cost.py --repeat 1 --steps 16 --case nlp.tiny

Figures depend on the machine's load: report ``uptime`` with them (printed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from naspipe.numerics import PORTABLE_ENV  # noqa: E402

# name -> (space, its options): the workflow's two spaces at its batch size, and each made wider
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "nlp.tiny": ("nlp.tiny", {"batch_size": 32}),
    "cv.tiny": ("cv.tiny", {"batch_size": 32, "candidates": 3}),
    "nlp.tiny dim 256": ("nlp.tiny", {"batch_size": 32, "dim": 256, "seq_len": 32, "vocab": 512}),
    "cv.tiny 64 channels 32 px": ("cv.tiny", {"batch_size": 32, "candidates": 3, "channels": 64, "image_size": 32}),
}
MODES = ("native", "portable", "portable-mkl-avx2")
# the driver of one run: the environment is set by the caller; the stage check is skipped only for the variant
# that is not a config mode (its pins are portable's but for MKL_CBWR)
DRIVER = r"""
import json, sys, time
from pathlib import Path
from naspipe import numerics
if sys.argv[1] == "portable-mkl-avx2":
    numerics.check_loaded = lambda mode: None
else:
    numerics.apply(sys.argv[1])  # what naspipe train does before torch loads
from naspipe.config import load_config
from naspipe.runtime.launch import train
space, options, steps, out = sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
sets = [f"space.{k}={v}" for k, v in options.items()] + ["progress=off", "final_checkpoint=false", "trace_max_events=0",
        f"numerics={'native' if sys.argv[1] == 'portable-mkl-avx2' else sys.argv[1]}"]
import naspipe.runtime.launch as launch
done = []
class Clock:  # in place of the progress bar: the CPU time at each subnet's end on the (only) stage
    def step(self, subnet, loss):
        done.append(time.process_time())
    def close(self):
        pass
launch._progress_bar = lambda job, initial: Clock()
config = load_config(None, sets, {"space.name": space, "system": "sequential", "stages": 1, "steps": steps, "seed": 0})
metrics = train(config, out, overwrite=True)
print(json.dumps({"ms_per_subnet": 1000.0 * (done[-1] - done[0]) / (len(done) - 1),
                  "capability": metrics["numerics"]["cpu_capability"]}))
"""


def environment(mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if mode == "portable-mkl-avx2":
        env.update(PORTABLE_ENV, MKL_CBWR="AVX2")
    return env


def one(case: str, mode: str, steps: int, work: Path) -> float:
    """Milliseconds per subnet of one run of ``case`` under ``mode`` (a fresh process)."""
    space, options = CASES[case]
    command = [sys.executable, "-c", DRIVER, mode, space, json.dumps(options), str(steps), str(work / "run")]
    done = subprocess.run(command, env=environment(mode), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} {mode}: {done.stderr.strip()[-1500:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms_per_subnet"])


def measure(cases: list[str], steps: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {c: {m: [] for m in MODES} for c in cases}
    with tempfile.TemporaryDirectory(prefix="numerics_cost.") as tmp:
        for _ in range(repeat):
            for case in cases:
                for mode in MODES:
                    found[case][mode].append(one(case, mode, steps, Path(tmp)))
                    print(f"{case} {mode}: {found[case][mode][-1]:.1f} ms/subnet", file=sys.stderr, flush=True)
    return found


def table(found: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| space | native CPU ms/subnet | portable CPU ms/subnet | portable / native | MKL AVX2 branch / native |",
             "|---|---|---|---|---|"]
    for case, times in found.items():
        ratio = statistics.median(p / n for p, n in zip(times["portable"], times["native"], strict=True))
        avx2 = statistics.median(p / n for p, n in zip(times["portable-mkl-avx2"], times["native"], strict=True))
        lines.append(f"| {case} | {statistics.median(times['native']):.1f} | "
                     f"{statistics.median(times['portable']):.1f} | {ratio:.2f}x | {avx2:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--case", action="append", choices=list(CASES), help="a space (repeatable; default: all)")
    p.add_argument("--steps", type=int, default=48, help="subnets per run (default 48)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved repeats per case and mode (default 3)")
    args = p.parse_args(argv)
    found = measure(args.case or list(CASES), args.steps, args.repeat)
    print(table(found))
    print(f"\n{args.steps} subnets per run, {args.repeat} repeats; load: {os.getloadavg()[0]:.1f} (1-minute average)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
