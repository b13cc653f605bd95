"""A run's record of its own result files (``outputs.sha256``), and the one verifier of a run.

A finished run writes the SHA-256 of each result file (losses, layer and weights digests,
access order) into ``outputs.sha256``, in ``sha256sum`` format, so ``sha256sum -c
outputs.sha256`` inside the run checks it by hand. Every command that judges a run
(``naspipe compare``, ``naspipe reproducibility``, ``naspipe report``) reads it through
:func:`verify_run` first, so they agree on what a sound run is: ``metrics.json`` a JSON
object, ``outputs.sha256`` present (every run this version publishes has one: a missing one
is damage, not a reason to check less) and naming only files inside the run, each file it
names unchanged, ``weights.sha256`` the hash of ``layer_hashes.csv``'s digests, and
``losses.csv`` as long as ``metrics.json`` says. A run made before digests were recorded is
accepted without the file only when the caller names it (``--undigested RUN``); a simulated
run records measurements, not results, and has none. Damage is one line naming the file,
never a verdict.

Imports no torch: the runtime writes the file, torch-free readers check it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text, read_json_object

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
        _check_inside(run_dir, match.group(2), f"{path} line {number}")
        recorded[match.group(2)] = match.group(1)
    return recorded


def _check_inside(run_dir: Path, name: str, where: str) -> None:
    """A recorded name must be a file of the run: relative, no ``..``, and not a link that leads out of it
    (a verifier that hashed ``../../etc/hostname`` would read, and vouch for, a file of someone else's)."""
    parts = Path(name).parts
    outside = Path(name).is_absolute() or ".." in parts
    if not outside:
        root = run_dir.resolve()
        outside = not (run_dir / name).resolve().is_relative_to(root)
    if outside:
        raise UsageError(f"{where}: damaged (names {name!r}, which is not a file inside the run directory)")


def verify_run(run_dir: Path, undigested: Collection[Path] = ()) -> dict[str, str]:
    """Check a run as every reader must before judging it; the SHA-256 of each file it recorded.

    Raises a one-line :class:`UsageError` naming the first problem: not a directory, an
    unreadable ``metrics.json``, a missing or malformed ``outputs.sha256`` (unless the run is
    simulated, or is one of ``undigested``: runs the user names as made before digests were
    recorded), a recorded file changed or gone, or results inconsistent with each other. The
    digests returned let a verdict record exactly which bytes it judged (see :func:`check_unchanged`).
    """
    if not run_dir.is_dir():
        why = "not a directory" if run_dir.exists() else "no such directory"
        raise UsageError(f"{run_dir}: not a run directory ({why})")
    metrics = read_json_object(run_dir / "metrics.json", f"{run_dir / 'metrics.json'}")
    recorded = recorded_digests(run_dir)
    if recorded is None and metrics.get("simulated") is not True and not _named(run_dir, undigested):
        raise UsageError(f"{run_dir / DIGESTS}: missing (every run naspipe publishes records its results there, so "
                         "the run is damaged or unfinished; for a run made before digests were recorded, pass "
                         f"--undigested {run_dir})")
    current: dict[str, str] = {}
    for name, digest in (recorded or {}).items():
        path = run_dir / name
        if not path.is_file():
            raise UsageError(f"{path}: damaged (missing, though the run's {DIGESTS} lists it)")
        current[name] = file_sha256(path)
        if current[name] != digest:
            raise UsageError(f"{path}: damaged (its SHA-256 {current[name][:12]}... is not the "
                             f"{digest[:12]}... recorded in {run_dir / DIGESTS})")
    _check_weights(run_dir)
    _check_loss_count(run_dir, metrics)
    return current


def add_undigested_argument(parser: argparse.ArgumentParser) -> None:
    """``--undigested RUN``: the one way to accept a run without ``outputs.sha256`` (compare, reproducibility,
    report), named run by run so that a digest file deleted from a new run never switches the check off."""
    parser.add_argument("--undigested", nargs="+", action="extend", type=Path, default=[], metavar="DIR",
                        help="runs made before outputs.sha256 existed: checked for consistency only")


def _named(run_dir: Path, runs: Collection[Path]) -> bool:
    """Whether ``run_dir`` is one of ``runs`` (compared as resolved paths)."""
    here = run_dir.resolve()
    return any(Path(r).resolve() == here for r in runs)


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


def _check_loss_count(run_dir: Path, metrics: Mapping[str, object]) -> None:
    """``losses.csv`` must hold one row per subnet ``metrics.json`` says the run trained."""
    losses, trained = run_dir / "losses.csv", metrics.get("subnets")
    if not losses.is_file() or not isinstance(trained, int):
        return
    try:
        with losses.open("rb") as f:
            rows = sum(1 for line in f if line.strip()) - 1
    except OSError as exc:
        raise UsageError(f"{losses}: damaged (unreadable: {exc.strerror or exc})") from None
    if rows != trained:
        raise UsageError(f"{losses}: damaged ({max(rows, 0)} losses where metrics.json says {trained} subnets "
                         "were trained)")
