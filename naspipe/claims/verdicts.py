"""The verdicts and the rules that decide them, each with its tolerance stated in words.

Why rules are small named predicates: the ledger names a rule per claim, the report prints
the rule's condition next to the verdict (``within 25% of 7.8``), and each rule is tested
on one input built to pass and one built to fail. A claim is:

- *reproduced* when our value passes the rule against the paper's value;
- *reproduced only under the artifact's accounting* when ours fails but the same quantity
  under the authors' artifact's accounting or model (the claim's ``artifact`` measure) passes;
- *not reproduced* when ours is there and fails (and the artifact's does not pass);
- *not checkable here* when the output that holds our value is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from naspipe.claims.ledger import PaperValue, Scalar

REPRODUCED = "reproduced"
ARTIFACT_ONLY = "reproduced only under the artifact's accounting"
NOT_REPRODUCED = "not reproduced"
NOT_CHECKABLE = "not checkable here"
VERDICTS = (REPRODUCED, ARTIFACT_ONLY, NOT_REPRODUCED, NOT_CHECKABLE)

Target = PaperValue


def as_bool(value: Scalar) -> bool:
    """CSV cells come back as bools, numbers or strings ("True", "false", "1")."""
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes", "identical"}
    return bool(value)


def as_float(value: Scalar | Target) -> float:
    if isinstance(value, tuple):
        raise TypeError("a range has no single value")
    if isinstance(value, str):
        return float(value)
    return float(value)


def format_value(value: Scalar | Target | None) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return f"{format_value(value[0])}-{format_value(value[1])}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


@dataclass(frozen=True)
class Rule:
    """A pass condition on (ours, target, tolerance) and the words that state it."""

    name: str
    test: Callable[[Scalar, Target, float], bool]
    words: Callable[[Target, float], str]


def _relative(ours: Scalar, target: Target, tol: float) -> bool:
    t = as_float(target)
    return abs(as_float(ours) - t) <= tol * abs(t)


def _absolute(ours: Scalar, target: Target, tol: float) -> bool:
    return abs(as_float(ours) - as_float(target)) <= tol


def _within(ours: Scalar, target: Target, tol: float) -> bool:
    if not isinstance(target, tuple):
        raise TypeError("rule 'within' needs a [low, high] paper value")
    return target[0] - tol <= as_float(ours) <= target[1] + tol


def _equal(ours: Scalar, target: Target, tol: float) -> bool:
    return str(ours).strip() == str(target).strip()


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("relative", _relative, lambda t, tol: f"within {tol:.0%} of {format_value(t)}"),
    Rule("absolute", _absolute, lambda t, tol: f"within {format_value(tol)} of {format_value(t)}"),
    Rule("within", _within, lambda t, tol: (
        f"between {format_value(t[0])} and {format_value(t[1])}" if isinstance(t, tuple) else "in range")
        + (f" (slack {format_value(tol)})" if tol else "")),
    Rule("at_most", lambda o, t, tol: as_float(o) <= as_float(t) + tol,
         lambda t, tol: f"at most {format_value(as_float(t) + tol)}"),
    Rule("at_least", lambda o, t, tol: as_float(o) >= as_float(t) - tol,
         lambda t, tol: f"at least {format_value(as_float(t) - tol)}"),
    Rule("equal", _equal, lambda t, tol: f"exactly {format_value(t)}"),
    Rule("not_equal", lambda o, t, tol: not _equal(o, t, tol), lambda t, tol: f"different from {format_value(t)}"),
    Rule("is_true", lambda o, t, tol: as_bool(o), lambda t, tol: "true"),
    Rule("is_false", lambda o, t, tol: not as_bool(o), lambda t, tol: "false"),
)}


def passes(rule: str, ours: Scalar, target: Target, tolerance: float) -> bool:
    """Whether ``ours`` meets ``rule`` against ``target``; a value that is not a number fails a numeric rule."""
    try:
        return RULES[rule].test(ours, target, tolerance)
    except (TypeError, ValueError):
        return False


def condition(rule: str, target: Target, tolerance: float) -> str:
    return RULES[rule].words(target, tolerance)


def offset(rule: str, ours: Scalar, target: Target) -> str:
    """How far ours is from the target, in the rule's own terms ("" when the rule has none)."""
    try:
        if rule == "relative":
            return f"{(as_float(ours) - as_float(target)) / abs(as_float(target)):+.0%}"
        if rule in {"absolute", "at_most", "at_least"}:
            return f"{as_float(ours) - as_float(target):+.3g}"
    except (TypeError, ValueError, ZeroDivisionError):
        return ""
    return ""


def decide(ours_pass: bool | None, artifact_pass: bool | None) -> str:
    """The verdict from whether ours passes (None: not measured) and whether the artifact's does."""
    if ours_pass is None:
        return ARTIFACT_ONLY if artifact_pass else NOT_CHECKABLE
    if ours_pass:
        return REPRODUCED
    return ARTIFACT_ONLY if artifact_pass else NOT_REPRODUCED
