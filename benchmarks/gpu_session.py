"""One GPU session, prepared to succeed the first time it meets the GPU: every issue-35 check in 8 minutes.

On one H200 (16 cores), from a checkout of this repository, with the machine's own Python and torch:

1. ``setup``: wheels carried in ``.whl/`` (jsonschema and its dependencies, which that image lacks)
   installed into ``/tmp/site`` for every child; the GPU, torch and the CPU count printed.
2. ``throughput``: ``benchmarks/gpu_throughput.py``: nlp.c3 and cv.c3 (2 candidates: full-width paper
   subnets, a small supernet), fp32 and bf16, the plain loop against sequential, csp D=1 with the
   cache and csp D=2.
3. ``build``: ``benchmarks/host_build.py``: the host store of nlp.c3 (2 candidates) built one by one
   against on every core, one weights digest.
4. ``c3``: the paper-size supernet, nlp.c3 (24 candidates, 5.4 B parameters), trained by csp at D=1
   through the context manager (host store, device cache) in bf16: start-up (the process's wall time
   less the training loop's makespan), cache hit rate, host and device memory, samples/s.
5. ``check`` and ``tests``, side by side: ``benchmarks/cuda_check.py`` (every group bitwise, the bf16
   group included) and the CUDA tests (``tests/test_cuda.py``, ``tests/test_precision.py``,
   ``tests/test_host_build.py`` with ``device=auto``, so on the GPU).

Each phase runs under its own time limit (``--budget``, seconds), so one that overruns is cut and
reported while the others still run; phases run in the order above. Everything lands in ``--out``
as at most 8 files, none in a subfolder (what the device tool brings back): ``session.log`` (every
phase's output), ``summary.json`` (each phase's exit status and seconds), ``gpu_throughput.json``,
``host_build.json``, ``c3_metrics.json``, ``cuda_check.json``, ``pytest.log``.

    python3 benchmarks/gpu_session.py --out "$OUT"                 # on the GPU machine
    python benchmarks/gpu_session.py --dry-run --out /tmp/session   # here: the same phases, small, on the CPU
    python benchmarks/gpu_session.py --fetch-wheels                 # here, once: the wheels into .whl/

The device tool's command (``.whl`` carried)::

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_session.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
WHEELS = ROOT / ".whl"
SITE = Path("/tmp/site")
# jsonschema==4.26.0 (pyproject.toml) and what it needs that the GPU image lacks (attrs is there)
WHEEL_PINS = ("jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# seconds per phase on the GPU: 8 minutes in all, start-up of each child included
BUDGET = {"setup": 20, "throughput": 200, "build": 25, "c3": 100, "checks": 130}


def phases(dry: bool, work: Path, out: Path) -> dict[str, list[list[str]]]:
    """Each phase's commands (the two of ``checks`` run side by side), at GPU or dry-run size."""
    device = "cpu" if dry else "cuda"
    bench = ROOT / "benchmarks"
    throughput = [PY, str(bench / "gpu_throughput.py"), "--device", device, "--out", str(work / "throughput")]
    throughput += (["--spaces", "nlp.tiny", "cv.tiny", "--steps", "4", "--hardware", "cpu-local"] if dry else
                   ["--spaces", "nlp.c3", "cv.c3", "--steps", "16", "--hardware", "h200-nvlink-ib"])
    c3 = ["nlp.tiny", "--steps", "6"] if dry else ["nlp.c3", "--steps", "24"]
    build = ["--space", "nlp.tiny", "--workers", "1", "2", "--repeats", "1"] if dry else \
        ["--space", "nlp.c3", "--set", "space.candidates=2", "--workers", "1", "16", "--repeats", "1"]
    pytest = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2" if dry else "8", "tests/test_cuda.py",
              "tests/test_precision.py", "tests/test_host_build.py"]
    if dry:  # the CPU's bf16 grid is the default suite's; the dry run checks the phase's plumbing
        pytest += ["-k", "not csp_with_the_cache"]
    return {
        "setup": [[PY, "-c", "import sys, os, torch; print(sys.version.split()[0], torch.__version__, "
                   "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', os.cpu_count(), "
                   "'cores')"], [PY, "-c", "import jsonschema, naspipe.cli; print('imports ok')"]],
        "throughput": [throughput],
        "build": [[PY, str(bench / "host_build.py"), *build, "--json", str(out / "host_build.json")]],
        "c3": [[PY, "-m", "naspipe", "train", "--space", c3[0], "--system", "csp", "--stages", "1", *c3[1:],
                "--seed", "0", "--set", "cache.enabled=true", "--set", f"device={device}", "--set", "precision=bf16",
                "--set", "progress=off", "--overwrite", "--out", str(work / "c3")]],
        "checks": [[PY, str(bench / "cuda_check.py"), "--device", device, "--steps", "4" if dry else "24",
                    "--jobs", "2" if dry else "5", "--spaces", *(["nlp.tiny"] if dry else ["nlp.tiny", "cv.tiny"]),
                    "--out", str(work / "cuda_check")], pytest],
    }


