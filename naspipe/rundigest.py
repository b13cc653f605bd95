"""A run's record of its own result files (``outputs.sha256``), checked by everything that judges a run.

A finished run writes the SHA-256 of each result file (losses, layer and weights digests,
access order) into ``outputs.sha256``, in
``sha256sum`` format, so ``sha256sum -c outputs.sha256`` inside the run checks it by hand.
Readers that judge a run (``naspipe compare``, ``naspipe reproducibility``, ``naspipe
report``) verify the files they read against it first: a changed digit or a truncated
``losses.csv`` is damage, reported as one line naming the file, and never becomes a verdict.
Two checks hold with or without that file (runs written before it existed have none):
``weights.sha256`` is the hash of ``layer_hashes.csv``'s digests, and ``losses.csv`` holds
as many losses as ``metrics.json`` says the run trained.

Imports no torch: the runtime writes the file, torch-free readers check it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text

DIGESTS = "outputs.sha256"
# The results a verdict or a table is made of. metrics.json and trace.json are measurements
# (timings), checked for shape by their readers and often rewritten by tools; not recorded.
RECORDED = ("losses.csv", "layer_hashes.csv", "weights.sha256", "access_order.csv")
_LINE = re.compile(r"([0-9a-f]{64}) [ *](\S+)$")


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def hash_of_hashes(layer_digests: Mapping[int, str]) -> str:
    """``weights.sha256``: one SHA-256 over every layer's digest in layer-id order."""
    digest = hashlib.sha256()
    for layer in sorted(layer_digests):
        digest.update(f"{layer}:{layer_digests[layer]}\n".encode())
    return digest.hexdigest()


def write_digests(run_dir: Path, names: Iterable[str] = RECORDED) -> None:
    """Record the SHA-256 of each of ``names`` present in ``run_dir``; the last file a run writes."""
    lines = [f"{file_sha256(run_dir / n)}  {n}\n" for n in names if (run_dir / n).is_file()]
    atomic_write_text(run_dir / DIGESTS, "".join(lines))


def recorded_digests(run_dir: Path) -> dict[str, str] | None:
    """``{file name: SHA-256}`` from the run's ``outputs.sha256``; None for a run that has none."""
    path = run_dir / DIGESTS
    if not path.is_file():
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: damaged (unreadable: {exc})") from None
    recorded: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        match = _LINE.match(line)
        if match is None or match.group(2) in recorded:
            raise UsageError(f"{path} line {number}: damaged (expected '<sha256>  <file>' once per file)")
        recorded[match.group(2)] = match.group(1)
    return recorded


def verify_run(run_dir: Path, names: Iterable[str] | None = None) -> dict[str, str]:
    """Check ``names`` (default: every file the run recorded) and the run's own consistency; their digests.

    Raises a one-line :class:`UsageError` naming the first damaged file. The digests returned
    let a verdict record exactly which bytes it judged (see :func:`check_unchanged`).
    """
    recorded = recorded_digests(run_dir) or {}
    wanted = list(recorded) if names is None else list(names)
    current: dict[str, str] = {}
    for name in wanted:
        path = run_dir / name
        if not path.is_file():
            if name in recorded:
                raise UsageError(f"{path}: damaged (missing, though the run's {DIGESTS} lists it)")
            continue
        current[name] = file_sha256(path)
        if name in recorded and current[name] != recorded[name]:
            raise UsageError(f"{path}: damaged (its SHA-256 {current[name][:12]}... is not the "
                             f"{recorded[name][:12]}... recorded in {run_dir / DIGESTS})")
    _check_weights(run_dir)
    _check_loss_count(run_dir)
    return current


def check_unchanged(run_dir: Path, judged: Mapping[str, str], label: str) -> None:
    """UsageError unless every file in ``judged`` still has the SHA-256 it had when ``label`` was made."""
    for name, digest in sorted(judged.items()):
        path = run_dir / name
        if not path.is_file() or file_sha256(path) != digest:
            raise UsageError(f"{label}: stale: {path} changed since the verdict was made (rerun it)")


def _check_weights(run_dir: Path) -> None:
    """``weights.sha256`` must be the hash of ``layer_hashes.csv``'s digests (both files present)."""
    weights, hashes = run_dir / "weights.sha256", run_dir / "layer_hashes.csv"
    if not (weights.is_file() and hashes.is_file()):
        return
    try:
        with hashes.open(encoding="utf-8", newline="") as f:
            layers = {int(r["layer"]): r["sha256"] for r in csv.DictReader(f)}
        stated = weights.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise UsageError(f"{hashes}: damaged (unreadable: {exc})") from None
    if hash_of_hashes(layers) != stated:
        raise UsageError(f"{weights}: damaged (does not match the layer digests in {hashes.name})")


def _check_loss_count(run_dir: Path) -> None:
    """``losses.csv`` must hold one row per subnet ``metrics.json`` says the run trained."""
    losses, metrics = run_dir / "losses.csv", run_dir / "metrics.json"
    if not (losses.is_file() and metrics.is_file()):
        return
    try:
        trained = json.loads(metrics.read_text(encoding="utf-8")).get("subnets")
        with losses.open("rb") as f:
            rows = sum(1 for line in f if line.strip()) - 1
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return  # the readers of metrics.json report it in their own words
    if isinstance(trained, int) and rows != trained:
        raise UsageError(f"{losses}: damaged ({max(rows, 0)} losses where {metrics.name} says {trained} subnets "
                         "were trained)")
