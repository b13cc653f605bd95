"""``naspipe published``: does this results tree reproduce the published results bit for bit?

    naspipe published --results results --expected workflow/published/config.json --config-json JSON \\
        --out results/published.md --json results/published.json

Writes the verdict (:func:`naspipe.published.summary`) to ``--out`` and prints its sentence, and this tree's own
record to ``--json``: copied over ``--expected``, that record is what a later run is checked against (how the
repository's published digests are made, docs/numerics.md). Exit 0 whatever the verdict: the report shows it;
2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from naspipe import published
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_json, atomic_write_text, read_json_object


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser("published", help="check a results tree against the published "
                                                "digests", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--results", type=Path, required=True, help="the workflow's results directory")
    p.add_argument("--expected", type=Path, required=True, help="the published record (JSON)")
    p.add_argument("--config-json", default="{}", help="the workflow config the results were made with (JSON)")
    p.add_argument("--out", type=Path, required=True, help="the verdict (markdown) to write")
    p.add_argument("--json", type=Path, required=True, help="this tree's record (JSON) to write")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        config = json.loads(args.config_json)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config-json: not JSON ({exc})") from None
    expected = read_json_object(args.expected, "--expected")
    if not isinstance(expected.get("runs"), dict) or not isinstance(expected.get("tables"), dict):
        raise UsageError(f"--expected {args.expected}: no 'runs' and 'tables' records")
    found = published.collect(args.results, config)
    text = published.summary(published.compare(expected, found), published.config_differences(expected, found),
                             f"published in {args.expected}")
    atomic_write_json(args.json, found)
    atomic_write_text(args.out, text)
    print(text.splitlines()[2])
    return 0
