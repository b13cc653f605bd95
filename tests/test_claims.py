"""The claims ledger, its schema and every verdict rule (each on an input built to pass and one built to fail)."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from naspipe.claims import verdicts
from naspipe.claims.evaluate import evaluate, evaluate_claim
from naspipe.claims.ledger import default_ledger_text, load_claims, parse_claims
from naspipe.claims.sources import checked
from naspipe.errors import UsageError


def ledger_data() -> dict:
    return yaml.safe_load(default_ledger_text())


def one_claim(**fields) -> dict:
    base = {"id": "c", "source": "Table 2", "quantity": "a ratio", "unit": "x", "paper": 7.8, "basis": "simulated",
            "rule": "relative", "tolerance": 0.25, "measure": {"table": "t", "column": "v"}}
    return {**base, **fields}


def test_the_package_ledger_validates_and_covers_the_paper():
    claims = load_claims()
    assert len(claims) >= 25
    assert len({c.id for c in claims}) == len(claims)
    sources = " ".join(c.source for c in claims)
    for part in ("Abstract", "Introduction", "Section 5.1", "Section 5.2", "Section 5.3", "Section 5.4", "Table 2",
                 "Table 3", "Table 4", "Figure 5", "Figure 6", "Figure 7"):
        assert part in sources, part
    for claim in claims:
        assert claim.source and claim.quantity and claim.unit
        assert claim.rule in verdicts.RULES


@pytest.mark.parametrize("broken, field", [
    ({"source": None}, "source"),
    ({"rule": "close_enough"}, "rule"),
    ({"paper": 1.0, "rule": "within"}, "paper"),
    ({"paper": 1.0, "rule": "is_true", "tolerance": 0}, "paper"),
    ({"measure": {"table": "t"}}, "measure"),
    ({"basis": "guessed"}, "basis"),
    ({"colour": "red"}, "colour"),
])
def test_the_schema_rejects_a_broken_claim_naming_it(broken, field):
    claim = one_claim(**broken)
    claim = {k: v for k, v in claim.items() if v is not None}
    with pytest.raises(UsageError, match=r"claims file x\.yaml: claim 'c', claims/0") as err:
        parse_claims({"claims": [claim]}, "x.yaml")
    assert field in str(err.value) or "required" in str(err.value) or "valid" in str(err.value)


def test_relative_and_absolute_rules_need_a_tolerance_and_ids_are_unique():
    claim = one_claim()
    del claim["tolerance"]
    with pytest.raises(UsageError, match="tolerance"):
        parse_claims({"claims": [claim]}, "x.yaml")
    with pytest.raises(UsageError, match="claim id 'c' given twice"):
        parse_claims({"claims": [one_claim(), one_claim()]}, "x.yaml")


def test_a_ledger_file_that_is_not_yaml_is_one_line(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("claims: [\n")
    with pytest.raises(UsageError, match=r"claims file .*bad\.yaml: not YAML"):
        load_claims(bad)


# rule, paper (target), tolerance, a value built to pass, a value built to fail
RULE_CASES = [
    ("relative", 7.8, 0.25, 6.0, 5.8),
    ("absolute", 0.39, 0.05, 0.43, 0.45),
    ("within", (1.0, 4.0), 0.0, 3.9, 4.1),
    ("at_most", 1.0, 0.0, 1.0, 1.001),
    ("at_least", 2.0, 1.0, 1.0, 0.99),
    ("equal", "2F-2B-5F-5B", 0.0, "2F-2B-5F-5B", "2F-5F-2B-5B"),
    ("not_equal", "2F-2B-5F-5B", 0.0, "2F-5F-2B-5B", "2F-2B-5F-5B"),
    ("is_true", True, 0.0, "yes", "no"),
    ("is_false", False, 0.0, False, True),
]


@pytest.mark.parametrize("rule, target, tol, good, bad", RULE_CASES)
def test_every_rule_passes_and_fails_where_built_to(rule, target, tol, good, bad):
    assert verdicts.passes(rule, good, target, tol)
    assert not verdicts.passes(rule, bad, target, tol)


def test_every_rule_has_a_case():
    assert {case[0] for case in RULE_CASES} == set(verdicts.RULES)


def test_a_numeric_rule_fails_on_a_value_that_is_not_a_number():
    assert not verdicts.passes("relative", "n/a", 7.8, 0.25)


def test_verdicts_from_ours_and_the_artifacts():
    assert verdicts.decide(True, None) == verdicts.REPRODUCED
    assert verdicts.decide(True, False) == verdicts.REPRODUCED
    assert verdicts.decide(False, True) == verdicts.ARTIFACT_ONLY
    assert verdicts.decide(False, False) == verdicts.NOT_REPRODUCED
    assert verdicts.decide(False, None) == verdicts.NOT_REPRODUCED
    assert verdicts.decide(None, None) == verdicts.NOT_CHECKABLE


def sim(**rows: dict) -> pd.DataFrame:
    return pd.DataFrame([{"space": "nlp.c1", "stages": 8, **r} for r in rows.values()])


SIM = sim(csp={"system": "csp", "throughput_samples_s": 60.0, "throughput_vs_gpipe": 2.0, "bubble_ratio": 0.70},
          gpipe={"system": "gpipe", "throughput_samples_s": 30.0, "throughput_vs_gpipe": 1.0, "bubble_ratio": 0.57},
          pd={"system": "pipedream", "throughput_samples_s": 10.0, "throughput_vs_gpipe": 0.33, "bubble_ratio": 0.1})


def judged(claim: dict, sources: dict) -> dict:
    [parsed] = parse_claims({"claims": [claim]}, "test")
    return evaluate_claim(parsed, sources)


def test_ours_within_tolerance_is_reproduced_and_outside_is_not():
    measure = {"table": "sim", "column": "throughput_vs_gpipe", "where": {"system": "csp", "stages": 8}}
    ok = judged(one_claim(paper=2.2, measure=measure), {"sim": SIM})
    assert ok["verdict"] == verdicts.REPRODUCED and ok["ours"] == "2"
    bad = judged(one_claim(paper=7.8, measure=measure), {"sim": SIM})
    assert bad["verdict"] == verdicts.NOT_REPRODUCED
    assert "within 25% of 7.8 (off by -74%)" in bad["reason"]


def test_the_artifacts_accounting_rescues_a_failed_claim_only_when_it_passes():
    measure = {"table": "sim", "column": "throughput_vs_gpipe", "where": {"system": "csp"}}
    artifact = {"table": "attribution", "column": "ratio", "where": {"space": "nlp.c1"}, "reduce": "last"}
    claim = one_claim(paper=7.8, measure=measure, artifact=artifact)
    attribution = pd.DataFrame({"space": ["nlp.c1"] * 3, "order": [0, 1, 2], "ratio": [2.0, 9.5, 7.1]})
    rescued = judged(claim, {"sim": SIM, "attribution": attribution})
    assert rescued["verdict"] == verdicts.ARTIFACT_ONLY and rescued["artifact"] == "7.1"
    assert "Under the artifact's accounting (attribution.ratio [space=nlp.c1]) it is 7.1" in rescued["reason"]
    attribution.loc[2, "ratio"] = 4.0
    assert judged(claim, {"sim": SIM, "attribution": attribution})["verdict"] == verdicts.NOT_REPRODUCED
    missing = judged(claim, {"sim": SIM})
    assert missing["verdict"] == verdicts.NOT_REPRODUCED and "attribution.csv missing" in missing["reason"]


def test_a_missing_table_column_or_row_is_not_checkable_and_says_which():
    claim = one_claim(measure={"table": "sim", "column": "throughput_vs_gpipe", "where": {"space": "cv.c1"}})
    assert judged(claim, {})["reason"] == "Not checkable here: sim.csv missing."
    row = judged(claim, {"sim": SIM})
    assert row["verdict"] == verdicts.NOT_CHECKABLE and "no row of sim.csv with [space=cv.c1]" in row["reason"]
    column = judged(one_claim(measure={"table": "sim", "column": "exec_s"}), {"sim": SIM})
    assert column["verdict"] == verdicts.NOT_CHECKABLE and "no column 'exec_s'" in column["reason"]
    many = judged(one_claim(measure={"table": "sim", "column": "bubble_ratio"}), {"sim": SIM})
    assert many["verdict"] == verdicts.NOT_CHECKABLE and "3 rows of sim.csv match" in many["reason"]


def test_a_ratio_of_two_measures():
    claim = one_claim(paper=6.5, measure={"table": "sim", "column": "throughput_samples_s", "where": {"system": "csp"}},
                      divide_by={"table": "sim", "column": "throughput_samples_s", "where": {"system": "pipedream"}})
    result = judged(claim, {"sim": SIM})
    assert result["ours"] == "6" and result["verdict"] == verdicts.REPRODUCED and "60 / 10" in result["reason"]
    zero = SIM.assign(throughput_samples_s=[60.0, 30.0, 0.0])
    assert "is zero" in judged(claim, {"sim": zero})["reason"]


def test_all_and_any_over_rows_and_distinct_values():
    table3 = pd.DataFrame({"system": ["csp", "csp", "gpipe", "gpipe"], "stages": [2, 4, 2, 4],
                           "identical_to_sequential": ["yes", "yes", "yes", "no"], "acc": [0.5, 0.5, 0.4, 0.3]})
    every = one_claim(paper=True, rule="is_true", measure={"table": "t3", "column": "identical_to_sequential",
                                                           "where": {"system": "csp"}, "reduce": "all"})
    assert judged(every, {"t3": table3})["verdict"] == verdicts.REPRODUCED
    assert judged(every, {"t3": table3.assign(identical_to_sequential=["yes", "no", "yes", "no"])})["verdict"] == \
        verdicts.NOT_REPRODUCED
    some = one_claim(paper=False, rule="is_false", measure={"table": "t3", "column": "identical_to_sequential",
                                                            "where": {"system": "gpipe"}, "reduce": "any"})
    result = judged(some, {"t3": table3})
    assert result["verdict"] == verdicts.REPRODUCED and "1 of 2 pass (stages=4: no)" in result["ours"]
    assert judged(some, {"t3": table3.assign(identical_to_sequential="yes")})["verdict"] == verdicts.NOT_REPRODUCED
    distinct = one_claim(paper=1, rule="absolute", tolerance=0,
                         measure={"table": "t3", "column": "acc", "where": {"system": ["csp"]}, "reduce": "distinct"})
    assert judged(distinct, {"t3": table3})["verdict"] == verdicts.REPRODUCED
    distinct["measure"]["where"]["system"] = ["gpipe"]
    assert judged(distinct, {"t3": table3})["verdict"] == verdicts.NOT_REPRODUCED


def test_a_reference_measure_replaces_the_papers_value():
    table4 = pd.DataFrame({"system": ["sequential", "csp", "csp", "gpipe"], "stages": [1, 2, 4, 4],
                           "access_order": ["3F-3B-6F-6B", "3F-3B-6F-6B", "3F-3B-6F-6B", "3F-6F-3B-6B"]})
    reference = {"table": "t4", "column": "access_order", "where": {"system": "sequential"}}
    same = one_claim(paper="2F-2B-5F-5B", rule="equal", reference=reference,
                     measure={"table": "t4", "column": "access_order", "where": {"system": "csp"}, "reduce": "all"})
    assert judged(same, {"t4": table4})["verdict"] == verdicts.REPRODUCED
    assert judged(same, {"t4": table4.drop(index=0)})["verdict"] == verdicts.NOT_CHECKABLE
    differs = copy.deepcopy(same)
    differs.update(rule="not_equal", measure={**same["measure"], "where": {"system": "gpipe"}, "reduce": "any"})
    assert judged(differs, {"t4": table4})["verdict"] == verdicts.REPRODUCED
    assert judged(differs, {"t4": table4.replace("3F-6F-3B-6B", "3F-3B-6F-6B")})["verdict"] == verdicts.NOT_REPRODUCED


def test_held_out_calibration_rows_and_a_damaged_contract_table():
    calibration = pd.DataFrame({"space_family": ["nlp", "cv", "cv"], "space": ["nlp.c1", "cv.c1", "cv.c2"],
                                "system": ["csp"] * 3, "batch": [192, 64, 64], "paper_exec_s": [1.13, 0.87, 0.86],
                                "predicted_exec_s": [1.1, 0.9, 0.95], "rel_error": [0.03, 0.04, 0.105],
                                "fitted_on": ["nlp", "nlp", "all"]})
    frame = checked("calibration", calibration, "calibration.csv")
    assert list(frame["held_out"]) == [False, True, False]
    claim = next(c for c in load_claims() if c.id == "exec-fit-held-out")
    assert evaluate_claim(claim, {"calibration": frame})["verdict"] == verdicts.REPRODUCED  # 0.04, not 0.105
    frame.loc[1, "rel_error"] = 0.12
    assert evaluate_claim(claim, {"calibration": frame})["verdict"] == verdicts.NOT_REPRODUCED
    with pytest.raises(UsageError, match=r"calibration\.csv: missing column 'rel_error'"):
        checked("calibration", calibration.drop(columns="rel_error"), "calibration.csv")


def test_the_package_ledger_on_no_tables_is_all_not_checkable():
    frame = evaluate(load_claims(), {})
    assert set(frame["verdict"]) == {verdicts.NOT_CHECKABLE}
    assert all(reason.startswith("Not checkable here: ") for reason in frame["reason"])
