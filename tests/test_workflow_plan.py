"""The catalog-layout workflow: it plans the jobs it planned before, and asks the package what it plans.

tests/workflow_dryrun.json holds, per config and rule, the job count and a digest of every job's files,
wildcards, resources and shell command, recorded on the workflow before it moved to workflow/ (then
a 611-line common.smk); a dry run today must plan exactly those jobs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.workflow_dryrun import digest, dry_run, paper_workdir

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "workflow_dryrun.json").read_text())
OTHERS_RULES = ("calibrate.smk", "download.smk")  # their bodies belong to the simulator and data owners

pytest.importorskip("snakemake")


@pytest.mark.parametrize("config", sorted(RECORDED))
def test_dry_run_plans_the_recorded_jobs(config: str) -> None:
    recorded = RECORDED[config]
    paper = "--paper" in recorded["args"]
    extra = [a for a in recorded["args"] if a != "--paper"]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = paper_workdir(ROOT / config, Path(tmp)) if paper else Path(tmp)
        planned = dry_run(ROOT / "workflow" / "Snakefile", ROOT / config, workdir, *extra)
    assert {rule: d["jobs"] for rule, d in digest(planned).items()} == {
        rule: d["jobs"] for rule, d in recorded["rules"].items()
    }
    changed = [rule for rule, d in digest(planned).items() if d != recorded["rules"][rule]]
    assert not changed, f"jobs of {changed} differ from the recorded plan (python tests/workflow_dryrun.py)"


def test_layout_follows_the_catalog() -> None:
    root = (ROOT / "Snakefile").read_text()
    assert 'workflow.include("workflow/Snakefile"' in root and "rule " not in root
    for name in ("workflow/Snakefile", "workflow/envs/naspipe.yaml", "workflow/report/workflow.rst",
                 "workflow/schemas/config.schema.yaml", ".test/config/config.yaml"):
        assert (ROOT / name).is_file(), name
    assert not (ROOT / "envs").exists() and not (ROOT / ".test" / "config.yaml").exists()
    assert "validate(config" in (ROOT / "workflow" / "Snakefile").read_text()
    env = (ROOT / "workflow" / "envs" / "naspipe.yaml").read_text()
    assert re.search(r"^\s*- -e \.\./\.\.", env, re.MULTILINE)  # the package itself, not only its dependencies


def test_rules_leave_decisions_and_paths_to_the_package() -> None:
    rules = sorted((ROOT / "workflow" / "rules").glob("*.smk"))
    assert len((ROOT / "workflow" / "rules" / "common.smk").read_text().splitlines()) < 200
    ours = [r for r in rules if r.name not in OTHERS_RULES]
    assert sum(r.read_text().count("results/") for r in ours) == 0, "paths come from naspipe.plan.paths"
    workflow_text = "".join(p.read_text() for p in [*rules, ROOT / "workflow" / "Snakefile"])
    assert "PYTHONPATH" not in workflow_text  # the package is installed in the environment
    for name in ("csp", "gpipe", "no-predictor", "synthetic-translation", "fig5_throughput"):
        assert f'"{name}"' not in workflow_text, name  # system, variant, data and report names are the package's


def test_report_outputs_are_what_the_report_builds() -> None:
    """The workflow's outputs of `report` (from naspipe.report.sections) against the sections built on no data."""
    from naspipe.report.inputs import ReportInputs
    from naspipe.report.section import Figure
    from naspipe.report.sections import build_sections, report_outputs

    sections = build_sections(ReportInputs(runs=[]))
    built = {f"results/tables/{s.name}.csv" for s in sections if not isinstance(s, Figure) or s.data is not None}
    built |= {f"results/tables/{s.name}.md" for s in sections if not isinstance(s, Figure)}
    built |= {f"results/figures/{s.name}.png" for s in sections if isinstance(s, Figure)}
    built |= {"results/tables/claims.csv", "results/tables/claims.md", "results/report.md"}
    assert {path for path, _, _ in report_outputs()} == built
    captions = ROOT / "workflow" / "report"
    assert all((captions / f"{caption}.rst").is_file() for _, caption, _ in report_outputs() if caption)


def test_lint_and_format_are_clean() -> None:
    from tests.test_workflow import BIN, snakemake

    lint = snakemake("--lint", "--configfile", str(ROOT / "config" / "config.yaml"))
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    if not (BIN / "snakefmt").exists():
        pytest.skip("snakefmt is not installed (pip install -e '.[workflow]')")
    fmt = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


BLOCK_EXTRAS = """
import sys
class Block:  # the optional dependencies are not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pandas", "seaborn", "matplotlib", "snakemake"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def test_core_runs_without_the_extras_and_a_command_needing_one_names_it(tmp_path: Path) -> None:
    core = "import naspipe.cli, naspipe.plan.workflow, naspipe.sim, naspipe.runtime.launch; print('ok')"
    done = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + core], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    report = ("from naspipe.cli import main; sys.exit(main(['report', '--runs', 'r', '--reproducibility', 'f.json',"
              f" '--out', {str(tmp_path / 'out')!r}]))")
    done = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + report], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "naspipe: error: report needs pandas: pip install 'naspipe[report]'"], done.stderr
    assert not (tmp_path / "out").exists()


def test_ablation_steps_shorten_only_the_ablation_runs() -> None:
    """`ablation.steps` sets the ablation runs' --steps and kept checkpoints; the grid keeps `steps`."""
    import yaml

    from naspipe.plan.jobs import ablation_jobs, train_jobs

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["ablation"]["steps"] = 128
    ablation, grid = ablation_jobs(config), train_jobs(config)
    assert ablation and {job.steps for job in ablation} == {128}
    assert all("keep_checkpoints=3" in job.sets for job in ablation)  # 128 / 64 + 1
    assert {job.steps for job in grid} == {config["steps"]}
    assert all(f"keep_checkpoints={config['steps'] // 64 + 1}" in job.sets for job in grid)
    del config["ablation"]["steps"]
    assert {job.steps for job in ablation_jobs(config)} == {config["steps"]}
