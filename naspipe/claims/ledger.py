"""The claims ledger: ``claims.yaml`` loaded, validated against ``claims.schema.json``, as typed records.

Why data and not code: the paper's numbers live in one reviewed file with their sources, so
the report code never types a number of the paper, and a reader can check each claim
against the paper without reading Python. A ledger that breaks the schema is one
:class:`~naspipe.errors.UsageError` naming the file, the claim and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from naspipe.errors import UsageError

Scalar = float | int | str | bool
PaperValue = Scalar | tuple[float, float]


@dataclass(frozen=True)
class Measure:
    """Where a value lives: rows of ``<table>.csv`` matching ``where``, one column, reduced to a value."""

    table: str
    column: str
    where: dict[str, tuple[Scalar, ...]] = field(default_factory=dict)
    reduce: str = "one"

    def describe(self) -> str:
        rows = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in self.where.items())
        return f"{self.table}.{self.column}" + (f" [{rows}]" if rows else "")


@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    quantity: str
    unit: str
    paper: PaperValue
    basis: str  # measured | simulated | fitted
    rule: str
    measure: Measure
    tolerance: float = 0.0
    note: str = ""
    divide_by: Measure | None = None
    reference: Measure | None = None
    artifact: Measure | None = None


def default_ledger_text() -> str:
    return resources.files("naspipe.claims").joinpath("claims.yaml").read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("naspipe.claims").joinpath("claims.schema.json").read_text(encoding="utf-8"))
    return data


def load_claims(path: Path | None = None) -> list[Claim]:
    """The package's ledger, or the one at ``path``; validated, ids unique."""
    label = str(path) if path else "naspipe/claims/claims.yaml"
    try:
        text = path.read_text(encoding="utf-8") if path else default_ledger_text()
    except OSError as exc:
        raise UsageError(f"claims file {label}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"claims file {label}: not YAML ({str(exc).splitlines()[0]})") from None
    return parse_claims(data, label)


def parse_claims(data: Any, label: str) -> list[Claim]:
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(data))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "top level"
        claim_id = _claim_id(data, list(error.absolute_path))
        raise UsageError(f"claims file {label}: {claim_id}{where}: {error.message.splitlines()[0]}")
    claims = [_claim(entry) for entry in data["claims"]]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise UsageError(f"claims file {label}: claim id {claim.id!r} given twice")
        seen.add(claim.id)
    return claims


def _claim_id(data: Any, path: list[Any]) -> str:
    if len(path) >= 2 and path[0] == "claims" and isinstance(path[1], int):
        entry = data["claims"][path[1]]
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            return f"claim {entry['id']!r}, "
    return ""


def _measure(entry: dict[str, Any] | None) -> Measure | None:
    if entry is None:
        return None
    where = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in (entry.get("where") or {}).items()}
    return Measure(entry["table"], entry["column"], where, entry.get("reduce", "one"))


def _claim(entry: dict[str, Any]) -> Claim:
    paper = entry["paper"]
    measure = _measure(entry["measure"])
    assert measure is not None  # required by the schema
    return Claim(
        id=entry["id"], source=entry["source"], quantity=entry["quantity"], unit=entry["unit"],
        paper=(float(paper[0]), float(paper[1])) if isinstance(paper, list) else paper,
        basis=entry["basis"], rule=entry["rule"], measure=measure, tolerance=float(entry.get("tolerance", 0.0)),
        note=entry.get("note", ""), divide_by=_measure(entry.get("divide_by")),
        reference=_measure(entry.get("reference")), artifact=_measure(entry.get("artifact")),
    )
