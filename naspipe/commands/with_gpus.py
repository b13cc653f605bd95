"""``naspipe with-gpus N -- CMD ...``: claim N free GPUs, then ``exec`` the command on them.

Why lock files and how they are freed is :mod:`naspipe.gpus`; this module parses the flags,
exports ``CUDA_VISIBLE_DEVICES`` and replaces itself with the command, which inherits the
locks. ``python -m naspipe.commands.with_gpus N -- CMD`` is the same command started without
the top-level CLI.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from naspipe.errors import UsageError
from naspipe.gpus import LOCK_DIR_ENV, claim, default_lock_dir, visible_devices

DESCRIPTION = "Claim free GPUs with lock files: ``naspipe with-gpus N -- CMD ...``."


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "with-gpus",
        usage="naspipe with-gpus [options] N -- CMD ...",
        help="claim N free GPUs (lock files), set CUDA_VISIBLE_DEVICES, run a command",
        description=DESCRIPTION,
    )
    p.add_argument("count", type=int, metavar="N", help="GPUs to claim (0: run with no GPU visible)")
    p.add_argument("--devices", help="comma-separated device ids to choose from (default: CUDA_VISIBLE_DEVICES or all)")
    p.add_argument(
        "--lock-dir", type=Path, help=f"lock file directory (default: ${LOCK_DIR_ENV} or a per-user tmp dir, "
        "which must be owned by you; a directory you name may be shared on purpose and is not checked)"
    )
    p.add_argument("--timeout", type=float, help="seconds to wait for free devices (default: forever)")
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run (options go before N)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Claim, export ``CUDA_VISIBLE_DEVICES``, and ``exec`` the command (which inherits the locks)."""
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("with-gpus: no command given (usage: naspipe with-gpus N -- CMD ...)")
    if args.count < 0:
        raise UsageError(f"with-gpus: N must be >= 0, got {args.count}")
    devices = args.devices.split(",") if args.devices else visible_devices()
    env = dict(os.environ)
    if args.count == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif not devices:
        print(f"naspipe with-gpus: no CUDA device here; running on CPU without claiming {args.count}", file=sys.stderr)
    else:
        held = claim(args.count, devices, args.lock_dir or default_lock_dir(), args.timeout)
        for fd in held.values():
            os.set_inheritable(fd, True)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(held)
        print(f"naspipe with-gpus: claimed {env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr, flush=True)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        raise UsageError(f"with-gpus: cannot run {cmd[0]!r}: {exc.strerror}") from None
    return 127  # not reached: exec replaces this process


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m naspipe.commands.with_gpus``), cheaper to start than the full CLI."""
    from naspipe.cli import OneLineParser, print_error

    parser: argparse.ArgumentParser = OneLineParser(prog="naspipe")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["with-gpus", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except UsageError as exc:
        print_error(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
