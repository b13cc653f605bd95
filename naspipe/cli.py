"""naspipe: reproducible pipelined supernet training; each sub-command is imported only when used.

Exit status: 0 success; 1 a run failed or compared runs differ; 2 bad input (one line on
stderr naming the problem, nothing written).

Why a table: importing every command to build one parser made ``naspipe compare`` load
torch, and a command whose module failed to import vanished as "invalid choice". Here
``naspipe --help`` lists the names and one-line helps from :data:`COMMANDS` without importing
anything; ``naspipe NAME ...`` imports NAME's module only (a missing or broken module raises
its real error) and lets it add its own sub-parser.

Every command lives in :mod:`naspipe.commands` (one module per command, named after it) and
adding one is one line in :data:`COMMANDS`::

    "partition": Command("naspipe.commands.partition", "split a space's positions over D stages"),

The module provides ``add_parser(sub) -> argparse.ArgumentParser`` (it calls
``sub.add_parser(NAME, ...)`` and adds its arguments) and ``run(args) -> int`` (the exit
status), and nothing else by those names: the command module parses, calls its package's
library code and returns a status.
Bad input is reported by raising :class:`naspipe.errors.UsageError`: :func:`main` is the
one place that turns it into ``naspipe: error: ...`` and exit status 2. Argument errors found
by argparse itself (``--steps ten``, an invalid choice) get the same one line, without the
usage text: every sub-parser is a :class:`OneLineParser`, because ``add_subparsers`` builds
sub-parsers of its parent's class. A closed pipe (``naspipe compare a b | head -1``), Ctrl-C
and a full disk end the command with one line (or none for the pipe) instead of a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple, NoReturn, cast

from naspipe.errors import UsageError


class Command(NamedTuple):
    """Where a sub-command lives (its module, with ``add_parser`` and ``run``) and its one-line help."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "train": Command("naspipe.commands.train", "train a supernet with one of the pipeline systems"),
    "compare": Command(
        "naspipe.commands.compare", "check runs are bitwise identical (exit 0) or report where they diverge (exit 1)"
    ),
    "prepare": Command("naspipe.commands.prepare", "prepare datasets (tokenize, binarize, shard)"),
    "profile": Command("naspipe.commands.profile", "measure per-operation compute and copy time of a search space"),
    "access-order": Command("naspipe.commands.access_order", "print one layer's access order per run (paper Table 4)"),
    "partition": Command("naspipe.commands.partition", "write a balanced static partition of a space over D stages"),
    "reproducibility": Command("naspipe.commands.reproducibility",
                               "write per-run verdicts against the sequential reference as JSON (exit 0)"),
    "report": Command("naspipe.commands.report", "regenerate the paper's tables, figures and report.md from runs"),
    "evaluate": Command("naspipe.commands.evaluate",
                        "score subnets with a trained supernet's weights on held-out data"),
    "search": Command("naspipe.commands.search", "evolutionary or random search over a trained supernet"),
    "simulate": Command("naspipe.commands.simulate",
                        "simulate a run on a hardware spec (the same policies in simulated time)"),
    "calibrate": Command("naspipe.commands.calibrate", "fit a testbed spec to the paper's Exec column"),
    "attribute": Command("naspipe.commands.attribute", "attribute the paper's speedup to the artifact's factors"),
    "bubble-models": Command("naspipe.commands.bubble_models", "the paper's bubble column against pipeline models"),
    "claims": Command("naspipe.commands.claims", "check the paper's claims against a results tree's tables"),
    "with-gpus": Command("naspipe.commands.with_gpus", "claim N free GPUs (lock files), then run a command on them"),
    "plan": Command("naspipe.commands.plan", "a workflow config's cost: jobs, GPU-hours, memory per job, disk"),
    "fetch": Command("naspipe.commands.fetch", "download a dataset by URL and SHA-256, verify it, unpack it safely"),
    "published": Command("naspipe.commands.published", "check a results tree against the published digests"),
    "memo": Command("naspipe.commands.memo", "run a command once per key of the content it reads; later jobs copy it"),
}


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line, ``naspipe: error: ...``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"naspipe: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s module is imported to build its sub-parser.

    The other commands get a bare placeholder that carries their help line, enough for the
    top-level ``--help`` and the "invalid choice" message.
    """
    doc = __doc__ or "naspipe"
    parser = OneLineParser(prog="naspipe", description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, entry in COMMANDS.items():
        if name == command:
            add = importlib.import_module(entry.module).add_parser
            add(sub)
        else:
            sub.add_parser(name, help=entry.help)
    return parser


def _runner(command: str) -> Callable[[argparse.Namespace], int]:
    entry = COMMANDS[command]
    return cast(Callable[[argparse.Namespace], int], importlib.import_module(entry.module).run)


# optional dependencies (pyproject.toml extras) -> the extra that installs them; the core imports none
EXTRAS = {"pandas": "report", "seaborn": "report", "matplotlib": "report", "snakemake": "workflow"}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = args_list[0] if args_list and args_list[0] in COMMANDS else None
    try:  # building the parser imports the command's module (torch for some): Ctrl-C there is one line too
        args = build_parser(command).parse_args(args_list)
    except KeyboardInterrupt:
        return interrupted()
    try:
        return _runner(args.command)(args)
    except UsageError as exc:
        print(f"naspipe: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"naspipe: error: {args.command} needs {exc.name}: pip install 'naspipe[{extra}]'", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        return interrupted()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a path the user gave (or one made from it): bad input
            print(f"naspipe: error: {_too_long(exc)}", file=sys.stderr)
            return 2
        if exc.errno != errno.ENOSPC:
            raise
        from naspipe.fsutil import no_space

        print(f"naspipe: error: {no_space(exc.filename)}", file=sys.stderr)
        return 1


def interrupted() -> int:
    """Ctrl-C: one line and exit status 130, whatever the command was doing (importing, parsing, running)."""
    from naspipe.runtime.lifecycle import ignore_further_signals

    ignore_further_signals()  # exiting: a second signal must not change the status
    print("naspipe: error: interrupted by SIGINT", file=sys.stderr)
    return 128 + signal.SIGINT


def _too_long(exc: OSError) -> str:
    """ENAMETOOLONG in one line: the path and its longest component (a file system allows 255 bytes in most)."""
    path = os.fsdecode(exc.filename or "")
    longest = max(path.split(os.sep), key=len) if path else ""
    shown = longest if len(longest) <= 40 else f"{longest[:20]}...{longest[-12:]}"
    return (f"path too long for the file system ({exc.strerror}): a component of {len(longest.encode())} bytes "
            f"({shown!r}) in a path of {len(path.encode())}")


def _closed_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, like a Unix tool killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
    except (OSError, ValueError):
        pass
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
