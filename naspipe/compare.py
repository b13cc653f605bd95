"""Are runs bitwise identical? If not, where do they first diverge?

Two runs are identical when every loss (compared as exact ``float.hex()`` strings) and every
layer digest match. Otherwise the report names the first subnet whose loss differs and the
first layers whose tensors differ, which is where to start looking. A run whose files do not
pass the one run verifier (:func:`naspipe.rundigest.verify_run`, which ``reproducibility``
and ``report`` use too) is damaged, not different: that is a one-line error (exit 2), never
a verdict.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from naspipe.errors import UsageError
from naspipe.rundigest import verify_run

RUN_FILES = ("losses.csv", "layer_hashes.csv", "weights.sha256")


@dataclass(frozen=True)
class RunRecord:
    path: Path
    losses: dict[int, str]
    layers: dict[int, str]
    weights: str
    digests: dict[str, str] = field(default_factory=dict)  # SHA-256 of each file read, as verified


def read_run(path: Path, undigested: Collection[Path] = ()) -> RunRecord:
    """A run's losses, layer digests and weights digest; unreadable input is a UsageError naming file and line.

    ``undigested``: runs the user names as made before ``outputs.sha256`` existed (see :func:`verify_run`).
    """
    if not path.is_dir():
        why = "not a directory" if path.exists() else "no such directory"
        raise UsageError(f"{path}: not a run directory ({why}; a run holds {', '.join(RUN_FILES)})")
    losses = _column_map(path / "losses.csv", "subnet", "loss_hex", _loss_hex)
    layers = _column_map(path / "layer_hashes.csv", "layer", "sha256", _sha256)
    weights_path = path / "weights.sha256"
    try:
        weights = _sha256(_read_text(weights_path).strip())
    except ValueError as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"{weights_path}: {exc}") from None
    digests = verify_run(path, undigested)  # after parsing: a malformed row is named by line
    return RunRecord(path, losses, layers, weights, digests)


def _column_map(path: Path, key: str, value: str, check: Callable[[str], str]) -> dict[int, str]:
    """``{int(row[key]): check(row[value])}`` over a CSV, every row validated (line numbers are the file's)."""
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    out: dict[int, str] = {}
    try:
        missing = [c for c in (key, value) if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{path}: missing column {missing[0]!r}")
        for row in reader:
            index = _row_key(row, key, value)
            if index in out:
                raise ValueError(f"{key} {index} appears twice")
            out[index] = check(row[value])
    except UsageError:
        raise
    except (ValueError, csv.Error) as exc:
        raise UsageError(f"{path} line {reader.line_num}: {exc}") from None
    return out


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path} line {line}: not UTF-8 text (byte {data[exc.start]:#04x})") from None


def _row_key(row: dict[str, str | None], key: str, value: str) -> int:
    if None in row or any(v is None for v in row.values()):
        fields = len([v for k, v in row.items() if k is not None and v is not None]) + len(row.get(None) or [])  # type: ignore[call-overload]
        raise ValueError(f"{fields} fields where the header has {len([k for k in row if k is not None])}")
    text = row[key] or ""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{key} {text!r} is not an integer") from None


def _loss_hex(text: str) -> str:
    try:
        float.fromhex(text)
    except ValueError:
        raise ValueError(f"loss_hex {text!r} is not a hex float") from None
    return text


def _sha256(text: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{text[:70]!r} is not a SHA-256 hex digest")
    return text


def compare_pair(a: RunRecord, b: RunRecord) -> list[str]:
    """Differences between two runs, most useful first; empty when bitwise identical."""
    problems: list[str] = []
    if a.losses.keys() != b.losses.keys():
        problems.append(f"trained subnets differ: {len(a.losses)} vs {len(b.losses)} losses")
    for y in sorted(a.losses.keys() & b.losses.keys()):
        if a.losses[y] != b.losses[y]:
            mine, theirs = float.fromhex(a.losses[y]), float.fromhex(b.losses[y])
            problems.append(f"first diverging step: subnet {y} (loss {mine!r} vs {theirs!r})")
            break
    differing = sorted(layer for layer in a.layers.keys() & b.layers.keys() if a.layers[layer] != b.layers[layer])
    if differing:
        shown = ", ".join(map(str, differing[:5])) + (" ..." if len(differing) > 5 else "")
        problems.append(f"{len(differing)} layers differ, first: {shown}")
    if a.layers.keys() != b.layers.keys():
        problems.append("runs hold different layer sets")
    if not problems and a.weights != b.weights:
        problems.append("weights digest differs")
    return problems


def compare_runs(paths: list[Path], undigested: Collection[Path] = ()) -> tuple[bool, str]:
    if len(paths) < 2:
        raise UsageError("compare needs at least two run directories")
    runs = [read_run(p, undigested) for p in paths]
    lines, same = [], True
    for other in runs[1:]:
        problems = compare_pair(runs[0], other)
        if problems:
            same = False
            lines.append(f"DIFFERENT: {runs[0].path} vs {other.path}")
            lines.extend(f"  {p}" for p in problems)
        else:
            detail = f"{len(other.losses)} losses, weights {other.weights[:16]}"
            lines.append(f"IDENTICAL: {runs[0].path} vs {other.path} ({detail})")
    return same, "\n".join(lines)
