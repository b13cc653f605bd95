"""``naspipe partition``: compute a balanced static partition once and write it to a file.

    naspipe partition --space S [--set space.KEY=VALUE ...] --stages D \\
        --costs params|uniform|PROFILE.csv --out F.json

The costs are those training would use (:func:`naspipe.runtime.job.position_costs`), so a
file computed here gives exactly the bounds a run would compute from the same costs; train
with ``--set partition_file=F.json`` to use it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from naspipe.config.loading import refuse_repeated_keys
from naspipe.errors import UsageError
from naspipe.fsutil import check_out_file
from naspipe.partition import balanced_partition
from naspipe.partition_file import PartitionFile, write_partition_file


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "partition",
        help="compute a balanced static partition and write it as JSON",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--space", required=True, help="space preset, e.g. toy, nlp.c1, cv.tiny")
    p.add_argument(
        "--set",
        dest="set",
        action="append",
        default=[],
        metavar="space.KEY=VALUE",
        help="space option (YAML value), repeatable",
    )
    p.add_argument("--stages", type=int, required=True, help="pipeline stages D")
    p.add_argument("--costs", default="params", help="'params', 'uniform' or a profile CSV (naspipe profile)")
    p.add_argument("--shared-policy", default="frozen", choices=("frozen", "causal"))
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    return p


def compute(
    space_name: str, options: dict[str, Any], stages: int, costs_source: str, shared_policy: str = "frozen"
) -> PartitionFile:
    from naspipe.runplan.job import position_costs
    from naspipe.space import make_shape

    try:
        space = make_shape(space_name, options, shared_policy)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    positions = space.structure.num_positions
    if not 1 <= stages <= positions:
        raise UsageError(f"--stages {stages}: space {space_name!r} has {positions} positions (need 1..{positions})")
    costs = position_costs(space, costs_source)
    partition = balanced_partition(costs, stages)
    stage_costs = tuple(sum(costs[p] for p in partition.positions(k)) for k in range(stages))
    return PartitionFile(space_name, dict(options), stages, costs_source, partition.bounds, stage_costs)


def space_options(items: list[str]) -> dict[str, Any]:
    """``["space.dim=64", "blocks=4"]`` -> ``{"dim": 64, "blocks": 4}`` (values parsed as YAML scalars)."""
    refuse_repeated_keys(items, strip="space.")  # the last value would win without a word
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().removeprefix("space.")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected space.KEY=VALUE")
        try:
            options[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            options[key] = text
    return options


def run(args: argparse.Namespace) -> int:
    check_out_file(args.out)
    data = compute(args.space, space_options(args.set), args.stages, args.costs, args.shared_policy)
    write_partition_file(args.out, data)
    for k in range(data.stages):
        lo, hi = data.bounds[k], data.bounds[k + 1]
        print(f"stage {k}: positions {lo}-{hi - 1} ({hi - lo}), cost {data.stage_costs[k]:.6g}")
    print(f"imbalance (max/mean stage cost): {data.imbalance:.4f}")
    return 0
