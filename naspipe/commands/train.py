"""``naspipe train``: build the config from file, ``--set`` and flags, then launch the stages."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from naspipe.config import add_run_arguments, config_from_args, describe_keys


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:

    p: argparse.ArgumentParser = sub.add_parser(
        "train",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train a supernet over D pipeline stages (one process per stage; gloo on CPU, nccl on CUDA).\n"
        "Under torchrun or srun each process is one stage and --stages must equal the world size.",
        epilog="config keys (YAML file via --config, or --set key=value):\n" + describe_keys(),
    )
    add_run_arguments(p, "subnets to train")
    p.add_argument("--subnet", type=Path, metavar="FILE",
                   help="retrain one fixed architecture every step: a subnet file such as a search's best.json "
                   "(sets config key subnet)")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint every K subnets (sets checkpoint_every)")
    p.add_argument("--resume", type=Path,
                   help="resume from a checkpoint dir or the newest checkpoint of a run dir (DIR or an interrupted "
                   "DIR.partial); --resume DIR --out DIR extends a finished run")
    p.add_argument("--out", type=Path, required=True,
                   help="output directory DIR: the run works in DIR.partial and renames it to DIR when complete; "
                   "resume an interrupted run with --resume DIR.partial --out DIR")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty DIR when this run completes (and discard a stale DIR.partial now)")
    return p


def _subnet_choices(path: Path | None) -> list[int] | None:
    """The choices of the one subnet in ``path`` (checked against the space when the job is built)."""
    if path is None:
        return None
    from naspipe.errors import UsageError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise UsageError(f"--subnet {path}: unreadable (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--subnet {path}: unreadable ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("choices"), list):
        return list(data["choices"])
    if isinstance(data, dict) and isinstance(data.get("subnets"), list):
        data = data["subnets"]
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], list):
        return list(data[0])
    raise UsageError(f"--subnet {path}: expected one subnet, e.g. {{\"choices\": [0, 2, 1]}} (a search's best.json)")


def run(args: argparse.Namespace) -> int:
    from naspipe import numerics
    from naspipe.runplan.rundir import RunDirGone

    if not args.out.name:  # '' and '.' (argparse makes both Path('.')): no directory to publish or lock
        from naspipe.errors import UsageError

        raise UsageError(f"--out {str(args.out)!r}: name a run directory (a run works in DIR.partial, publishes DIR)")
    config = config_from_args(args, checkpoint_every=args.checkpoint_every, subnet=_subnet_choices(args.subnet))
    numerics.apply(config.numerics)  # before torch loads (with the launcher): it picks its kernels once

    from naspipe.cli import print_error
    from naspipe.runtime.launch import StageFailed, train
    from naspipe.runtime.lifecycle import Interrupted, ignore_further_signals

    try:
        metrics = train(config, args.out, args.resume, overwrite=args.overwrite)
    except (StageFailed, RunDirGone) as exc:
        print_error(str(exc))
        return 1
    except Interrupted as exc:
        ignore_further_signals()  # a SIGTERM after the Ctrl-C must not turn this exit into 143
        print_error(f"{exc}; the stages were stopped and nothing was published "
                    "(a complete checkpoint, if any, can be resumed with --resume)")
        return exc.exit_code
    if metrics is not None:
        _print_summary(metrics, args.out)
    return 0


def _print_summary(metrics: dict[str, Any], out: Path) -> None:
    """The run's one-line summary on stdout, flushed now.

    The run is published before it is printed: a stdout that cannot take the line (a full disk behind
    ``>``) loses the line, not the run, and the error must say so, not call the run interrupted (exit
    status 1 all the same: output was lost). The same figures are in ``DIR/metrics.json``.
    """
    from naspipe.cli import StdoutLost

    keys = ("system", "stages", "subnets", "throughput_samples_s", "bubble_ratio", "wall_s")
    try:
        print(json.dumps({k: metrics[k] for k in keys}))
        sys.stdout.flush()
    except StdoutLost as exc:
        raise StdoutLost(exc.cause, f"the run is complete and published in {out}, but its summary could not be "
                         f"written to standard output ({exc.reason}); the summary is in "
                         f"{out / 'metrics.json'}") from None
