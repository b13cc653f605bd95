"""Every claim judged against the result tables: the paper's value, ours, the verdict and its reason.

The reason is generated from the ledger and the numbers read (never typed per claim), in two
or three sentences: what ours is and where it comes from, whether it meets the rule's stated
tolerance and by how much it misses, and what the artifact's accounting gives when the claim
names one. The frame is ``results/tables/claims.csv`` and the report's first section.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from naspipe.claims.ledger import Claim, Measure, PaperValue, Scalar
from naspipe.claims.measure import Reading, Sources, ratio, read
from naspipe.claims.verdicts import NOT_CHECKABLE, condition, decide, format_value, offset, passes

COLUMNS = ["id", "source", "quantity", "unit", "paper", "ours", "verdict", "tolerance", "basis", "measured_from",
           "artifact", "reason"]


@dataclass(frozen=True)
class Judgement:
    """A reading judged by the claim's rule: passed (None when nothing was read) and the deciding value."""

    reading: Reading
    passed: bool | None
    shown: str  # ours as printed: one value, or "k of n rows" for all/any


def claim_reading(claim: Claim, measure: Measure, sources: Sources) -> Reading:
    reading = read(measure, sources)
    if claim.divide_by is not None and measure is claim.measure:
        reading = ratio(reading, read(claim.divide_by, sources), claim.divide_by)
    return reading


def target_of(claim: Claim, sources: Sources) -> tuple[PaperValue | None, str]:
    """The value the rule compares with: the paper's, or the reference measure's (and why it is missing)."""
    if claim.reference is None:
        return claim.paper, ""
    ref = read(claim.reference, sources)
    return (ref.value, "") if ref.ok and ref.value is not None else (None, ref.missing or "no reference value")


def judge(claim: Claim, reading: Reading, target: PaperValue | None) -> Judgement:
    if not reading.ok or target is None:
        return Judgement(reading, None, "")
    how = "any" if claim.measure.reduce == "any" and reading.value is None else claim.measure.reduce
    if reading.value is not None and how not in {"all", "any"}:
        return Judgement(reading, passes(claim.rule, reading.value, target, claim.tolerance),
                         format_value(reading.value))
    results = [(label, value, passes(claim.rule, value, target, claim.tolerance)) for label, value in reading.values]
    good = [r for r in results if r[2]]
    passed = len(good) == len(results) if how == "all" else bool(good)
    shown_rows = [r for r in results if r[2] != (how == "all")] or results  # the rows that decide it
    examples = "; ".join(f"{label or 'row'}: {format_value(value)}" for label, value, _ in shown_rows[:3])
    return Judgement(reading, passed, f"{len(good)} of {len(results)} pass ({examples})")


def ours_text(claim: Claim, ours: Judgement, target: PaperValue | None) -> list[str]:
    """Ours, where it was read, and whether it meets the rule (by how much it misses when it does not)."""
    where = f"{claim.basis} from {claim.measure.describe()}"
    if claim.divide_by is not None:
        where += f" over {claim.divide_by.describe()}"
    value = ours.reading.value
    if value is not None and ours.reading.label:
        where += f", {ours.reading.label}"
    rule_text = condition(claim.rule, target, claim.tolerance) if target is not None else claim.rule
    miss = offset(claim.rule, value, target) if value is not None and target is not None else ""
    verdict = f"It meets the rule: {rule_text}." if ours.passed else (
        f"It fails the rule: {rule_text}" + (f" (off by {miss})." if miss else "."))
    return [f"Ours is {ours.shown} ({where}).", verdict]


def artifact_text(claim: Claim, artifact: Judgement) -> str:
    if artifact.passed is None:
        return f"Under the artifact's accounting: not checkable here ({artifact.reading.missing})."
    verb = "meets" if artifact.passed else "also fails"
    described = claim.artifact.describe() if claim.artifact else ""
    return f"Under the artifact's accounting ({described}) it is {artifact.shown}, which {verb} the rule."


def reason(claim: Claim, ours: Judgement, artifact: Judgement | None, target: PaperValue | None,
           target_missing: str) -> str:
    """Two or three sentences from the numbers: ours and its source, the rule and the miss, the artifact's."""
    if ours.passed is None:
        text = [f"Not checkable here: {ours.reading.missing or target_missing}."]
    else:
        text = ours_text(claim, ours, target)
    if artifact is not None:
        text.append(artifact_text(claim, artifact))
    if claim.note:
        text.append(f"Paper: {claim.note}.")
    return " ".join(text)


def evaluate_claim(claim: Claim, sources: Sources) -> dict[str, object]:
    target, target_missing = target_of(claim, sources)
    ours = judge(claim, claim_reading(claim, claim.measure, sources), target)
    artifact = None
    if claim.artifact is not None:
        artifact_claim = Claim(**{**claim.__dict__, "measure": claim.artifact, "divide_by": None})
        artifact = judge(artifact_claim, read(claim.artifact, sources), target)
    verdict = decide(ours.passed, artifact.passed if artifact else None)
    return {
        "id": claim.id, "source": claim.source, "quantity": claim.quantity, "unit": claim.unit,
        "paper": format_value(claim.paper), "ours": ours.shown if ours.passed is not None else "",
        "verdict": verdict,
        "tolerance": condition(claim.rule, target, claim.tolerance) if target is not None else claim.rule,
        "basis": claim.basis, "measured_from": claim.measure.describe(),
        "artifact": artifact.shown if artifact and artifact.passed is not None else "",
        "reason": reason(claim, ours, artifact, target, target_missing),
    }


def evaluate(claims: list[Claim], sources: Sources) -> pd.DataFrame:
    return pd.DataFrame([evaluate_claim(c, sources) for c in claims], columns=COLUMNS)


def tally(frame: pd.DataFrame) -> dict[str, int]:
    """How many claims got each verdict, in the verdicts' order."""
    from naspipe.claims.verdicts import VERDICTS

    counts = frame["verdict"].value_counts() if not frame.empty else pd.Series(dtype=int)
    return {v: int(counts.get(v, 0)) for v in VERDICTS}


__all__ = ["COLUMNS", "NOT_CHECKABLE", "evaluate", "evaluate_claim", "tally", "Scalar"]
