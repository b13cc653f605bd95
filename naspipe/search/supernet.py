"""A trained supernet read back from a run's checkpoint, one layer at a time.

Every run ends with a final checkpoint (:mod:`naspipe.runtime.checkpoint`): one file per
layer keyed by layer id, with SHA-256s in the manifest and the run's config echoed there.
Evaluation needs nothing else: the space is rebuilt from that config, every shard is
verified against the manifest up front (a damaged run is a one-line error, never scored),
and a subnet's layers are built fresh from their seeded init and loaded for each
evaluation, so one subnet's batch-norm recalibration can never leak into the next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from naspipe.config import Config, config_from_dict
from naspipe.errors import UsageError
from naspipe.runtime import checkpoint as ckpt
from naspipe.space import SearchSpace, SpaceLayer, make_space
from naspipe.subnet import Subnet


@dataclass
class TrainedSupernet:
    """The weights of one checkpoint of a run, with the config and space they belong to."""

    checkpoint: Path
    step: int
    config: Config
    space: SearchSpace
    written_at: float | None
    wall_s: float | None  # training wall time up to this checkpoint, resumed segments summed (newer manifests)
    _params: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)

    def layers(self, subnet: Subnet, device: torch.device) -> list[tuple[int, SpaceLayer]]:
        """Fresh modules for the subnet's layers in execution order, loaded with the checkpoint's tensors."""
        out = []
        for lid in self.space.structure.position_layers(subnet):
            module = self.space.build_layer(lid, self.config.seed)
            module.load_state_dict(self._tensors(lid))
            out.append((lid, module.to(device)))
        return out

    def _tensors(self, layer: int) -> dict[str, torch.Tensor]:
        if layer not in self._params:
            self._params[layer] = ckpt.load_layer(self.checkpoint, layer)[0]
        return self._params[layer]


def open_supernet(path: Path) -> TrainedSupernet:
    """The newest complete checkpoint of run ``path`` (or checkpoint directory ``path``), verified."""
    checkpoint = find_weights(path)
    manifest = ckpt.read_manifest(checkpoint)
    config = config_from_dict(manifest["config"])
    space = make_space(config.space_name, config.space_options, config.shared_policy)
    ckpt.verify(checkpoint, manifest, list(range(space.structure.num_layers)))
    written = manifest.get("written_at")
    return TrainedSupernet(checkpoint, int(manifest["step"]), config, space,
                           float(written) if isinstance(written, (int, float)) else None, ckpt.trained_wall_s(manifest))


def find_weights(path: Path) -> Path:
    """``path`` itself when it is a checkpoint, else its run's newest complete checkpoint."""
    if (path / ckpt.MANIFEST).is_file():
        return path
    complete = checkpoints_of(path)
    if not complete:
        raise UsageError(f"--run {path}: no trained weights (no complete checkpoints/step-*/{ckpt.MANIFEST}; "
                         "is it a finished run directory? runs with final_checkpoint=false keep none)")
    return complete[-1]


def checkpoints_of(run: Path) -> list[Path]:
    """The run's complete checkpoints, oldest first."""
    if not run.is_dir():
        raise UsageError(f"--run {run}: not a directory")
    return sorted(p.parent for p in (run / "checkpoints").glob(f"step-*/{ckpt.MANIFEST}"))


def run_wall_s(run: Path) -> float | None:
    """The run's ``wall_s`` from ``metrics.json`` (None when absent, e.g. a checkpoint of a partial run)."""
    try:
        metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = metrics.get("wall_s")
    return float(value) if isinstance(value, (int, float)) else None


# run settings that place work (stages, partitions, in-flight limits, the device cache) or name the run:
# training results do not depend on them beyond the weights, and scoring reads only the weights and the space
LAYOUT_KEYS = frozenset({"system", "stages", "partition_file", "partition_mode", "partition_costs", "cache",
                         "max_inflight", "bulk_size", "progress", "timeout_s", "trace_max_events"})


def search_key(supernet: TrainedSupernet) -> dict[str, Any]:
    """What a search or score of this supernet reads: its layers' digests, its step and the other settings.

    Bitwise equal weights (sequential and csp at any stage count) give equal parts; the per-stage files
    of the checkpoint (which layers a stage held) do not count.
    """
    manifest = ckpt.read_manifest(supernet.checkpoint)
    layers = {name: digest for name, digest in manifest["files"].items() if name.startswith("layer-")}
    config = {k: v for k, v in manifest["config"].items() if k not in LAYOUT_KEYS}
    return {"layers": layers, "step": supernet.step, "config": config}

