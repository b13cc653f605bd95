"""Are runs bitwise identical? If not, where do they first diverge?

Two runs are identical when every loss (compared as exact ``float.hex()`` strings) and every
layer digest match. Otherwise the report names the first subnet whose loss differs and the
first layers whose tensors differ, which is where to start looking. A run whose files do not
pass the one run verifier (:func:`naspipe.rundigest.verify_run`, which ``reproducibility``
and ``report`` use too) is damaged, not different: that is a one-line error (exit 2), never
a verdict.

A verdict also names the settings that define the reference (DESIGN.md section 2: precision, numerics,
threads, micro-batches, a split backward) where the runs differ in one: two such runs answer to different
references, so their bits agreeing is a fact of the device, not of the code (fp32 and tf32 compute the same
bits on a CPU, which has no TF32 kernels), and their bits differing is expected. The layout (system,
stages, partitions, cache) is never named: runs are compared across it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import read_json_object
from naspipe.rundigest import verify_run

RUN_FILES = ("losses.csv", "layer_hashes.csv", "weights.sha256")
# metrics.json's config keys that each define what ``sequential`` computes (DESIGN.md section 2)
REFERENCE_SETTINGS = ("precision", "numerics", "threads", "micro_batches", "split_backward")


@dataclass(frozen=True)
class RunRecord:
    path: Path
    losses: dict[int, str]
    layers: dict[int, str]
    weights: str
    digests: dict[str, str] = field(default_factory=dict)  # SHA-256 of each file read, as verified
    settings: dict[str, Any] = field(default_factory=dict)  # its REFERENCE_SETTINGS (none for runs without)
    device: str = ""  # the device type its stages computed on ("" if metrics.json does not say)


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
    settings, device = _reference_settings(path)
    return RunRecord(path, losses, layers, weights, digests, settings, device)


def _reference_settings(path: Path) -> tuple[dict[str, Any], str]:
    """The run's :data:`REFERENCE_SETTINGS` and device from its metrics.json (verified an object already);
    none for a run whose metrics.json holds no config (made before it did)."""
    metrics = read_json_object(path / "metrics.json", str(path / "metrics.json"))
    config = metrics.get("config")
    settings = {key: config[key] for key in REFERENCE_SETTINGS if key in config} if isinstance(config, dict) else {}
    device = metrics.get("device")
    return settings, device if isinstance(device, str) else ""


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


def differing_settings(a: RunRecord, b: RunRecord) -> list[str]:
    """``"precision fp32 vs tf32"`` for each reference setting both runs record and differ in."""
    keys = [key for key in REFERENCE_SETTINGS if key in a.settings and key in b.settings]
    return [f"{key} {_shown(a.settings[key])} vs {_shown(b.settings[key])}" for key in keys
            if a.settings[key] != b.settings[key]]


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _devices(a: RunRecord, b: RunRecord) -> str:
    """Where two runs computed: ``on cpu``, ``on cpu and cuda``, or ``where they ran`` when a run does not say."""
    if not (a.device and b.device):
        return "where they ran"
    return f"on {a.device}" if a.device == b.device else f"on {a.device} and {b.device}"


def compare_runs(paths: list[Path], undigested: Collection[Path] = ()) -> tuple[bool, str]:
    """Whether every run is bitwise the first, and the report: a verdict per run (module docstring)."""
    if len(paths) < 2:
        raise UsageError("compare needs at least two run directories")
    runs = [read_run(p, undigested) for p in paths]
    verdicts = [_verdict(runs[0], other) for other in runs[1:]]
    return all(same for same, _ in verdicts), "\n".join(line for _, lines in verdicts for line in lines)


def _verdict(a: RunRecord, b: RunRecord) -> tuple[bool, list[str]]:
    """``b`` against the reference run ``a``: whether bitwise equal, and the verdict's lines."""
    problems = compare_pair(a, b)
    differ = differing_settings(a, b)
    settings = f"settings differ: {', '.join(differ)}"
    if problems:
        named = [f"  {settings} (each defines its own reference: different bits are expected)"] if differ else []
        return False, [f"DIFFERENT: {a.path} vs {b.path}", *named, *(f"  {p}" for p in problems)]
    detail = f"{len(b.losses)} losses, weights {b.weights[:16]}"
    if differ:
        detail += f"; {settings}; {_devices(a, b)} they compute the same bits"
    return True, [f"IDENTICAL: {a.path} vs {b.path} ({detail})"]
