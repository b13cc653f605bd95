"""The published results (naspipe/published.py, ``naspipe published``): what is recorded of each run and table,
what is left out by name, and the verdict's sentence and divergence points."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from naspipe import published
from naspipe.rundigest import hash_of_hashes
from tests.conftest import run_cli


def _run(root: Path, name: str, losses: list[str]) -> Path:
    """A run the verifier accepts (naspipe.rundigest.verify_run): metrics.json, and weights that hash its layers."""
    run = root / name
    run.mkdir(parents=True)
    (run / "losses.csv").write_text("subnet,choices,loss_hex,loss\n" + "".join(f"{i},0,{x},0\n" for i, x in
                                                                          enumerate(losses)))
    (run / "metrics.json").write_text(json.dumps({"subnets": len(losses)}))
    (run / "weights.sha256").write_text(hash_of_hashes({}))
    (run / "layer_hashes.csv").write_text("layer,sha256\n")
    (run / "access_order.csv").write_text("timing-dependent\n")
    digest = {n: hashlib.sha256((run / n).read_bytes()).hexdigest() for n in published.RUN_FILES}
    (run / "outputs.sha256").write_text("".join(f"{d}  {n}\n" for n, d in digest.items()))
    return run


def _tree(root: Path, losses: list[str], table: str = "a,b\n1,2\n3,4\n") -> Path:
    _run(root, "runs/nlp.tiny/csp/D2-seed0", losses)
    _run(root, "runs/nlp.tiny/csp/D2-seed0/checkpoints/step-00000064", losses)  # not a run of its own
    _run(root, "retrain/.memo/x", losses)  # the memo store: copies, not runs
    (root / "tables").mkdir()
    (root / "tables" / "table3_reproducibility.csv").write_text(table)
    (root / "tables" / "table2_systems.csv").write_text("throughput\n1.0\n")  # timed: never published
    return root


def test_a_tree_records_its_runs_and_untimed_tables_only(tmp_path: Path) -> None:
    found = published.collect(_tree(tmp_path, ["0x1p+0"] * 70), {"steps": 70})
    assert list(found["runs"]) == ["runs/nlp.tiny/csp/D2-seed0"]
    assert list(found["tables"]) == ["tables/table3_reproducibility.csv"]
    run = found["runs"]["runs/nlp.tiny/csp/D2-seed0"]
    assert set(run["files"]) == set(published.RUN_FILES) and run["subnets"] == 70
    assert len(run["loss_prefixes"]) == 3  # subnets 0-31, 0-63, 0-69


def test_the_same_tree_reproduces_bit_for_bit(tmp_path: Path) -> None:
    expected = published.collect(_tree(tmp_path / "a", ["0x1p+0"] * 70), {"k": 1})
    found = published.collect(_tree(tmp_path / "b", ["0x1p+0"] * 70), {"k": 1})
    text = published.summary(published.compare(expected, found), published.config_differences(expected, found), "P")
    assert text.splitlines()[2] == ("Your run reproduces the published results bit for bit: 1 of 1 runs and 1 of 1 "
                                    "tables (P).")


def test_a_difference_says_where_it_first_diverges(tmp_path: Path) -> None:
    expected = published.collect(_tree(tmp_path / "a", ["0x1p+0"] * 70), {"k": 1})
    losses = ["0x1p+0"] * 40 + ["0x1.8p+0"] * 30
    found = published.collect(_tree(tmp_path / "b", losses, table="a,b\n1,2\n3,5\n"), {"k": 2})
    outcomes = published.compare(expected, found)
    assert [o.where for o in outcomes] == [
        "losses.csv differ; the losses first differ in subnets 32-63",
        "line 3 is the first that differs"]
    text = published.summary(outcomes, published.config_differences(expected, found), "P")
    assert "Your run reproduces 0 of 1 published runs and 0 of 1 tables bit for bit (P). These differ:" in text
    assert "config differs from the published one in: k." in text


def test_the_command_writes_the_verdict_and_this_trees_record(tmp_path: Path) -> None:
    results = _tree(tmp_path / "results", ["0x1p+0"] * 8)
    expected = tmp_path / "published.json"
    expected.write_text(json.dumps({"config": {}, "runs": {}, "tables": {}}))
    args = ["published", "--results", str(results), "--expected", str(expected), "--out", str(tmp_path / "p.md"),
            "--json", str(tmp_path / "p.json")]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Nothing is published yet")
    expected.write_text((tmp_path / "p.json").read_text())  # publishing this run
    again = run_cli(*args)
    assert again.stdout.strip() == ("Your run reproduces the published results bit for bit: 1 of 1 runs and 1 of 1 "
                                    "tables (published in " + str(expected) + ").")
    bad = run_cli("published", "--results", str(results), "--expected", str(tmp_path / "none.json"), "--out",
                  str(tmp_path / "q.md"), "--json", str(tmp_path / "q.json"))
    assert bad.returncode == 2 and bad.stderr.startswith("naspipe: error: --expected:")
    assert not (tmp_path / "q.md").exists()


def test_the_report_opens_with_the_verdict_once_however_often_it_is_checked(tmp_path: Path) -> None:
    """``--report``: results/report.md carries the verdict's sentence under its title (issue 40), replaced, not
    repeated, on every check; a report that cannot be read is one line and nothing is written."""
    results = _tree(tmp_path / "results", ["0x1p+0"] * 8)
    expected = tmp_path / "published.json"
    expected.write_text(json.dumps({"config": {}, "runs": {}, "tables": {}}))
    report = results / "report.md"
    report.write_text("# NASPipe results\n\n## Claims\n\ntext\n")
    args = ["published", "--results", str(results), "--expected", str(expected), "--out", str(results / "p.md"),
            "--json", str(results / "p.json"), "--report", str(report)]
    assert run_cli(*args).returncode == 0
    expected.write_text((results / "p.json").read_text())
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    lines = report.read_text().splitlines()
    assert lines[0] == "# NASPipe results" and lines[-3:] == ["## Claims", "", "text"]
    verdicts = [line for line in lines if line.startswith("**Published results.**")]
    assert verdicts == [f"**Published results.** {done.stdout.strip()} ([p.md](p.md))"]
    missing = run_cli(*args[:-1], str(tmp_path / "no-report.md"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--report" in missing.stderr
