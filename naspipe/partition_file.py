"""The partition file: a static partition computed once, read by every run that uses it.

``naspipe partition`` writes it; ``--set partition_file=F.json`` makes training use its
bounds instead of computing its own. Pinning the partition in a file lets a workflow
compute it once per (space, stage count) from one profile and give every system the same
stage boundaries, so systems are compared on equal footing. Reading checks that the file was
made for the run's space, stage count and number of positions: bounds for another supernet
would silently move layers between stages. Torch-free: only JSON and the pure structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_json, read_json_object
from naspipe.partition import Partition


@dataclass(frozen=True)
class PartitionFile:
    """What ``naspipe partition`` computed, with where its costs came from."""

    space: str
    space_options: dict[str, Any]
    stages: int
    costs: str
    bounds: tuple[int, ...]
    stage_costs: tuple[float, ...]

    @property
    def imbalance(self) -> float:
        """Slowest stage over the mean stage: 1.0 is perfectly balanced."""
        mean = sum(self.stage_costs) / len(self.stage_costs)
        return max(self.stage_costs) / mean if mean > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "space": self.space,
            "space_options": self.space_options,
            "stages": self.stages,
            "costs": self.costs,
            "bounds": list(self.bounds),
            "stage_costs": list(self.stage_costs),
            "imbalance": self.imbalance,
        }


def write_partition_file(path: Path, data: PartitionFile) -> None:
    atomic_write_json(path, data.to_json())


def read_partition_file(path: Path) -> PartitionFile:
    """Parse and validate the file's own consistency; UsageError naming the file and field."""
    raw = read_json_object(path, f"partition file {path}")
    try:
        data = PartitionFile(
            _field(raw, "space", str, path),
            dict(_field(raw, "space_options", dict, path)),
            _field(raw, "stages", int, path),
            _field(raw, "costs", str, path),
            tuple(_ints(raw, "bounds", path)),
            tuple(map(float, _field(raw, "stage_costs", list, path))),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"partition file {path}: field 'stage_costs' must be a list of numbers") from None
    bounds = data.bounds
    if len(bounds) != data.stages + 1 or bounds[0] != 0 or any(a >= b for a, b in pairwise(bounds)):
        raise UsageError(
            f"partition file {path}: field 'bounds' {list(bounds)} is not 0 < ... increasing "
            f"with {data.stages + 1} entries"
        )
    if len(data.stage_costs) != data.stages:
        raise UsageError(
            f"partition file {path}: field 'stage_costs' has {len(data.stage_costs)} entries, expected {data.stages}"
        )
    return data


def partition_for_run(path: Path, space: str, stages: int, num_positions: int) -> Partition:
    """The file's partition, after checking it was made for this space, stage count and supernet."""
    data = read_partition_file(path)
    if data.space != space:
        raise UsageError(f"partition file {path}: made for space {data.space!r}, the run trains {space!r}")
    if data.stages != stages:
        raise UsageError(f"partition file {path}: made for {data.stages} stages, the run has {stages}")
    if data.bounds[-1] != num_positions:
        raise UsageError(
            f"partition file {path}: covers {data.bounds[-1]} positions, space {space!r} has {num_positions}"
        )
    return Partition(data.bounds)


def _field(raw: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UsageError(f"partition file {path}: field {key!r} must be a {kind.__name__}, got {value!r}")
    return value


def _ints(raw: dict[str, Any], key: str, path: Path) -> list[int]:
    values = _field(raw, key, list, path)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise UsageError(f"partition file {path}: field {key!r} must be a list of integers, got {values!r}")
    return values
