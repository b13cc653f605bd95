"""Building a supernet's layers one by one against on every core: seconds, parameters/s, same bits.

Each measurement is a fresh process that builds every layer of the space (what a one-stage run's
host store holds before its first step) with ``naspipe.runtime.build.build_layers`` and a given
number of worker processes: 1 is the build as it was (``space.build_layer`` in a loop, in the
process itself), N > 1 the worker pool (its start-up included). The order of the settings
alternates between repeats; the output gives each setting's median seconds, parameters/s and the
SHA-256 over every layer's tensors, which must be one digest for all (exit 1 otherwise).

    python benchmarks/host_build.py --space nlp.c3 --set space.candidates=2 --workers 1 2 --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def build_once(space_name: str, sets: list[str], workers: int, threads: int) -> dict[str, Any]:
    """Build every layer here; seconds, parameters and the digest of all tensors (layer order)."""
    sys.path.insert(0, str(ROOT))
    import torch

    from naspipe.config import load_config
    from naspipe.determinism import make_deterministic
    from naspipe.runtime.build import build_layers
    from naspipe.runtime.outputs import tensor_digest
    from naspipe.space import make_space

    config = load_config(None, [f"space.name={space_name}", *sets], {})
    make_deterministic(threads, torch.device("cpu"))
    space = make_space(config.space_name, config.space_options, config.shared_policy)
    ids = range(space.structure.num_layers)
    start, cpu = time.perf_counter(), _cpu_s()
    layers = build_layers(space, ids, config.seed, threads, workers, min_params=0)
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    digest = hashlib.sha256()
    params = 0
    for lid in ids:
        module = layers[lid]
        params += sum(p.numel() for p in module.parameters())
        digest.update(tensor_digest({**dict(module.named_parameters()), **dict(module.named_buffers())}).encode())
    return {"workers": workers, "seconds": seconds, "cpu_s": cpu, "params": params, "digest": digest.hexdigest(),
            "load": os.getloadavg()[0]}


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the build workers, once the pool is shut)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(space: str, sets: list[str], workers: int, threads: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--space", space, "--workers", str(workers),
               "--threads", str(threads), *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"host_build: {' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="nlp.c3")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process (config key threads)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the runs and medians here")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build_once(args.space, args.sets, args.workers[0], args.threads)))
        return 0
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = args.workers if repeat % 2 == 0 else list(reversed(args.workers))
        runs += [measure(args.space, args.sets, w, args.threads) for w in order]
    rows = []
    for w in args.workers:
        seconds = statistics.median(r["seconds"] for r in runs if r["workers"] == w)
        cpu = statistics.median(r["cpu_s"] for r in runs if r["workers"] == w)
        params = next(r["params"] for r in runs if r["workers"] == w)
        rows.append({"workers": w, "median_s": seconds, "cpu_s": cpu, "params_per_s": params / seconds,
                     "params": params})
        print(f"workers {w:>2}: {seconds:7.2f} s median over {args.repeats} ({cpu:6.2f} CPU s)  "
              f"{params / seconds / 1e6:6.1f} M params/s ({params / 1e6:.1f} M parameters)")
    digests = sorted({r["digest"] for r in runs})
    base = rows[0]["median_s"]
    for row in rows[1:]:
        print(f"workers {row['workers']} vs {rows[0]['workers']}: {base / row['median_s']:.2f}x faster")
    print(f"weights digest: {digests[0] if len(digests) == 1 else 'DIFFER: ' + ', '.join(digests)}; load average "
          f"{statistics.median(r['load'] for r in runs):.1f} during the runs")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, "medians": rows, "digests": digests}, indent=1))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
