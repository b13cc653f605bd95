"""naspipe: reproducible pipelined supernet training; each sub-command is imported only when used.

Exit status: 0 success; 1 a run failed, compared runs differ, or the output could not be
written to stdout; 2 bad input (one line on stderr naming the problem, nothing written).

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
and a full disk end the command with one line (or none for the pipe) instead of a traceback. So
does a stdout that cannot be written (``> /dev/full``): while a command runs, its writes to stdout
go through :class:`_GuardedStdout`, so that failure is told apart from a full disk under the
command's own files (exit 1, "its output was lost", never "resume an interrupted run"). Every
error line is printed by :func:`print_error`, which escapes control characters: a newline in a
path the user gave cannot split the one line in two.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, NoReturn, TextIO, cast

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
        self.exit(2, f"naspipe: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """``text`` with every control or other unprintable character escaped (``\\n``, ``\\x1b``, ``\\u2028``).

    Why: an error line names what the user gave (a path, a value), and a newline or a terminal escape in
    it would split the one line or rewrite the terminal; escaped, the line stays one and still names it.
    """
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def print_error(message: str) -> None:
    """The one ``naspipe: error: ...`` line on stderr (control characters escaped: :func:`one_line`)."""
    print(f"naspipe: error: {one_line(message)}", file=sys.stderr)


class StdoutLost(Exception):
    """Writing the command's output to stdout failed (a full disk behind ``>``, an I/O error): what the command
    printed is lost, whatever it did before. Not an OSError, so that no handler of the command's own file
    writes takes it for a failure of its file, and the CLI says what was lost instead of "free some space"."""

    def __init__(self, cause: OSError, message: str = "") -> None:
        self.cause = cause
        self.reason = cause.strerror or str(cause)
        super().__init__(message or f"cannot write to standard output ({self.reason}); the command's output "
                         "was lost")


class _GuardedStdout:
    """``sys.stdout`` while a command runs: a failed write or flush raises :class:`StdoutLost`.

    A closed pipe stays a BrokenPipeError (the reader went away: :func:`_closed_pipe`); everything but
    ``write``, ``writelines`` and ``flush`` is the real stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        with _lost_on_error():
            try:
                return self.stream.write(text)
            except UnicodeEncodeError:  # nothing was written: the stream encodes the whole text first
                return self.stream.write(_encodable(text, self.stream.encoding))

    def writelines(self, lines: Any) -> None:
        with _lost_on_error():
            self.stream.writelines(lines)

    def flush(self) -> None:
        with _lost_on_error():
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _encodable(text: str, encoding: str | None) -> str:
    """``text`` with what ``encoding`` cannot encode escaped (``\\udcff``).

    Why: output names paths the user gave, and a path may hold a byte that is not UTF-8 (Python reads it as a
    lone surrogate) or a character the terminal's encoding lacks; a strict stdout (a UTF-8 locale such as
    en_US.UTF-8) raised UnicodeEncodeError after the command had done its work. Shown escaped, as :func:`one_line`
    shows it on stderr."""
    codec = encoding or "utf-8"
    return text.encode(codec, "backslashreplace").decode(codec)


@contextmanager
def _lost_on_error() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutLost(exc) from exc


@contextmanager
def _stdout_guarded() -> Iterator[None]:
    """Run a command with :class:`_GuardedStdout` as ``sys.stdout`` (the real stream back afterwards)."""
    real = sys.stdout
    guard = _GuardedStdout(real)
    sys.stdout = cast(TextIO, guard)
    try:
        yield
    finally:
        if sys.stdout is cast(TextIO, guard):
            sys.stdout = real


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
        with _stdout_guarded():
            status = _runner(args.command)(args)
            sys.stdout.flush()  # here, so that a full stdout is reported as such, not by the interpreter's exit
        return status
    except UsageError as exc:
        print_error(str(exc))
        return 2
    except StdoutLost as exc:
        _discard_stdout()
        print_error(str(exc))
        return 1
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print_error(f"{args.command} needs {exc.name}: pip install 'naspipe[{extra}]'")
        return 2
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        return interrupted()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a path the user gave (or one made from it): bad input
            print_error(_too_long(exc))
            return 2
        if exc.errno != errno.ENOSPC:
            raise
        from naspipe.fsutil import no_space

        print_error(no_space(exc.filename))
        return 1


def interrupted() -> int:
    """Ctrl-C: one line and exit status 130, whatever the command was doing (importing, parsing, running)."""
    from naspipe.runtime.lifecycle import ignore_further_signals

    ignore_further_signals()  # exiting: a second signal must not change the status
    print_error("interrupted by SIGINT")
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
    _discard_stdout()
    return 128 + signal.SIGPIPE


def _discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null: what is still buffered is lost anyway, and the interpreter's
    final flush must not fail again (a second report, "Exception ignored ...", and exit status 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
