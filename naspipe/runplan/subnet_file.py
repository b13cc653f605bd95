"""Subnet files: the JSON that ``evaluate`` reads and ``search`` writes (pure Python).

Accepted shapes, so a search's ``best.json`` is directly a subnet file:

- ``{"choices": [c0, c1, ...]}``: one subnet (``search`` writes its best this way),
- ``{"subnets": [[...], [...]]}`` or a bare list of lists: several subnets.

Every subnet is checked against the space: one choice per block, each in range, so a file
written for another space is a one-line error naming the file, the subnet and the block.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.subnet import Subnet


def read_subnets(path: Path, choices_per_block: Sequence[int]) -> list[Subnet]:
    """The subnets in ``path``, each validated against ``choices_per_block``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise UsageError(f"subnet file {path}: unreadable (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"subnet file {path}: unreadable ({exc})") from None
    rows = _rows(path, data)
    if not rows:
        raise UsageError(f"subnet file {path}: no subnets")
    return [check_subnet(row, choices_per_block, f"subnet file {path}: subnet {i}") for i, row in enumerate(rows)]


def _rows(path: Path, data: Any) -> list[Any]:
    if isinstance(data, dict) and "choices" in data:
        return [data["choices"]]
    if isinstance(data, dict) and "subnets" in data:
        data = data["subnets"]
    if not isinstance(data, list):
        raise UsageError(f"subnet file {path}: expected {{\"choices\": [...]}}, {{\"subnets\": [[...], ...]}} "
                         "or a list of choice lists")
    return data


def check_subnet(row: Any, choices_per_block: Sequence[int], where: str) -> Subnet:
    """``row`` as a :class:`Subnet` of a space with ``choices_per_block``, or a one-line error."""
    if not isinstance(row, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in row):
        raise UsageError(f"{where}: expected a list of integers, got {_short(row)}")
    if len(row) != len(choices_per_block):
        raise UsageError(f"{where}: has {len(row)} choices, the space has {len(choices_per_block)} blocks")
    for block, (choice, n) in enumerate(zip(row, choices_per_block, strict=True)):
        if not 0 <= choice < n:
            raise UsageError(f"{where}: block {block} choice {choice} is out of range (0..{n - 1})")
    return Subnet(tuple(row))


def subnet_json(subnet: Subnet, **extra: Any) -> dict[str, Any]:
    """The one-subnet form (``{"choices": [...]}``) plus descriptive fields."""
    return {"choices": list(subnet.choices), **extra}


def _short(value: Any) -> str:
    try:
        text = json.dumps(value)
    except RecursionError:
        return "a value nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."
