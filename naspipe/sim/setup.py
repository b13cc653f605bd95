"""A simulated run's setup from a config: the run plan's job, the layers sized, the costs priced.

The run is built exactly as ``naspipe train`` builds it (:func:`naspipe.runplan.job.build_job`:
space, partition, subnet stream, policy options), so the simulated stages run the very
policies and the very partition the runtime would. The space is built as its shape
(:func:`naspipe.runplan.job.build_shape`: options, structure, analytic layer sizes), so
nothing here imports torch and paper-size spaces simulate on a laptop;
:mod:`naspipe.sim.layers` turns the sizes into plain numbers for the rest of the simulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from naspipe.config import Config
from naspipe.errors import UsageError
from naspipe.runplan.job import build_plan, build_shape, policy_options
from naspipe.runplan.rules import effective_recompute
from naspipe.sim.costs import CostModel, analytic_costs, profile_costs, uniform_costs
from naspipe.sim.hardware import Hardware
from naspipe.sim.layers import layer_infos
from naspipe.sim.planning import layer_seconds
from naspipe.sim.run import SimSetup
from naspipe.space.shape import SpaceShape

TRACE_EVENTS = 100_000  # the default trace's size in events, about (4-6 per subnet and stage)


def build_setup(config: Config, hardware: Hardware, costs_spec: str, partition_by: str = "config") -> SimSetup:
    """The simulated run of ``config`` on ``hardware``; ``partition_by``: 'config' partitions as ``train`` would,
    'costs' by the simulated layers' compute (a ``partition_file`` still wins). Partitions once."""
    space = build_shape(config)
    hardware = hardware.at_precision(config.precision)
    infos = layer_infos(space, config.precision)
    batch = int(space.options.get("batch_size", 1))
    costs = make_costs(costs_spec, space, infos, hardware, batch, config.optimizer.state_slots)
    seconds = None
    if partition_by == "costs":
        seconds = layer_seconds(costs, effective_recompute(config.system, config.recompute))
    plan = build_plan(config, space, seconds)
    trace_cap = min(config.trace_max_events, 200_000)
    return SimSetup(plan, config.system, config.steps, policy_options(config), costs, config.recompute, trace_cap,
                    cache=config.cache, trace_subnets=default_trace_subnets(plan.num_stages, config.micro_batches))


def default_trace_subnets(stages: int, parts: int = 1) -> int:
    """The trace's default window: the first and last this many subnets, about :data:`TRACE_EVENTS`
    events in all at any run length (a 64 x 100,000 run traced whole is ~30 M events, ~4 GB); a
    subnet's batch in ``parts`` parts has about ``parts`` times the spans."""
    return max(1, TRACE_EVENTS // (10 * stages * parts))


def make_costs(spec: str, space: SpaceShape, infos: list[Any], hardware: Hardware, batch: int,
               states: int) -> CostModel:
    """The cost model ``spec`` names ('uniform', 'analytic' or a profile CSV, which must have been measured on
    ``space``); ``states``: optimizer tensors per parameter (:attr:`naspipe.config.OptimizerConfig.state_slots`)."""
    if spec == "uniform":
        return uniform_costs(infos, hardware, batch, states)
    if spec == "analytic":
        return analytic_costs(infos, hardware, batch, states)
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--costs {spec!r}: neither 'analytic', 'uniform' nor a profile CSV file")
    from naspipe.profile.costs import check_profile_fits
    from naspipe.profile.rows import read_profile_csv

    rows = read_profile_csv(path)
    check_profile_fits(space, rows, str(path))
    return profile_costs(space.structure, rows, infos, hardware, batch, states, str(path))
