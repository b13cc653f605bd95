"""Rank 0 turns the stages' reports and logs into the run's output files.

Files (see the README for their columns): ``losses.csv`` (exact losses as ``float.hex()``),
``weights.sha256``, ``layer_hashes.csv``, ``access_order.csv``, ``metrics.json`` and
``trace.json`` (Chrome trace format, one row per stage; open it in Perfetto), then
``outputs.sha256`` with the digest of each (:mod:`naspipe.rundigest`). Each is
assembled by streaming the stages' append-only logs (:mod:`naspipe.runtime.recorder`), so
memory does not grow with the run's length, and written atomically into the run's working
directory, which the launcher then publishes as a whole (:mod:`naspipe.runtime.rundir`).
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch

from naspipe import numerics
from naspipe.fsutil import atomic_write, atomic_write_json, atomic_write_text
from naspipe.rundigest import hash_of_hashes, write_digests
from naspipe.runplan.job import Job
from naspipe.runplan.rundir import check_still_there
from naspipe.runtime.recorder import (
    CATEGORIES,
    LOSSES,
    StageReport,
    access_log,
    trace_log,
)


def write_outputs(job: Job, reports: list[StageReport], run_dir: Path, wall_s: float, device: str) -> dict[str, Any]:
    """Write every output file into ``run_dir`` from the reports and ``run_dir/logs``; the metrics."""
    check_still_there(run_dir)  # removed or renamed while the run trained: write (and publish) nothing
    logs = run_dir / "logs"
    reports = sorted(reports, key=lambda r: r.stage)
    hashes = {layer: (r.stage, h) for r in reports for layer, h in r.layer_hashes.items()}
    trained = _write_losses(job, logs, run_dir / "losses.csv")
    metrics = compute_metrics(job, reports, wall_s, device, trained)
    atomic_write_text(run_dir / "weights.sha256", weights_digest(hashes) + "\n")
    atomic_write_text(run_dir / "layer_hashes.csv", _hashes_csv(job, hashes))
    atomic_write(run_dir / "access_order.csv", lambda f: _write_access(job, logs, f))
    atomic_write(run_dir / "trace.json", lambda f: _write_trace(job, reports, logs, f))
    atomic_write_json(run_dir / "metrics.json", metrics)
    shutil.rmtree(logs / "trace", ignore_errors=True)  # now in trace.json; the other logs let a run be resumed
    write_digests(run_dir)  # last: what compare and the report verify the files against
    return metrics


def tensor_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names, dtypes, shapes and exact bytes of a layer's tensors, by name."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def weights_digest(hashes: dict[int, tuple[int, str]]) -> str:
    """One SHA-256 over every layer's digest in layer-id order (a hash of hashes)."""
    return hash_of_hashes({layer: h for layer, (_, h) in hashes.items()})


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _losses_in_order(path: Path) -> Iterator[tuple[int, str]]:
    """``(subnet, loss hex)`` by subnet from the last stage's log, which is in order up to the few
    subnets in flight at once: a heap over that window sorts it without reading it all."""
    heap: list[tuple[int, str]] = []
    if not path.is_file():
        return
    expected = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            subnet, _, value = line.rstrip("\n").partition(",")
            heapq.heappush(heap, (int(subnet), value))
            while heap and heap[0][0] == expected:
                yield heapq.heappop(heap)
                expected += 1
    while heap:
        yield heapq.heappop(heap)


def _write_losses(job: Job, logs: Path, out: Path) -> int:
    count = 0

    def write(f: IO[Any]) -> None:
        nonlocal count
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["subnet", "choices", "loss_hex", "loss"])
        for y, value in _losses_in_order(logs / LOSSES):
            writer.writerow([y, "-".join(map(str, job.stream[y].choices)), value, repr(float.fromhex(value))])
            count += 1

    atomic_write(out, write)
    return count


def _hashes_csv(job: Job, hashes: dict[int, tuple[int, str]]) -> str:
    op = job.space.structure.op_name
    return _csv(["layer", "op", "stage", "sha256"], [[lid, op(lid), s, h] for lid, (s, h) in sorted(hashes.items())])


