"""``naspipe published``: does this results tree reproduce the published results bit for bit?

    naspipe published --results results --expected workflow/published/config.json --config-json JSON \\
        --out results/published.md --json results/published.json

Writes the verdict (:func:`naspipe.published.summary`) to ``--out`` and prints its sentence, and this tree's own
record to ``--json``: copied over ``--expected``, that record is what a later run is checked against (how the
repository's published digests are made, docs/numerics.md). Exit 0 whatever the verdict: the report shows it;
2 on bad input, and a damaged run is bad input: every run is read through the one run verifier, as ``compare``
and ``report`` read it, and damage is one line naming the file, never a verdict (a verdict would either vouch for
bytes nobody checked or call a broken copy a failed reproduction, and ``--json`` would record the damage for
publishing).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from naspipe import published
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_json, atomic_write_text, check_out_file, read_json_object


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser("published", help="check a results tree against the published "
                                                "digests", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--results", type=Path, required=True, help="the workflow's results directory")
    p.add_argument("--expected", type=Path, required=True, help="the published record (JSON)")
    p.add_argument("--config-json", default="{}", help="the workflow config the results were made with (JSON)")
    p.add_argument("--out", type=Path, required=True, help="the verdict (markdown) to write")
    p.add_argument("--json", type=Path, required=True, help="this tree's record (JSON) to write")
    p.add_argument("--report", type=Path, help="the results' report.md, which then opens with the verdict's sentence")
    return p


def run(args: argparse.Namespace) -> int:
    """Every input checked before anything is read from the tree or written: a bad flag, record or output path
    is one line (exit 2) and leaves no verdict and no record behind; so is a damaged run (see below)."""
    config = _config(args.config_json)
    _check_outputs(args.out, args.json)
    report = _read_report(args.report) if args.report is not None else ""
    expected = read_json_object(args.expected, "--expected")
    published.check_record(expected, f"--expected {args.expected}")
    found = published.collect(args.results, config)
    text = published.summary(published.compare(expected, found), published.config_differences(expected, found),
                             f"published in {args.expected}")
    sentence = text.splitlines()[2]
    if args.report is not None:  # first: the verdict is written last, so the workflow sees the report as older
        atomic_write_text(args.report, with_verdict(report, sentence, args.out))
    atomic_write_json(args.json, found)
    atomic_write_text(args.out, text)
    print(sentence)
    return 0


VERDICT_START, VERDICT_END = "<!-- naspipe published -->", "<!-- /naspipe published -->"


def with_verdict(report: str, sentence: str, verdict: Path) -> str:
    """``report`` opening with the published verdict's sentence under its title, in place of an earlier one.

    Why here and not in ``naspipe report``: the verdict digests the report's tables, so it can only be known
    after them; the block between the markers is this command's, replaced on every run."""
    start, end = report.find(VERDICT_START), report.find(VERDICT_END)
    if start >= 0 and end > start:
        report = report[:start] + report[end + len(VERDICT_END):].lstrip("\n")
    title, newline, rest = report.partition("\n")
    link = f"[{verdict.name}]({verdict.name})"
    said = f"{sentence[:-1]}: {link} lists them." if sentence.endswith(":") else f"{sentence} ({link})"
    block = f"{VERDICT_START}\n**Published results.** {said}\n{VERDICT_END}\n"
    if not title.startswith("# "):
        return block + "\n" + report
    return f"{title}{newline}\n{block}{rest if rest.startswith(chr(10)) else chr(10) + rest}"


def _read_report(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--report {path}: cannot read it ({exc.__class__.__name__})") from None


def _config(text: str) -> dict[str, Any]:
    """``--config-json``: a JSON object no deeper than the record may be (it is written into ``--json``)."""
    try:
        config = json.loads(text)
    except RecursionError:
        raise UsageError("--config-json: not JSON (nested too deeply)") from None
    except ValueError as exc:  # a syntax error, or an integer past Python's digit limit
        raise UsageError(f"--config-json: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise UsageError(f"--config-json: expected a JSON object, got {published.kind_of(config)}")
    published.check_depth(config, "--config-json", at=2)  # record / config
    return config


def _check_outputs(out: Path, record: Path) -> None:
    """Both outputs must be writable files, and two different ones (the record written, then overwritten by the
    verdict, lost the record)."""
    check_out_file(out, "--out")
    check_out_file(record, "--json")
    if os.path.realpath(out) == os.path.realpath(record):  # realpath: a symlink loop is no traceback
        raise UsageError(f"--json {record}: the same file as --out")
