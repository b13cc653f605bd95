"""The CUDA paths, checked on a machine with a GPU: bitwise equality, determinism, the cache.

Runs the real command (``python -m naspipe train``, one process per stage) on CUDA for each
space and compares the runs with ``naspipe compare``. Each group below must be bitwise
identical inside itself; the CPU reference and the baselines are run for information only
(CUDA and CPU kernels differ, so CPU equality is not promised).

- sequential twice (GPU determinism: deterministic algorithms, CUBLAS workspace, TF32 off);
- csp at D = 1 with the context manager (device cache, copies on a CUDA stream);
- csp at D = 2 and csp-no-scheduler at D = 3 (stages sharing one GPU talk over gloo through
  host memory: NCCL refuses two ranks on one device);
- csp at D = 4 with the cache and per-subnet partitions (mirrored layers sent between stages);
- the same with Adam against sequential with Adam;
- bf16 (``precision=bf16``: autocast per layer): sequential twice, csp at D = 1 with the cache, at
  D = 2, and at D = 4 with the cache and per-subnet partitions (bf16 tensors crossing stages).

    python benchmarks/cuda_check.py [--steps 24] [--spaces nlp.tiny cv.tiny] [--jobs 4] --out DIR

``--device cpu`` runs the same matrix on the CPU (a dry run of the script where there is no GPU).

Writes ``DIR/cuda_check.json`` (every run's command, exit status, wall time and key metrics,
and each group's verdict) and prints one line per group; exits 1 if a group differs or a run
fails. With no CUDA device it exits 2 at once.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# name -> (system, stages, extra --set overrides)
RUNS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "seq-a": ("sequential", 1, ()),
    "seq-b": ("sequential", 1, ()),
    "csp1-cache": ("csp", 1, ("cache.enabled=true",)),
    "csp2": ("csp", 2, ()),
    "cspns3": ("csp-no-scheduler", 3, ()),
    "csp4-cache-per-subnet": ("csp", 4, ("cache.enabled=true", "partition_mode=per-subnet")),
    "seq-adam": ("sequential", 1, ("optimizer.name=adam",)),
    "csp4-cache-adam": ("csp", 4, ("cache.enabled=true", "optimizer.name=adam")),
    "seq-bf16-a": ("sequential", 1, ("precision=bf16",)),
    "seq-bf16-b": ("sequential", 1, ("precision=bf16",)),
    "csp1-cache-bf16": ("csp", 1, ("cache.enabled=true", "precision=bf16")),
    "csp2-bf16": ("csp", 2, ("precision=bf16",)),
    "csp4-cache-per-subnet-bf16": ("csp", 4, ("cache.enabled=true", "partition_mode=per-subnet", "precision=bf16")),
    "gpipe2": ("gpipe", 2, ()),
    "seq-cpu": ("sequential", 1, ("device=cpu",)),
}
GROUPS: dict[str, tuple[str, ...]] = {
    "sgd: sequential x2, csp D=1 cache, csp D=2, csp-no-scheduler D=3, csp D=4 cache per-subnet":
        ("seq-a", "seq-b", "csp1-cache", "csp2", "cspns3", "csp4-cache-per-subnet"),
    "adam: sequential, csp D=4 cache": ("seq-adam", "csp4-cache-adam"),
    "bf16: sequential x2, csp D=1 cache, csp D=2, csp D=4 cache per-subnet":
        ("seq-bf16-a", "seq-bf16-b", "csp1-cache-bf16", "csp2-bf16", "csp4-cache-per-subnet-bf16"),
}
INFO = ("gpipe2", "seq-cpu", "seq-bf16-a")  # compared with seq-a and reported, never required (bf16 must differ)
# cache_peak_bytes: the cache's own peak, to compare with its budget (peak_device_bytes also holds activations)
METRICS = ("throughput_samples_s", "bubble_ratio", "cache_hit_rate", "cache_peak_bytes", "peak_device_bytes",
           "swap_in_bytes", "mirror_bytes", "device")


def train(space: str, name: str, steps: int, out: Path, device_name: str = "cuda") -> dict[str, Any]:
    system, stages, sets = RUNS[name]
    device = () if any(s.startswith("device=") for s in sets) else (f"device={device_name}",)
    cmd = [sys.executable, "-m", "naspipe", "train", "--space", space, "--system", system, "--stages", str(stages),
           "--steps", str(steps), "--set", "progress=off", *[a for s in (*device, *sets) for a in ("--set", s)],
           "--out", str(out / space / name), "--overwrite"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    record: dict[str, Any] = {"command": " ".join(cmd[1:]), "exit": proc.returncode,
                              "wall_s": round(time.perf_counter() - start, 2)}
    if proc.returncode != 0:
        record["stderr_tail"] = proc.stderr[-3000:]
        return record
    metrics = json.loads((out / space / name / "metrics.json").read_text())
    record.update({k: metrics[k] for k in METRICS if k in metrics})
    return record


def same(out: Path, space: str, a: str, b: str) -> tuple[bool, str]:
    proc = subprocess.run([sys.executable, "-m", "naspipe", "compare", str(out / space / a), str(out / space / b)],
                          capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip().splitlines()[0] if proc.stdout or proc.stderr \
        else ""


def check_space(space: str, runs: dict[str, dict[str, Any]], out: Path) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    for title, members in {**GROUPS, **{f"info: {n} vs seq-a": (("seq-a", n)) for n in INFO}}.items():
        failed = [m for m in members if runs[m]["exit"] != 0]
        if failed:
            verdicts[title] = {"identical": False, "why": f"run(s) failed: {', '.join(failed)}"}
            continue
        diffs = [(m, same(out, space, members[0], m)) for m in members[1:]]
        bad = [f"{m}: {why}" for m, (ok, why) in diffs if not ok]
        verdicts[title] = {"identical": not bad, "why": "; ".join(bad) or "bitwise identical"}
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--spaces", nargs="+", default=["nlp.tiny", "cv.tiny"])
    parser.add_argument("--jobs", type=int, default=4, help="runs at once (they share the GPU)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run of the matrix")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_check: no CUDA device", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    report: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
                              "gpus": torch.cuda.device_count() if cuda else 0, "steps": args.steps, "spaces": {}}
    ok = True
    for space in args.spaces:
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = {name: pool.submit(train, space, name, args.steps, args.out, args.device) for name in RUNS}
            runs = {name: f.result() for name, f in futures.items()}
        verdicts = check_space(space, runs, args.out)
        report["spaces"][space] = {"runs": runs, "groups": verdicts}
        for title, v in verdicts.items():
            required = not title.startswith("info")
            ok &= v["identical"] or not required
            print(f"{space}: {'OK  ' if v['identical'] else ('DIFF' if required else 'info')} {title}: {v['why']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_check.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
