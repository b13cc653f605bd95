"""Checkpoints taken at drain points, loadable with ``torch.load(weights_only=True)``.

At a checkpoint boundary ``s`` stage 0 admits no subnet ``>= s`` until every earlier one has
finished, so each stage saves exactly the state after subnets ``< s``: layer tensors,
optimizer state, and the loss and access logs so far. Shards are keyed by layer id, so a
run may resume with a different stage count. Each stage writes its shard atomically; stage
0 writes ``manifest.json`` last, after a barrier: a checkpoint without a manifest is
incomplete and ignored, so a crash never damages the previous complete one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write, atomic_write_json

MANIFEST = "manifest.json"
# Keys that change numerics: a resumed run must match the checkpoint on these.
MUST_MATCH = ("seed", "system", "space", "shared_policy", "optimizer", "recompute", "bulk_size")


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:08d}"


def save_shard(directory: Path, stage: int, shard: dict[str, Any]) -> None:
    atomic_write(directory / f"stage-{stage}.pt", lambda f: torch.save(shard, f), binary=True)


def write_manifest(directory: Path, step: int, stages: int, config: dict[str, Any], keep: int) -> None:
    atomic_write_json(directory / MANIFEST, {"step": step, "stages": stages, "config": config})
    complete = sorted(p.parent for p in directory.parent.glob(f"step-*/{MANIFEST}"))
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(path: Path) -> Path:
    """A checkpoint directory, or the newest complete one under a run directory."""
    if (path / MANIFEST).is_file():
        return path
    complete = sorted((path / "checkpoints").glob(f"step-*/{MANIFEST}"))
    if not complete:
        raise UsageError(f"--resume {path}: no complete checkpoint (no {MANIFEST}) found")
    return complete[-1].parent


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    try:
        return json.loads((checkpoint / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"checkpoint {checkpoint}: unreadable {MANIFEST} ({exc})") from None


def check_compatible(manifest: dict[str, Any], config: dict[str, Any], checkpoint: Path) -> None:
    saved = manifest["config"]
    for key in MUST_MATCH:
        if _normal(saved.get(key)) != _normal(config.get(key)):
            raise UsageError(f"--resume {checkpoint}: config key {key!r} is {config.get(key)!r}, "
                             f"checkpoint has {saved.get(key)!r}")
    if config["steps"] <= manifest["step"]:
        raise UsageError(f"--resume {checkpoint}: --steps {config['steps']} is not past the checkpoint's "
                         f"step {manifest['step']}")


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value))


def load_shards(checkpoint: Path) -> list[dict[str, Any]]:
    manifest = read_manifest(checkpoint)
    shards = []
    for stage in range(manifest["stages"]):
        path = checkpoint / f"stage-{stage}.pt"
        try:
            shards.append(torch.load(path, map_location="cpu", weights_only=True))
        except (OSError, RuntimeError) as exc:
            raise UsageError(f"checkpoint shard {path}: cannot load ({exc})") from None
    return shards
