"""Which pin of ``numerics: portable`` decides which operation's bits: each pin alone, all, none, side by side.

Each variant runs in a fresh process (the libraries read their variable once, when torch first uses them) and
prints a short digest of a matrix product (MKL), a convolution (oneDNN), a softmax and a layer norm (ATen's
vectorised kernels). A pin is necessary on this machine when setting it alone changes some digest against
``native``; an AVX2-only machine runs AVX2 kernels natively, so there a pin may change nothing.

    python benchmarks/numerics_probe.py            # a table: variant, torch's CPU capability, digest per op
    python benchmarks/numerics_probe.py --timing   # also: microseconds per op (medians of 50)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from naspipe.numerics import PORTABLE_ENV  # noqa: E402

CHILD = r"""
import hashlib, json, statistics, sys, time
import torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(256, 512, generator=g), torch.randn(512, 256, generator=g)
x, w = torch.randn(32, 16, 16, 16, generator=g), torch.randn(32, 16, 3, 3, generator=g)
ops = {
    "matmul (MKL)": lambda: a @ b,
    "conv2d (oneDNN)": lambda: torch.nn.functional.conv2d(x, w, padding=1),
    "softmax (ATen)": lambda: torch.softmax(a, -1),
    "layer_norm (ATen)": lambda: torch.nn.functional.layer_norm(a, (512,)),
}
def digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:8]
def micros(f):
    f()
    times = []
    for _ in range(50):
        t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6
out = {"capability": torch.backends.cpu.get_cpu_capability(), "digest": {k: digest(f()) for k, f in ops.items()}}
if sys.argv[1] == "1":
    out["us"] = {k: round(micros(f), 1) for k, f in ops.items()}
print(json.dumps(out))
"""


def variants() -> dict[str, dict[str, str]]:
    """native, each pin alone, portable; plus MKL's Intel-only AVX2 branch in place of COMPATIBLE."""
    found: dict[str, dict[str, str]] = {"native": {}}
    found.update({f"{name}={value} only": {name: value} for name, value in PORTABLE_ENV.items()})
    found["portable"] = dict(PORTABLE_ENV)
    found["portable with MKL_CBWR=AVX2"] = {**PORTABLE_ENV, "MKL_CBWR": "AVX2"}
    return found


def probe(pins: dict[str, str], timing: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV} | pins
    done = subprocess.run([sys.executable, "-c", CHILD, "1" if timing else "0"], env=env, capture_output=True,
                          text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--timing", action="store_true", help="also time each op (microseconds, median of 50)")
    args = p.parse_args(argv)
    rows = {name: probe(pins, args.timing) for name, pins in variants().items()}
    ops = list(next(iter(rows.values()))["digest"])  # type: ignore[call-overload]
    print("| variant | capability | " + " | ".join(ops) + " |")
    print("|---|---|" + "---|" * len(ops))
    for name, row in rows.items():
        digests: dict[str, str] = row["digest"]  # type: ignore[assignment]
        us: dict[str, float] = row.get("us", {})  # type: ignore[assignment]
        cells = [digests[op] + (f" ({us[op]:.0f} us)" if op in us else "") for op in ops]
        print(f"| {name} | {row['capability']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