def _write_access(job: Job, logs: Path, f: IO[Any]) -> None:
    """One row per accessed layer: ``layer,op,<subnet><F|B>-...``, each log copied in blocks."""
    op = job.space.structure.op_name
    f.write("layer,op,accesses\n")
    for layer in range(job.space.structure.num_layers):
        path = logs / access_log(layer)
        size = path.stat().st_size if path.is_file() else 0
        if size == 0:
            continue
        prefix = io.StringIO()
        csv.writer(prefix, lineterminator="").writerow([layer, op(layer)])
        f.write(prefix.getvalue() + ",")
        with open(path, encoding="utf-8") as log:
            left = size - 1  # every token ends in "-": drop the last one
            while left > 0:
                block = log.read(min(left, 1 << 20))
                f.write(block)
                left -= len(block)
        f.write("\n")


def compute_metrics(job: Job, reports: list[StageReport], wall_s: float, device: str, trained: int) -> dict[str, Any]:
    config = job.config
    makespan = max(r.span_s for r in reports) or 1e-9
    busy = [r.busy_s for r in reports]
    samples = trained * _batch_size(job)
    return {
        "system": config.system,
        "space": job.space.name,
        "stages": job.plan.num_stages,
        "partition": str(job.partition),
        "device": device,
        "precision": config.precision,
        "subnets": trained,
        "wall_s": wall_s,
        "makespan_s": makespan,
        "throughput_samples_s": samples / makespan,
        "subnets_per_hour": trained / makespan * 3600.0,
        "bubble_ratio": 1.0 - sum(busy) / (len(reports) * makespan),
        "bubble_ratio_per_stage": [1.0 - b / makespan for b in busy],
        "exec_s": sum(busy) / max(trained, 1),
        "seconds_per_stage": [{c: r.seconds.get(c, 0.0) for c in CATEGORIES} for r in reports],
        **{key: sum(r.extra.get(key, 0.0) for r in reports)
           for key in ("swap_bytes", "swap_wait_s", "swap_fetches", "mirror_bytes", "mirror_relay_bytes")},
        **_cache_metrics(reports),
        "recompute_effective": all(r.extra.get("recompute", float(config.recompute)) for r in reports),
        "micro_batches": config.micro_batches,  # the schedule's settings, beside the config they come from
        "split_backward": config.split_backward,
        "priority": config.priority,
        "stage_extra": [r.extra for r in reports],
        "numerics": numerics.describe(config.numerics),
        "config": config.to_dict(),
    }


def _cache_metrics(reports: list[StageReport]) -> dict[str, Any]:
    """The context manager's figures over all stages (absent when no stage ran one)."""
    extras = [r.extra for r in reports if "cache_uses" in r.extra]
    if not extras:
        return {}
    uses = sum(e["cache_uses"] for e in extras)
    hits = sum(e["cache_hit_rate"] * e["cache_uses"] for e in extras)
    return {
        "cache_hit_rate": hits / uses if uses else 1.0,
        **{key: sum(e[key] for e in extras) for key in ("swap_in_bytes", "swap_out_bytes", "copy_wait_s")},
        "peak_device_bytes": max(e["peak_device_bytes"] for e in extras),
        "cache_peak_bytes": max(e["cache_peak_bytes"] for e in extras),
        "cache_budget_bytes": max(e["cache_budget_bytes"] for e in extras),
    }


def _batch_size(job: Job) -> int:
    return int(job.space.options.get("batch_size", 1))


def _write_trace(job: Job, reports: list[StageReport], logs: Path, f: IO[Any]) -> None:
    """Chrome trace JSON (Perfetto), streamed: the metadata rows, then each stage's event log."""
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"naspipe {job.config.system}"}}]
    for r in reports:
        meta.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r.stage, "args": {"name": f"stage {r.stage}"}})
    f.write('{"traceEvents": [')
    f.write(",\n".join(json.dumps(m) for m in meta))
    for r in reports:
        path = logs / trace_log(r.stage)
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as log:
            for line in log:
                f.write(",\n" + line.rstrip("\n"))
    f.write('],\n"displayTimeUnit": "ms"}\n')
