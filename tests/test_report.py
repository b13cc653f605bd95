"""``naspipe reproducibility`` and ``naspipe report`` on a few tiny real runs.

The fixture trains a toy space on a stream where subnets share layers (the settings of
tests/test_baselines_runtime.py): sequential D=1 and csp D=2 through ``naspipe train``
in-process (csp with a partition file from ``naspipe partition``), gpipe D=2 and D=3 with the
threaded stage workers, plus a tiny profile. Then the verdicts and the report are checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from naspipe.cli import main as cli_main
from naspipe.report.fig4_loss import step_times
from naspipe.report.runinfo import read_run_info
from tests.baselines_harness import SMALL, config_of, run_threads

STEPS = 8
SPACE_SETS = [a for s in SMALL if s.startswith("space.") for a in ("--set", s)]
TABLES = ("table1_spaces", "table2_systems", "table3_reproducibility", "table4_access_order", "table5_profile")
FIGURES = ("fig4_loss_vs_time", "fig5_throughput", "fig6_ablation", "fig7_scaling")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report-runs")
    out = {name: root / name for name in ("seq", "csp2", "gpipe2", "gpipe3")}
    train = ["train", "--space", "toy", "--steps", str(STEPS), *SPACE_SETS]
    assert cli_main([*train, "--system", "sequential", "--stages", "1", "--out", str(out["seq"])]) == 0
    part = root / "D2.json"
    assert cli_main(["partition", "--space", "toy", *SPACE_SETS, "--stages", "2", "--out", str(part)]) == 0
    assert (
        cli_main(
            [*train, "--system", "csp", "--stages", "2", "--set", f"partition_file={part}", "--out", str(out["csp2"])]
        )
        == 0
    )
    run_threads(config_of("gpipe", 2, STEPS), out["gpipe2"])
    run_threads(config_of("gpipe", 3, STEPS), out["gpipe3"])
    out["profile"] = root / "toy.csv"
    assert (
        cli_main(
            [
                "profile",
                "--space",
                "toy",
                *SPACE_SETS,
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--quiet",
                "--out",
                str(out["profile"]),
            ]
        )
        == 0
    )
    for system, dirs in (("csp", ["csp2"]), ("gpipe", ["gpipe2", "gpipe3"])):
        out[f"repro-{system}"] = root / f"{system}.json"
        assert (
            cli_main(
                ["reproducibility", str(out["seq"]), *(str(out[d]) for d in dirs), "--out", str(out[f"repro-{system}"])]
            )
            == 0
        )  # exit 0 whatever the verdict
    return out


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results")
    assert cli_main(report_args(runs, out)) == 0
    return out


def report_args(runs: dict[str, Path], out: Path) -> list[str]:
    return [
        "report",
        "--runs",
        *(str(runs[d]) for d in ("seq", "csp2", "gpipe2")),
        "--runs",
        str(runs["gpipe3"]),
        "--reproducibility",
        str(runs["repro-csp"]),
        "--reproducibility",
        str(runs["repro-gpipe"]),
        "--profile",
        f"toy={runs['profile']}",
        "--out",
        str(out),
    ]


def test_reproducibility_says_csp_is_identical_and_gpipe_is_not(runs):
    csp = json.loads(runs["repro-csp"].read_text())
    assert csp["identical_all"] is True and csp["system"] == "csp" and csp["space"] == "toy" and csp["seed"] == 0
    [entry] = csp["runs"]
    assert entry["identical"] is True and entry["first_divergence"] is None and entry["stages"] == 2
    reference_loss = float(pd.read_csv(runs["seq"] / "losses.csv")["loss_hex"].map(float.fromhex).iloc[-1])
    assert entry["final_loss"] == reference_loss
    gpipe = json.loads(runs["repro-gpipe"].read_text())
    assert gpipe["identical_all"] is False and [e["stages"] for e in gpipe["runs"]] == [2, 3]
    for e in gpipe["runs"]:
        assert e["identical"] is False
        assert isinstance(e["first_divergence"]["step"], int) and e["first_divergence"]["layers"]
    assert gpipe["runs"][0]["weights_sha256"] != gpipe["runs"][1]["weights_sha256"]


def test_partition_file_run_records_the_file_bounds(runs):
    bounds = json.loads((runs["seq"].parent / "D2.json").read_text())["bounds"]
    metrics = json.loads((runs["csp2"] / "metrics.json").read_text())
    assert metrics["partition"] == f"{bounds[1]}|{bounds[2] - bounds[1]}"


def test_report_writes_every_file_with_parsable_tables(report):
    for name in TABLES:
        frame = pd.read_csv(report / "tables" / f"{name}.csv")
        assert not frame.empty, name
        assert (report / "tables" / f"{name}.md").read_text().startswith("# Table")
    table2 = pd.read_csv(report / "tables" / "table2_systems.csv")
    assert set(zip(table2["system"], table2["stages"], strict=True)) == {
        ("sequential", 1),
        ("csp", 2),
        ("gpipe", 2),
        ("gpipe", 3),
    }
    gpipe2 = table2[(table2["system"] == "gpipe") & (table2["stages"] == 2)]
    assert gpipe2["throughput_vs_gpipe"].iloc[0] == 1.0
    table3 = pd.read_csv(report / "tables" / "table3_reproducibility.csv", dtype=str)
    verdicts = dict(zip(table3["system"] + table3["stages"], table3["identical_to_sequential"], strict=True))
    assert verdicts == {"csp2": "yes", "gpipe2": "no", "gpipe3": "no"}
    table4 = pd.read_csv(report / "tables" / "table4_access_order.csv")
    assert table4["layer"].nunique() == 1 and len(table4) == 4
    orders = dict(zip(table4["system"] + table4["stages"].astype(str), table4["access_order"], strict=True))
    assert orders["csp2"] == orders["sequential1"] != orders["gpipe2"]


def test_report_figures_are_real_images(report):
    for name in FIGURES:
        with Image.open(report / "figures" / f"{name}.png") as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 300
            colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
            assert colours is None or len(colours) > 50, f"{name} looks blank"


def test_report_md_links_everything_and_reads_the_numbers(report):
    text = (report / "report.md").read_text()
    for name in FIGURES:
        assert f"](figures/{name}.png)" in text
    for name in TABLES:
        assert f"(tables/{name}.csv)" in text
    assert "measured on this machine" in text.lower() and "cpu" in text
    assert "`toy` csp: identical to sequential at D=2." in text
    assert "identical at every stage count: csp (D=2); differing in at least one run: gpipe." in text
    assert "`toy` gpipe: differs from sequential in 2 of 2 runs (D=2, D=3), with 2 different weights" in text
    ratio = pd.read_csv(report / "tables" / "table2_systems.csv").set_index(["system", "stages"])
    assert f"at D=2, CSP runs at {ratio.at[('csp', 2), 'throughput_vs_gpipe']:.2f}x GPipe's throughput" in text


def test_report_is_byte_for_byte_deterministic(runs, report, tmp_path):
    assert cli_main(report_args(runs, tmp_path)) == 0
    for path in report.rglob("*"):
        if path.is_file():
            assert (tmp_path / path.relative_to(report)).read_bytes() == path.read_bytes(), path


def test_tables_without_rows_are_still_written_and_say_so(runs, tmp_path):
    assert cli_main(["report", "--runs", str(runs["seq"]), "--out", str(tmp_path)]) == 0
    for name in TABLES:
        assert (tmp_path / "tables" / f"{name}.csv").is_file()
    assert "No rows" in (tmp_path / "tables" / "table3_reproducibility.md").read_text()
    assert "No rows" in (tmp_path / "tables" / "table5_profile.md").read_text()
    assert all((tmp_path / "figures" / f"{name}.png").is_file() for name in FIGURES)


def test_step_times_fall_back_to_the_makespan_without_a_trace(runs, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(runs["gpipe2"], copy)
    info = read_run_info(copy)
    events = json.loads((copy / "trace.json").read_text())["traceEvents"]
    last = {
        e["args"]["subnet"]: (e["ts"] + e["dur"]) / 1e6
        for e in events
        if e.get("cat") == "forward" and e.get("tid") == info.stages - 1
    }
    assert step_times(info, list(range(STEPS))) == {y: last[y] for y in range(STEPS)}
    (copy / "trace.json").write_text('{"traceEvents": []}')
    info = read_run_info(copy)
    fallback = step_times(info, list(range(STEPS)))
    per_step = info.metrics["makespan_s"] / info.metrics["subnets"]
    assert fallback == {y: (y + 1) * per_step for y in range(STEPS)}


def test_bad_input_is_one_line_exit_2_and_writes_nothing(runs, tmp_path, capsys):
    malformed = tmp_path / "malformed"
    shutil.copytree(runs["seq"], malformed)
    (malformed / "metrics.json").write_text("{not json")
    no_system = tmp_path / "no-system"
    shutil.copytree(runs["seq"], no_system)
    metrics = json.loads((no_system / "metrics.json").read_text())
    del metrics["system"]
    (no_system / "metrics.json").write_text(json.dumps(metrics))
    good = ["--runs", str(runs["seq"])]
    cases = [
        (["--runs", str(tmp_path / "missing")], "not found"),
        (["--runs", str(malformed)], "not valid JSON"),
        (["--runs", str(no_system)], "missing field 'system'"),
        ([*good, "--profile", "toy"], "expected SPACE=FILE.csv"),
        ([*good, "--profile", f"toy={tmp_path / 'nope.csv'}"], "is not a file"),
        ([*good, "--profile", f"toy={runs['seq'] / 'losses.csv'}"], "not a profile CSV"),
        ([*good, "--reproducibility", str(runs["seq"] / "metrics.json")], "expected an object with 'space'"),
    ]
    for args, why in cases:
        out = tmp_path / "results"
        assert cli_main(["report", *args, "--out", str(out)]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("naspipe: error:") and why in err and "\n" not in err, err
        assert not out.exists()
    out = tmp_path / "repro.json"
    assert cli_main(["reproducibility", str(runs["seq"]), str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert not out.exists()


def test_table2_takes_the_median_over_seeds(runs, tmp_path):
    from naspipe.report.inputs import load_inputs
    from naspipe.report.table2_systems import system_frame

    seeds = []
    for seed, factor in ((1, 2.0), (2, 4.0)):
        copy = tmp_path / f"seed{seed}"
        shutil.copytree(runs["gpipe2"], copy)
        metrics = json.loads((copy / "metrics.json").read_text())
        metrics["config"]["seed"] = seed
        metrics["throughput_samples_s"] *= factor
        (copy / "metrics.json").write_text(json.dumps(metrics))
        seeds.append(copy)
    frame = system_frame(load_inputs([runs["csp2"], runs["gpipe2"], *seeds], [], []))
    gpipe = frame[frame["system"] == "gpipe"].iloc[0]
    base = json.loads((runs["gpipe2"] / "metrics.json").read_text())["throughput_samples_s"]
    assert gpipe["seeds"] == 3 and gpipe["throughput_samples_s"] == pytest.approx(2.0 * base)
    csp = frame[frame["system"] == "csp"].iloc[0]
    assert csp["throughput_vs_gpipe"] == pytest.approx(csp["throughput_samples_s"] / (2.0 * base))


def test_table1_parameter_counts_match_built_layers():
    from naspipe.report.table1_spaces import space_row
    from naspipe.space import make_space

    options = {s.split("=")[0].removeprefix("space."): int(s.split("=")[1]) for s in SMALL if s.startswith("space.")}
    space = make_space("toy", options)
    s = space.structure
    params = [space.layer_cost(i) - 1 for i in range(s.num_layers)]
    row = space_row("toy", options, "frozen")
    assert row["supernet_params"] == sum(params) and row["layers"] == s.num_layers and row["blocks"] == len(s.blocks)
    shared = sum(params[i] for i in range(s.num_layers) if s.is_shared(i))
    blocks = sum(sum(params[s.layer_id(b, c)] for c in range(n)) / n for b, n in enumerate(s.choices_per_block))
    assert row["mean_subnet_params"] == round(shared + blocks)