def run_phase(name: str, commands: list[list[str]], limit: float, log: Any, env: dict[str, str]) -> dict[str, Any]:
    """Run the phase's commands side by side under one time limit; their exit statuses and seconds."""
    start = time.perf_counter()
    log.write(f"\n===== {name} (limit {limit:.0f} s) =====\n")
    log.flush()
    logs = [tempfile.TemporaryFile("w+") for _ in commands]
    procs = [subprocess.Popen(c, stdout=f, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
             for c, f in zip(commands, logs, strict=True)]
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, limit - (time.perf_counter() - start))))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
            codes[-1] = 124
    for command, f, code in zip(commands, logs, codes, strict=True):
        f.seek(0)
        text = f.read()
        log.write(f"$ {' '.join(command[1:])}\n{text}\n[exit {code}]\n")
        if name == "checks" and "pytest" in command:
            (Path(log.name).parent / "pytest.log").write_text(text)
    seconds = time.perf_counter() - start
    log.write(f"===== {name}: {seconds:.1f} s, exit {codes} =====\n")
    log.flush()
    print(f"{name}: {seconds:.1f} s, exit {codes}", flush=True)
    return {"exit": codes, "seconds": round(seconds, 1), "limit_s": limit}


def c3_figures(work: Path, wall_s: float) -> dict[str, Any]:
    """Item 3's figures from the nlp.c3 run's metrics.json."""
    path = work / "c3" / "metrics.json"
    if not path.is_file():
        return {"error": "no metrics.json"}
    m = json.loads(path.read_text())
    extra = m["stage_extra"][0]
    return {"wall_s": wall_s, "makespan_s": m["makespan_s"], "startup_and_exit_s": wall_s - m["makespan_s"],
            "samples_s": m["throughput_samples_s"], "cache_hit_rate": m.get("cache_hit_rate"),
            "peak_device_bytes": m.get("peak_device_bytes"), "cache_peak_bytes": m.get("cache_peak_bytes"),
            "cache_budget_bytes": m.get("cache_budget_bytes"), "host_max_rss_mb": extra.get("max_rss_mb"),
            "precision": m.get("precision"), "subnets": m["subnets"], "space": m["space"]}


def install_wheels(env: dict[str, str], log: Any) -> None:
    """The carried wheels into /tmp/site, first on every child's path (none carried: nothing to do)."""
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    if not wheels:
        return
    proc = subprocess.run([PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(SITE), *wheels],
                          capture_output=True, text=True, check=False)
    log.write(f"wheels: {len(wheels)} installed into {SITE} (exit {proc.returncode}) {proc.stderr[-500:]}\n")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), str(ROOT), env.get("PYTHONPATH", "")) if p)


def fetch_wheels() -> int:
    """Here, where pip reaches the registry: the wheels the GPU image lacks, for its Python 3.12."""
    WHEELS.mkdir(exist_ok=True)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    for pin in WHEEL_PINS:
        command = [PY, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                   "--implementation", "cp", *platforms, "-d", str(WHEELS), pin]
        if subprocess.run(command, check=False).returncode != 0:
            print(f"gpu_session: could not fetch {pin}", file=sys.stderr)
            return 1
    print(f"{len(list(WHEELS.glob('*.whl')))} wheels in {WHEELS}; name .whl in the device tool's carry")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="the same phases at small sizes on the CPU")
    parser.add_argument("--only", nargs="+", choices=list(BUDGET), help="run these phases alone")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every phase's time limit")
    parser.add_argument("--fetch-wheels", action="store_true")
    args = parser.parse_args()
    if args.fetch_wheels:
        return fetch_wheels()
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="naspipe-session-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    summary: dict[str, Any] = {"dry_run": args.dry_run, "phases": {}}
    with open(args.out / "session.log", "w", encoding="utf-8") as log:
        install_wheels(env, log)
        for name, commands in phases(args.dry_run, work, args.out).items():
            if args.only and name not in args.only:
                continue
            summary["phases"][name] = run_phase(name, commands, BUDGET[name] * args.scale, log, env)
            if name == "c3":
                summary["c3"] = c3_figures(work, summary["phases"][name]["seconds"])
    for source, target in ((work / "throughput" / "gpu_throughput.json", "gpu_throughput.json"),
                           (work / "cuda_check" / "cuda_check.json", "cuda_check.json"),
                           (work / "c3" / "metrics.json", "c3_metrics.json")):
        if source.is_file():
            shutil.copyfile(source, args.out / target)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    failed = [n for n, p in summary["phases"].items() if any(c != 0 for c in p["exit"])]
    print(f"gpu_session: {'all phases passed' if not failed else 'failed: ' + ', '.join(failed)}; see {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
