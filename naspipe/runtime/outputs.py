"""Rank 0 turns the stages' reports into the run's output files, all published at once.

Files (see the README for their columns): ``losses.csv`` (exact losses as ``float.hex()``),
``weights.sha256``, ``layer_hashes.csv``, ``access_order.csv``, ``metrics.json`` and
``trace.json`` (Chrome trace format, one row per stage; open it in Perfetto). They are
written into a staging directory and renamed into ``--out`` only when all are complete.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from naspipe.fsutil import atomic_write_json, atomic_write_text, publish_dir
from naspipe.runtime.job import Job
from naspipe.runtime.recorder import CATEGORIES, StageReport


def write_outputs(job: Job, reports: list[StageReport], out_dir: Path, wall_s: float, device: str) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    reports = sorted(reports, key=lambda r: r.stage)
    losses = {y: v for r in reports for y, v in r.losses.items()}
    hashes = {layer: (r.stage, h) for r in reports for layer, h in r.layer_hashes.items()}
    access = {layer: seq for r in reports for layer, seq in r.access.items()}
    metrics = compute_metrics(job, reports, wall_s, device)
    atomic_write_text(staging / "losses.csv", _losses_csv(job, losses))
    atomic_write_text(staging / "weights.sha256", weights_digest(hashes) + "\n")
    atomic_write_text(staging / "layer_hashes.csv", _hashes_csv(job, hashes))
    atomic_write_text(staging / "access_order.csv", _access_csv(job, access))
    atomic_write_json(staging / "metrics.json", metrics)
    atomic_write_text(staging / "trace.json", json.dumps(_trace(job, reports)))
    publish_dir(staging, out_dir)
    return metrics


def weights_digest(hashes: dict[int, tuple[int, str]]) -> str:
    """One SHA-256 over every layer's digest in layer-id order (a hash of hashes)."""
    digest = hashlib.sha256()
    for layer in sorted(hashes):
        digest.update(f"{layer}:{hashes[layer][1]}\n".encode())
    return digest.hexdigest()


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _losses_csv(job: Job, losses: dict[int, float]) -> str:
    rows = [[y, "-".join(map(str, job.stream[y].choices)), float.hex(v), repr(v)] for y, v in sorted(losses.items())]
    return _csv(["subnet", "choices", "loss_hex", "loss"], rows)


def _hashes_csv(job: Job, hashes: dict[int, tuple[int, str]]) -> str:
    op = job.space.structure.op_name
    return _csv(["layer", "op", "stage", "sha256"], [[lid, op(lid), s, h] for lid, (s, h) in sorted(hashes.items())])


def _access_csv(job: Job, access: dict[int, list[str]]) -> str:
    op = job.space.structure.op_name
    rows = [[lid, op(lid), "-".join(seq)] for lid, seq in sorted(access.items()) if seq]
    return _csv(["layer", "op", "accesses"], rows)


def compute_metrics(job: Job, reports: list[StageReport], wall_s: float, device: str) -> dict[str, Any]:
    config = job.config
    trained = sum(len(r.losses) for r in reports if r.stage == job.plan.num_stages - 1)
    makespan = max(r.span_s for r in reports) or 1e-9
    busy = [r.busy_s for r in reports]
    samples = trained * _batch_size(job)
    return {
        "system": config.system,
        "space": job.space.name,
        "stages": job.plan.num_stages,
        "partition": str(job.partition),
        "device": device,
        "subnets": trained,
        "wall_s": wall_s,
        "makespan_s": makespan,
        "throughput_samples_s": samples / makespan,
        "subnets_per_hour": trained / makespan * 3600.0,
        "bubble_ratio": 1.0 - sum(busy) / (len(reports) * makespan),
        "bubble_ratio_per_stage": [1.0 - b / makespan for b in busy],
        "exec_s": sum(busy) / max(trained, 1),
        "seconds_per_stage": [{c: r.seconds.get(c, 0.0) for c in CATEGORIES} for r in reports],
        **{key: sum(r.extra.get(key, 0.0) for r in reports) for key in ("swap_bytes", "swap_wait_s", "swap_fetches")},
        "recompute_effective": all(r.extra.get("recompute", float(config.recompute)) for r in reports),
        "stage_extra": [r.extra for r in reports],
        "config": config.to_dict(),
    }


def _batch_size(job: Job) -> int:
    return int(job.space.options.get("batch_size", 1))


def _trace(job: Job, reports: list[StageReport]) -> dict[str, Any]:
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"naspipe {job.config.system}"}}]
    for r in reports:
        meta.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r.stage, "args": {"name": f"stage {r.stage}"}})
    events = [e for r in reports for e in r.events]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}
