"""``naspipe fetch``: bring a dataset named by URL and SHA-256 into a directory when it is absent.

Why a command (and not a ``curl`` line in the rule): the checksum check, the safe unpacking and
the all-or-nothing publish are the same for every dataset and must be testable without a
network; the workflow rule ``workflow/rules/download.smk`` only passes the config's ``source``
blocks. Exit 0 when fetched or already present (the stamp lists the same sources); exit 2 with
one line naming the URL (unreachable, missing) or the mismatch (expected vs got digest), and
nothing left in the destination.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "fetch",
        description="Download a dataset's files (http://, https://, file://), verify their SHA-256, unpack "
        ".tar.gz/.tgz/.tar/.zip archives safely and publish them in --out atomically; nothing is downloaded "
        "when --out's stamp already lists the same sources.",
    )
    p.add_argument("--out", type=Path, required=True, help="destination directory (the workflow: data/NAME)")
    p.add_argument("--url", help="one file's URL (with --sha256)")
    p.add_argument("--sha256", help="its expected SHA-256 (64 hex digits)")
    p.add_argument("--name", default="", help="save a plain file under this name (default: the URL's)")
    p.add_argument("--member", default="", help="archive: keep only this file or directory")
    p.add_argument("--strip", type=int, default=0, help="archive: leading path components to remove")
    p.add_argument("--no-unpack", action="store_true", help="keep an archive packed")
    p.add_argument("--source", action="append", default=[], metavar="JSON",
                   help="a source block as JSON, {url, sha256, name, archive} (repeatable; the workflow's form)")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.data.download import fetch, parse_source

    blocks = [_json_block(text, i) for i, text in enumerate(args.source)]
    if args.url or args.sha256:
        blocks.append(_flag_block(args))
    if not blocks:
        raise UsageError("fetch: give --url and --sha256, or --source JSON")
    where = ["--source" if i < len(args.source) else "--url" for i in range(len(blocks))]
    sources = [parse_source(block, w) for block, w in zip(blocks, where, strict=True)]
    if fetch(sources, args.out):
        print(f"fetched {len(sources)} source(s) into {args.out} (sha256 verified)")
    else:
        print(f"{args.out}: already fetched (its stamp lists the same sources)")
    return 0


def _json_block(text: str, index: int) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--source #{index + 1}: not JSON ({exc})") from None


def _flag_block(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--url``/``--sha256``/... flags as one source block."""
    if not (args.url and args.sha256):
        raise UsageError("fetch: --url and --sha256 go together")
    block: dict[str, Any] = {"url": args.url, "sha256": args.sha256}
    if args.name:
        block["name"] = args.name
    if args.no_unpack:
        block["archive"] = False
    elif args.member or args.strip:
        block["archive"] = {"member": args.member, "strip": args.strip}
    return block
