"""``naspipe bubble-models``: the paper's bubble column against three pipeline models at 4 and 8 stages.

Models (:mod:`naspipe.sim.bubble_models`): ``artifact-unit`` (the artifact's offline unit-time
model), ``unit-time`` (this package's CSP and GPipe policies in the torch-free driver, forward
and backward one step each, blocks split evenly), ``simulated`` (the simulator on the
calibrated testbed at Table 2's batches). Writes ``bubble_models.csv`` atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from naspipe.commands.attribute import SPACES

if TYPE_CHECKING:
    from naspipe.sim.hardware import Hardware

STAGES = (4, 8)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "bubble-models",
        description="Which pipeline model gives the paper's Table 2 bubble column: the artifact's unit-time "
        "model, unit-time CSP/GPipe, and the simulator on the calibrated testbed, at 4 and 8 stages.",
    )
    p.add_argument("--fitted", default="rtx2080ti-paper-fit", help="spec of the 'simulated' model")
    p.add_argument("--spaces", default=",".join(SPACES), help=f"comma-separated (default {','.join(SPACES)})")
    p.add_argument("--subnets", type=int, default=1000, help="subnets per unit-time model run (default 1000)")
    p.add_argument("--steps", type=int, default=64, help="subnets per simulated run (default 64)")
    p.add_argument("--out", type=Path, required=True, help="bubble_models.csv to write")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.commands.attribute import parse_spaces
    from naspipe.commands.calibrate import write_csv
    from naspipe.errors import UsageError
    from naspipe.fsutil import check_creatable
    from naspipe.sim.hardware import load_hardware

    spaces = parse_spaces(args.spaces)
    for flag, value in (("--subnets", args.subnets), ("--steps", args.steps)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be >= 1")
    fitted = load_hardware(args.fitted)
    check_creatable(args.out, "--out")
    rows = [r for space in spaces for r in space_rows(space, fitted, args.subnets, args.steps)]
    write_csv(args.out, rows)
    for r in rows:
        print(f"{r['space']} {r['model']:<14} D{r['stages']} {r['system']:<6} bubble {r['bubble']:.2f} "
              f"(paper {r['paper_bubble']})")
    return 0


def space_rows(space: str, fitted: Hardware, subnets: int, steps: int) -> list[dict[str, object]]:
    from naspipe.sim.paper import row

    rows: list[dict[str, object]] = []
    for stages in STAGES:
        measured = {("artifact-unit", "csp"): artifact_unit(space, stages, subnets)}
        for system in ("csp", "gpipe"):
            measured[("unit-time", system)] = unit_time(space, system, stages, subnets)
            measured[("simulated", system)] = simulated(space, system, stages, fitted, steps)
        for (model, system), bubble in measured.items():
            rows.append({"space": space, "model": model, "stages": stages, "system": system, "bubble": bubble,
                         "paper_bubble": row(space, system).bubble})
    return rows


def _structure(space: str) -> tuple[int, int]:
    """(choice blocks, candidates per block) of a preset space, without building it."""
    from naspipe.config import config_from_dict
    from naspipe.runplan.job import build_shape

    structure = build_shape(config_from_dict({"space": {"name": space}, "steps": 1})).structure
    return len(structure.blocks), structure.choices_per_block[0]


def artifact_unit(space: str, stages: int, subnets: int) -> float:
    from naspipe.sim.bubble_models import artifact_unit_bubble
    from naspipe.subnet import SubnetStream

    blocks, candidates = _structure(space)
    stream = SubnetStream([candidates] * blocks, 0)
    return artifact_unit_bubble([stream[y].choices for y in range(subnets)], stages)


def unit_time(space: str, system: str, stages: int, subnets: int) -> float:
    from naspipe.config import config_from_dict
    from naspipe.runplan.job import build_plan, build_shape, policy_options
    from naspipe.scheduling import Kind
    from naspipe.scheduling.driver import drive

    config = config_from_dict({"space": {"name": space}, "system": system, "stages": stages, "steps": subnets,
                               "partition_costs": "uniform"})
    plan = build_plan(config, build_shape(config))
    durations = {Kind.FORWARD: 1.0, Kind.BACKWARD: 1.0, Kind.UPDATE: 0.0}
    return drive(plan, system, subnets, policy_options(config), lambda task: durations[task.kind]).bubble_ratio()


def simulated(space: str, system: str, stages: int, fitted: Hardware, steps: int) -> float:
    from naspipe.sim.paper import row
    from naspipe.sim.scenario import Scenario, simulate_scenario

    s = Scenario(space, system, stages, row(space, system).batch, steps=steps)
    return float(simulate_scenario(s, fitted)["bubble_ratio"])
