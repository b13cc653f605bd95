"""One simulated configuration of the paper's evaluation, in process: the setup ``naspipe simulate`` builds.

The calibration, the accounting presets, the attribution and the bubble models all ask the
same question many times (this space, this system, this many stages, this batch, on this
hardware): what does the simulator measure? :func:`simulate_scenario` answers it with the
settings of the workflow's ``simulate`` key (analytic costs, partition balanced by those
costs, SGD without momentum, NASPipe with its context manager at a 3x budget), so the
numbers of those tables are comparable with the simulated Table 2. Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from naspipe import systems
from naspipe.config import config_from_dict
from naspipe.sim.hardware import Hardware


@dataclass(frozen=True)
class Scenario:
    """What varies between the simulated runs of these tables; the rest is the workflow's ``simulate`` key."""

    space: str
    system: str
    stages: int
    batch: int
    steps: int = 32
    seed: int = 0
    space_options: dict[str, Any] = field(default_factory=dict)  # e.g. {"seq_len": 8}: the artifact's sentences
    costs: str = "analytic"  # or "uniform": every task 1 (forward) / 2 (backward), free messages


def scenario_config(s: Scenario) -> dict[str, Any]:
    """The config mapping of ``s`` (as ``naspipe simulate --set ...`` would build it)."""
    data: dict[str, Any] = {"space": {"name": s.space, **s.space_options}, "system": s.system, "stages": s.stages,
                            "steps": s.steps, "seed": s.seed, "optimizer": {"name": "sgd", "momentum": 0.0},
                            "trace_max_events": 0}
    if s.system in systems.with_capability("uses_cache"):
        data["cache"] = {"enabled": True, "budget": "3x"}
    return data


def simulate_scenario(s: Scenario, hardware: Hardware) -> dict[str, Any]:
    """The simulator's metrics of ``s`` on ``hardware`` (``metrics.json``'s keys)."""
    from naspipe.sim.run import simulate_run
    from naspipe.sim.setup import build_setup

    setup = build_setup(config_from_dict(scenario_config(s)), hardware, s.costs, partition_by="costs")
    metrics, _ = simulate_run(replace(setup, batch=s.batch))
    return metrics
