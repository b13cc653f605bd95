"""Command-line options shared by ``naspipe evaluate`` and ``naspipe search``, and their checks."""

from __future__ import annotations

import argparse
import csv
import io
import math
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from naspipe import fsutil
from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.subnet import Subnet


def add_eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", type=Path, required=True,
                   help="a finished run directory (its newest checkpoint, normally the final one) or one "
                   "checkpoint directory RUN/checkpoints/step-N")
    p.add_argument("--split", default="valid", help="held-out split: valid or test (default valid)")
    p.add_argument("--beam", type=int, default=1, help="NLP beam size for the BLEU decodes (1: greedy)")
    p.add_argument("--batches", type=int, default=4, help="held-out batches scored per subnet (default 4)")
    p.add_argument("--calib-batches", type=int, default=8,
                   help="CV: training batches that re-estimate batch-norm statistics per subnet (default 8)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (fixed for reproducibility)")


def check_eval_options(args: argparse.Namespace) -> None:
    from naspipe.search.evaluate import SPLITS

    if args.split not in SPLITS:
        raise UsageError(f"--split {args.split!r}: choose one of {', '.join(SPLITS)}")
    for flag, value, low in (("--beam", args.beam, 1), ("--batches", args.batches, 1),
                             ("--calib-batches", args.calib_batches, 0), ("--threads", args.threads, 1)):
        if value < low:
            raise UsageError(f"{flag} {value} must be >= {low}")
    if args.device not in ("cpu", "cuda", "auto"):
        raise UsageError(f"--device {args.device!r}: choose cpu, cuda or auto")
    if not args.run.is_dir():
        raise UsageError(f"--run {args.run}: not a directory")


def eval_device(name: str, threads: int) -> torch.device:
    """The device, with deterministic kernels and fixed threads (as training uses)."""
    from naspipe.determinism import make_deterministic

    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    device = torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")
    make_deterministic(threads, device)
    return device


def sample_subnets(choices_per_block: Sequence[int], count: int, seed: int) -> list[Subnet]:
    """``count`` distinct uniformly drawn subnets (fewer when the space is smaller), seeded."""
    rng = random.Random(derive_seed(seed, "evaluate-sample"))
    size = math.prod(choices_per_block)
    drawn: list[Subnet] = []
    seen: set[Subnet] = set()
    while len(drawn) < min(count, size):
        subnet = Subnet(tuple(rng.randrange(n) for n in choices_per_block))
        if subnet not in seen:
            seen.add(subnet)
            drawn.append(subnet)
    return drawn


def check_out_file(out: Path) -> None:
    """``--out`` must be able to become a file (:func:`naspipe.fsutil.check_out_file`)."""
    fsutil.check_out_file(out, "--out")


def csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """CSV with floats written by ``repr`` (exact round trip), so equal scores give equal bytes."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    return buffer.getvalue()
