"""``naspipe profile``: measure a space's distinct layers, write the CSV and the Table 5 markdown.

The output locations are checked before anything is measured (profiling a paper-size space
takes minutes), and a write that fails anyway is reported with the path the user gave,
not the temporary file beside it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.config import parse_override
from naspipe.config.loading import refuse_repeated_keys
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text, check_creatable


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add the ``profile`` sub-command (run by :func:`run`)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "profile",
        help="measure per-operation compute and copy time of a search space",
        description="Profile each distinct (operation, input shape) of a search space once and write a CSV.",
    )
    parser.add_argument("--space", required=True, help="space preset, e.g. nlp.c1, cv.tiny")
    parser.add_argument(
        "--set", dest="set", action="append", default=[], metavar="KEY=VALUE", help="space option (YAML value)"
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--shared-policy", default="frozen", choices=("frozen", "causal"))
    parser.add_argument(
        "--recompute", action=argparse.BooleanOptionalAction, default=True, help="time tasks as with recomputation"
    )
    parser.add_argument("--out", required=True, help="CSV file to write")
    parser.add_argument("--table", default=None, help="also write the markdown table (Table 5) here")
    parser.add_argument("--quiet", action="store_true")
    return parser


def space_options(items: list[str]) -> dict[str, object]:
    """``--set`` items as space options; ``space.dim=64`` and ``dim=64`` mean the same."""
    refuse_repeated_keys(items, strip="space.")  # the last value would win without a word
    pairs = (parse_override(item) for item in items)
    return {key.removeprefix("space."): value for key, value in pairs}


def check_writable(path: Path, flag: str) -> None:
    """UsageError naming ``flag`` and ``path`` unless a file can be created at ``path``."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    check_creatable(path, flag)


def _write(path: Path, text: str, flag: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


def run(args: argparse.Namespace) -> int:
    import torch

    from naspipe.determinism import make_deterministic
    from naspipe.profile.measure import profile_space
    from naspipe.profile.rows import format_profile_csv
    from naspipe.profile.table import render_table5
    from naspipe.space import make_space

    space = make_space(args.space, space_options(args.set), args.shared_policy)
    out, table_path = Path(args.out), (Path(args.table) if args.table else None)
    check_writable(out, "--out")
    if table_path is not None:
        check_writable(table_path, "--table")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    # time exactly the kernels a training run executes
    make_deterministic(args.threads or torch.get_num_threads(), torch.device(args.device))
    report = None if args.quiet else (lambda text: print(f"profile {args.space}: {text}", flush=True))
    rows = profile_space(space, device=args.device, repeats=args.repeats, warmup=args.warmup, seed=args.seed,
                         recompute=args.recompute, progress=report)
    _write(out, format_profile_csv(rows), "--out")
    table = render_table5(rows)
    if table_path is not None:
        _write(table_path, table, "--table")
    if not args.quiet:
        print(table, end="")
    return 0
