"""``naspipe claims`` on a results tree of fixture tables, and the claims section opening ``report.md``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from naspipe.claims import verdicts
from naspipe.cli import main as cli_main


def write_tree(root: Path) -> Path:
    """A results tree: simulated Table 2 at 8 GPUs, Table 3, and the simulator's three contract tables."""
    tables = root / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame([
        {"hardware": "rtx2080ti-pcie3-40gbe", "space": "nlp.c1", "system": s, "stages": 8, "batch": b, "fits": True,
         "host_gb": h,
         "exec_s": e, "bubble_ratio": bub, "cache_hit_rate": c, "throughput_samples_s": t,
         "throughput_vs_gpipe": t / 40.0}
        for s, b, h, e, bub, c, t in [("csp", 192, 57.0, 1.2, 0.72, 0.88, 16.0),
                                      ("gpipe", 32, 0.0, 0.5, 0.6, 1.0, 40.0),
                                      ("vpipe", 192, 58.0, 1.3, 0.6, 0.02, 15.0)]
    ]).to_csv(tables / "sim_table2_systems.csv", index=False)
    pd.DataFrame({"space": ["nlp.tiny"] * 3, "system": ["csp", "csp", "gpipe"], "stages": [2, 4, 4],
                  "identical_to_sequential": ["yes", "yes", "no"], "final_loss": [3.1, 3.1, 3.3],
                  "search_accuracy": [0.4, 0.4, 0.3]}).to_csv(tables / "table3_reproducibility.csv", index=False)
    pd.DataFrame({"space_family": ["nlp", "cv"], "space": ["nlp.c1", "cv.c1"], "system": ["csp", "csp"],
                  "batch": [192, 64], "paper_exec_s": [1.13, 0.87], "predicted_exec_s": [1.12, 0.91],
                  "rel_error": [0.01, 0.046], "fitted_on": ["cv", "nlp"]}).to_csv(
                      tables / "calibration.csv", index=False)
    pd.DataFrame({"space": ["nlp.c1"] * 2, "order": [0, 1], "factor": ["full csp", "all factors"],
                  "description": ["", ""], "csp_throughput": [16.0, 70.0], "gpipe_throughput": [40.0, 10.0],
                  "ratio": [0.4, 7.0], "unit": ["samples/s", "tokens/s"]}).to_csv(
                      tables / "attribution.csv", index=False)
    pd.DataFrame({"space": ["nlp.c1"] * 2, "model": ["unit-time", "unit-time"], "stages": [4, 8],
                  "system": ["csp", "csp"], "bubble": [0.41, 0.8],
                  "paper_bubble": [0.39, 0.39]}).to_csv(tables / "bubble_models.csv", index=False)
    return root


def test_claims_reads_the_tree_and_writes_the_table(tmp_path, capsys):
    root = write_tree(tmp_path / "results")
    assert cli_main(["claims", "--results", str(root)]) == 0
    assert "claims:" in capsys.readouterr().out
    frame = pd.read_csv(root / "tables" / "claims.csv", dtype=str, keep_default_na=False).set_index("id")
    assert len(frame) >= 25 and set(frame["verdict"]) <= set(verdicts.VERDICTS)
    verdict = frame["verdict"]
    assert verdict["repro-csp"] == verdicts.REPRODUCED and verdict["repro-bsp"] == verdicts.REPRODUCED
    assert verdict["fig5-nlp-c1-gpipe"] == verdicts.ARTIFACT_ONLY  # 0.4x ours, 7.0x with every artifact factor
    assert verdict["speedup-nlp-c1-fitted"] == verdicts.ARTIFACT_ONLY
    assert frame.at["speedup-nlp-c1-fitted", "ours"] == "0.4"
    assert verdict["bubble-nlp-c1-csp"] == verdicts.ARTIFACT_ONLY
    assert "stages=4: 0.41" in frame.at["bubble-nlp-c1-csp", "artifact"]
    assert verdict["exec-fit-held-out"] == verdicts.REPRODUCED and frame.at["exec-fit-held-out", "ours"] == "0.046"
    assert verdict["batch-nlp-c1-csp"] == verdicts.REPRODUCED
    assert verdict["exec-csp-vs-vpipe"] == verdicts.REPRODUCED  # 1.2 / 1.3 < 1
    assert verdict["order-csp"] == verdicts.NOT_CHECKABLE
    assert frame.at["order-csp", "reason"] == "Not checkable here: table4_access_order.csv missing."
    markdown = (root / "tables" / "claims.md").read_text()
    assert markdown.startswith("# The paper's claims, checked") and "| `repro-csp` |" in markdown


def test_a_damaged_table_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    root = write_tree(tmp_path / "results")
    pd.read_csv(root / "tables" / "attribution.csv").drop(columns="ratio").to_csv(
        root / "tables" / "attribution.csv", index=False)
    assert cli_main(["claims", "--results", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("naspipe: error:") and "attribution.csv: missing column 'ratio'" in err and "\n" not in err
    assert not (root / "tables" / "claims.csv").exists()
    assert cli_main(["claims", "--results", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text("claims:\n  - id: x\n")
    assert cli_main(["claims", "--results", str(write_tree(tmp_path / "r2")), "--claims", str(ledger)]) == 2
    assert "claims file" in capsys.readouterr().err and not (tmp_path / "r2" / "tables" / "claims.csv").exists()


def test_report_md_opens_with_the_claims_section():
    from naspipe.claims.ledger import load_claims
    from naspipe.report.claims import build
    from naspipe.report.document import render_report
    from naspipe.report.inputs import ReportInputs
    from naspipe.report.section import Table

    other = Table("table1_spaces", "Table 1: search spaces", pd.DataFrame({"space": ["toy"]}), "One space.")
    claims = build(load_claims(), {})
    text = render_report(ReportInputs(runs=[]), [other, claims])
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The paper's claims, checked"
    assert headings.index("## Table 1: search spaces") > 0
    assert f"{len(claims.frame)} claims of the paper" in text


@pytest.mark.parametrize("name", ["claims.yaml", "claims.schema.json"])
def test_the_ledger_ships_as_package_data(name):
    from importlib import resources

    assert resources.files("naspipe.claims").joinpath(name).is_file()
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"naspipe.claims" = ["*.yaml", "*.json"' in pyproject
