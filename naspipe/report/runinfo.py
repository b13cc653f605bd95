"""A run directory as the report sees it: who ran what (from ``metrics.json``) and its results.

Runs describe themselves: ``metrics.json`` names the system, space and stage count and echoes
the config (seed, space options), so the report never parses directory names. Anything
missing or malformed is a UsageError naming the file and field, raised before anything is
written; so is a file that no longer matches the run's own digests (:mod:`naspipe.rundigest`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import read_json_object
from naspipe.rundigest import verify_run
from naspipe.systems import schedule_name

NEEDED = ("system", "space", "stages", "subnets", "makespan_s", "throughput_samples_s", "bubble_ratio", "exec_s",
          "config")


@dataclass(frozen=True)
class RunInfo:
    path: Path
    metrics: dict[str, Any]

    @property
    def system(self) -> str:
        """The system, named for its schedule (``csp-mb``: micro-batched; :func:`naspipe.systems.schedule_name`)."""
        return schedule_name(str(self.metrics["system"]), self.metrics["config"])

    @property
    def space(self) -> str:
        return str(self.metrics["space"])

    @property
    def stages(self) -> int:
        return int(self.metrics["stages"])

    @property
    def replicas(self) -> int:
        """Processes per stage (a replicated layout; 1 for every run made before replicas existed)."""
        return int(self.metrics["config"].get("replicas", 1))

    @property
    def seed(self) -> int:
        return int(self.metrics["config"].get("seed", 0))

    @property
    def space_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.metrics["config"].get("space", {}).items() if k != "name"}

    @property
    def shared_policy(self) -> str:
        return str(self.metrics["config"].get("shared_policy", "frozen"))

    @property
    def device(self) -> str:
        return str(self.metrics.get("device", "?"))

    @property
    def label(self) -> str:
        layout = f"D={self.stages}" + (f"xR={self.replicas}" if self.replicas > 1 else "")
        return f"{self.space}/{self.system} {layout} seed={self.seed}"


def read_run_info(path: Path, undigested: Collection[Path] = (), simulated: bool = False) -> RunInfo:
    """The run at ``path``, verified (:func:`verify_run`; ``undigested``: runs named as made before digests).

    ``simulated``: the run must be a ``naspipe simulate`` run, checked before anything else (a trained run
    must carry digests a simulated one need not, and that error would hide the real mix-up).
    """
    if not path.is_dir():
        raise UsageError(f"run directory {path}: not found")
    file = path / "metrics.json"
    metrics = read_json_object(file, str(file))
    if simulated and metrics.get("simulated") is not True:
        raise UsageError(f"--simulated {path}: not a 'naspipe simulate' run (metrics.json lacks simulated)")
    missing = [k for k in NEEDED if k not in metrics]
    if missing:
        raise UsageError(f"{file}: missing field {missing[0]!r}")
    if not isinstance(metrics["config"], dict) or not isinstance(metrics["config"].get("space", {}), dict):
        raise UsageError(f"{file}: field 'config' must be an object with a 'space' object")
    for key in ("stages", "subnets"):
        if not isinstance(metrics[key], int) or isinstance(metrics[key], bool):
            raise UsageError(f"{file}: field {key!r} must be an integer, got {metrics[key]!r}")
    for key in ("makespan_s", "throughput_samples_s", "bubble_ratio", "exec_s"):
        if not isinstance(metrics[key], (int, float)) or isinstance(metrics[key], bool):
            raise UsageError(f"{file}: field {key!r} must be a number, got {metrics[key]!r}")
    verify_run(path, undigested)  # every file the run recorded, before any section reads one
    return RunInfo(path, metrics)
