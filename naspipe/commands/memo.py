"""``naspipe memo``: run a command once per key of the content it reads; later jobs copy its output.

The workflow wraps the search phase's retrain and scoring jobs in it (naspipe.plan.memo says why):
``naspipe memo --store DIR --key-file F --key-json F:FIELD --key NAME=TEXT --out OUT -- CMD ...``.
The key is built from the files' bytes, the named JSON fields and the texts, never from paths,
so jobs that differ only in where their inputs and outputs live share one computation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "memo", help="run a command once per key of the content it reads; later jobs copy its output",
        description="Key = SHA-256 of the --key texts, the --key-file bytes and the --key-json fields. Under the "
        "key's lock: a stored result is copied to --out; otherwise the command runs and, on exit 0, a copy of "
        "--out is stored. Exit status: the command's (0 on a copy).")
    p.add_argument("--store", type=Path, required=True, help="directory of stored results (created)")
    p.add_argument("--key", action="append", default=[], metavar="NAME=TEXT", help="a text the result depends on")
    p.add_argument("--key-file", action="append", default=[], type=Path, metavar="FILE",
                   help="a file whose bytes the result depends on")
    p.add_argument("--key-json", action="append", default=[], metavar="FILE:FIELD[,FIELD]",
                   help="fields of a JSON object the result depends on (the rest of the file does not count)")
    p.add_argument("--out", type=Path, required=True, help="the file or directory the command writes")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run")
    return p


def key_parts(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the key is made of, read and checked before anything runs."""
    parts: dict[str, Any] = {"texts": sorted(args.key)}
    for text in args.key:
        if "=" not in text:
            raise UsageError(f"--key {text!r}: expected NAME=TEXT")
    parts["files"] = [_digest(path) for path in args.key_file]
    parts["json"] = [_fields(spec) for spec in args.key_json]
    return parts


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise UsageError(f"--key-file {path}: cannot read ({exc.strerror})") from exc


def _fields(spec: str) -> dict[str, Any]:
    name, sep, fields = spec.rpartition(":")
    if not sep or not name or not fields:
        raise UsageError(f"--key-json {spec!r}: expected FILE:FIELD[,FIELD]")
    try:
        data = json.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--key-json {name}: cannot read a JSON object ({exc})") from exc
    missing = [f for f in fields.split(",") if not isinstance(data, dict) or f not in data]
    if missing:
        raise UsageError(f"--key-json {name}: no field {missing[0]!r}")
    return {f: data[f] for f in fields.split(",")}


def run(args: argparse.Namespace) -> int:
    from naspipe.plan import memo

    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        raise UsageError("no command to run (give it after --)")
    key = memo.key_of(key_parts(args))
    with memo.claimed(args.store, key) as entry:
        if entry is not None:
            memo.copy_out(entry, args.out)
            print(f"naspipe memo: {args.out}: copied the result of key {key[:12]} from {args.store}", file=sys.stderr)
            return 0
        status = subprocess.call(command)
        if status == 0:
            if not args.out.exists():
                raise UsageError(f"--out {args.out}: the command exited 0 without writing it")
            memo.put(args.store, key, args.out)
        return status
