"""``naspipe evaluate``: score subnets with a trained supernet's weights on held-out data (a CSV).

With ``--every-checkpoint`` every complete checkpoint of the run is scored on the same
subnets, and each row carries the run (space, system, stages, seed), the checkpoint's step
and its wall time since the run started: score against training time, Figure 4's curves.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from naspipe.errors import UsageError
from naspipe.search.options import add_eval_options, check_eval_options, check_out_file, csv_text, eval_device

if TYPE_CHECKING:
    from naspipe.search.supernet import TrainedSupernet
    from naspipe.subnet import Subnet


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "evaluate", help="score subnets with a trained supernet's weights on held-out data",
        description="Score subnets with the weights of a run's checkpoint: NLP BLEU (sacrebleu, detokenised beam "
        "decodes), loss and token accuracy; CV top-1/top-5 and loss after per-subnet batch-norm recalibration on "
        "training batches. Bitwise deterministic.")
    add_eval_options(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--subnets", type=Path, metavar="FILE",
                       help='subnet file: {"choices": [...]}, {"subnets": [[...], ...]} or a list of lists')
    which.add_argument("--sample", type=int, metavar="K", help="K distinct uniformly drawn subnets (see --seed)")
    which.add_argument("--own-subnet", nargs="*", type=Path, metavar="RUN",
                       help="score --run and each further RUN (retrains: 'naspipe train --subnet') on the one subnet "
                       "each was trained with, one row per run, in one process (no per-run start-up)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    p.add_argument("--every-checkpoint", action="store_true",
                   help="score every complete checkpoint of --run (columns step and wall_s)")
    p.add_argument("--out", type=Path, required=True, help="CSV file to write")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.fsutil import atomic_write_text
    from naspipe.search.supernet import open_supernet

    check_eval_options(args)
    check_out_file(args.out)
    if args.sample is not None and args.sample < 1:
        raise UsageError(f"--sample {args.sample} must be >= 1")
    supernet = open_supernet(args.run)  # every input is checked before any scoring or writing
    if args.own_subnet is not None:
        header, rows = _score_own(args, [supernet, *(open_supernet(r) for r in args.own_subnet)])
    else:
        header, rows = _score(args, _targets(args, supernet), _subnets(args, supernet))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, csv_text(header, rows))
    return 0


def _subnets(args: argparse.Namespace, supernet: TrainedSupernet) -> list[Subnet]:
    from naspipe.runplan.subnet_file import read_subnets
    from naspipe.search.options import sample_subnets

    choices = supernet.space.structure.choices_per_block
    if args.subnets is not None:
        return read_subnets(args.subnets, choices)
    size = math.prod(choices)
    if args.sample > size:  # an error, not a silent clamp: the CSV would hold fewer rows than asked for
        raise UsageError(f"--sample {args.sample}: the space of --run {args.run} has only {size} distinct subnets "
                         f"(choices per block {'x'.join(map(str, choices))}); ask for at most {size}")
    return sample_subnets(choices, args.sample, args.seed)


def _targets(args: argparse.Namespace, supernet: TrainedSupernet) -> list[TrainedSupernet]:
    """The checkpoints to score: the newest one, or with --every-checkpoint all of them, oldest first."""
    from naspipe.search.supernet import checkpoints_of, open_supernet

    if not args.every_checkpoint:
        return [supernet]
    found = checkpoints_of(args.run)
    if not found:
        raise UsageError(f"--every-checkpoint: --run {args.run} is a checkpoint, not a run directory")
    return [open_supernet(c) for c in found]


def _score(args: argparse.Namespace, targets: list[TrainedSupernet],
           subnets: list[Subnet]) -> tuple[list[str], list[list[object]]]:
    from naspipe.search.evaluate import EvalSettings, Evaluator, metric_names

    device = eval_device(args.device, args.threads)
    settings = EvalSettings(args.split, args.batches, args.beam, args.calib_batches)
    metrics = metric_names(targets[0].space)
    start = _start_time(args.run, targets) if args.every_checkpoint else None
    rows: list[list[object]] = []
    for target in targets:
        evaluator = Evaluator(target, settings, device)
        for index, subnet in enumerate(subnets):
            scores = evaluator.score(subnet)
            rows.append([*_where(target, start, args.every_checkpoint), index, str(subnet),
                         *(scores[m] for m in metrics)])
    where = ["space", "system", "stages", "seed", "step", "wall_s"] if args.every_checkpoint else ["step"]
    return [*where, "subnet", "choices", *metrics], rows


def _score_own(args: argparse.Namespace, targets: list[TrainedSupernet]) -> tuple[list[str], list[list[object]]]:
    """Each retrained run scored on the subnet it was trained with (its config key ``subnet``)."""
    from naspipe.search.evaluate import EvalSettings, Evaluator, metric_names
    from naspipe.subnet import Subnet

    device = eval_device(args.device, args.threads)
    settings = EvalSettings(args.split, args.batches, args.beam, args.calib_batches)
    metrics = metric_names(targets[0].space)
    rows: list[list[object]] = []
    for index, target in enumerate(targets):
        if not target.config.subnet:
            raise UsageError(f"--own-subnet: {target.checkpoint} trained no fixed subnet (config key subnet is empty)")
        if metric_names(target.space) != metrics:
            raise UsageError(f"--own-subnet: run {target.checkpoint} is scored by other metrics than {args.run}")
        subnet = Subnet(tuple(target.config.subnet))
        scores = Evaluator(target, settings, device).score(subnet)
        rows.append([target.config.space_name, target.step, index, str(subnet), *(scores[m] for m in metrics)])
    return ["space", "step", "subnet", "choices", *metrics], rows


def _where(target: TrainedSupernet, start: float | None, over_time: bool) -> list[object]:
    """The row's checkpoint: its step, and over training time also the run it belongs to and its wall time.

    The wall time is the training time the checkpoint recorded (a resumed run's pause excluded);
    checkpoints written before it was recorded fall back to the write time less the run's start.
    """
    if not over_time:
        return [target.step]
    wall: object = target.wall_s
    if wall is None:
        wall = "" if start is None or target.written_at is None else target.written_at - start
    from naspipe.systems import schedule_name  # the run's name in the report (csp-mb, not its csp)

    c = target.config
    return [c.space_name, schedule_name(c.system, c.to_dict()), c.stages, c.seed, target.step, wall]


def _start_time(run: Path, targets: list[TrainedSupernet]) -> float | None:
    """When the run started (Unix time): the final checkpoint's write time less the run's wall time
    (only for checkpoints without a recorded training time; wrong across a resume's pause)."""
    from naspipe.search.supernet import run_wall_s

    wall, last = run_wall_s(run), targets[-1].written_at
    return None if wall is None or last is None else last - wall
