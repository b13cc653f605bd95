"""The ``naspipe`` command: train, compare, and the data/profile helpers.

Exit status: 0 success; 1 a run failed or compared runs differ; 2 bad input (one line on
stderr naming the problem, nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from naspipe.config import describe_keys, load_config
from naspipe.errors import UsageError


def _train_parser(sub: argparse._SubParsersAction) -> None:
    from naspipe.scheduling import POLICY_NAMES

    p = sub.add_parser(
        "train",
        help="train a supernet with one of the pipeline systems",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train a supernet over D pipeline stages (one process per stage; gloo on CPU, nccl on CUDA).\n"
        "Under torchrun or srun each process is one stage and --stages must equal the world size.",
        epilog="config keys (YAML file via --config, or --set key=value):\n" + describe_keys(),
    )
    p.add_argument("--config", type=Path, help="YAML config file (keys below)")
    p.add_argument("--space", help="search space preset (e.g. toy, nlp.tiny, cv.tiny, nlp.c1); sets space.name")
    p.add_argument("--system", help=f"scheduling policy: {', '.join(POLICY_NAMES)}")
    p.add_argument("--stages", type=int, help="pipeline stages D")
    p.add_argument("--steps", type=int, help="subnets to train")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable), e.g. --set optimizer.name=adam")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint every K subnets (sets checkpoint_every)")
    p.add_argument("--resume", type=Path, help="resume from a checkpoint dir or a run dir's newest checkpoint")
    p.add_argument("--out", type=Path, required=True, help="output directory")


def _compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="check runs are bitwise identical (exit 0) or report where they diverge (exit 1)")
    p.add_argument("runs", nargs="+", type=Path, help="run directories (the first is the reference)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="naspipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    _compare_parser(sub)
    for module, adder in (("naspipe.data.cli", "add_prepare_parser"), ("naspipe.profile", "add_profile_parser"),
                          ("naspipe.report.access_order", "add_access_order_parser"),
                          ("naspipe.partition_cli", "add_parser"), ("naspipe.report.reproducibility", "add_parser"),
                          ("naspipe.report.cli", "add_parser"), ("naspipe.gpus", "add_parser")):
        try:
            getattr(__import__(module, fromlist=[adder]), adder)(sub)
        except ModuleNotFoundError:
            pass
    return parser


def _train(args: argparse.Namespace) -> int:
    from naspipe.runtime.launch import StageFailed, train

    flags = {"space.name": args.space, "system": args.system, "stages": args.stages, "steps": args.steps,
             "seed": args.seed, "checkpoint_every": args.checkpoint_every}
    config = load_config(args.config, args.overrides, flags)
    try:
        metrics = train(config, args.out, args.resume)
    except StageFailed as exc:
        print(f"naspipe: error: {exc}", file=sys.stderr)
        return 1
    if metrics is not None:
        keys = ("system", "stages", "subnets", "throughput_samples_s", "bubble_ratio", "wall_s")
        print(json.dumps({k: metrics[k] for k in keys}))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from naspipe.compare import compare_runs

    same, text = compare_runs(args.runs)
    print(text)
    return 0 if same else 1


# commands whose parser and runner live in their own module (add_parser / run)
_MODULE_COMMANDS = {"partition": "naspipe.partition_cli", "reproducibility": "naspipe.report.reproducibility",
                    "report": "naspipe.report.cli", "with-gpus": "naspipe.gpus"}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "prepare":
            from naspipe.data.cli import run_prepare

            return run_prepare(args)
        if args.command == "profile":
            from naspipe.profile import run_profile

            return run_profile(args)
        if args.command == "access-order":
            from naspipe.report.access_order import run_access_order

            return run_access_order(args)
        if args.command in _MODULE_COMMANDS:
            return __import__(_MODULE_COMMANDS[args.command], fromlist=["run"]).run(args)
    except UsageError as exc:
        print(f"naspipe: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # data/profile input errors are ValueErrors naming the problem
        if type(exc).__module__.startswith("naspipe"):
            print(f"naspipe: error: {exc}", file=sys.stderr)
            return 2
        raise
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
