"""The simulated Table 2 and Figures 5 and 7 from ``naspipe simulate`` runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from naspipe.cli import main
from naspipe.errors import UsageError
from naspipe.report import sim_fig5, sim_fig7, sim_gpus, sim_table2
from naspipe.report.inputs import ReportInputs, load_inputs
from naspipe.report.runinfo import read_run_info


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("sims")
    dirs = []
    for system in ("csp", "gpipe"):
        for stages in (2, 4):
            out = root / f"{system}-D{stages}"
            assert main(["simulate", "--system", system, "--stages", str(stages), "--steps", "8", "--batch", "max",
                         "--set", "space.blocks=6", "--out", str(out)]) == 0
            dirs.append(out)
    return dirs


def test_simulated_sections_name_the_hardware_and_normalise_by_gpipe(sims):
    inputs = ReportInputs(runs=[], simulated=[read_run_info(p) for p in sims])
    table = sim_table2.build(inputs)
    frame = table.frame
    assert len(frame) == 4 and set(frame["hardware"]) == {"rtx2080ti-pcie3-40gbe"}
    assert "simulated on rtx2080ti-pcie3-40gbe" in table.title
    assert (frame.loc[frame["system"] == "gpipe", "throughput_vs_gpipe"] == 1.0).all()
    assert (frame["batch"] == frame["max_batch"]).all()
    for section in (sim_fig5.build(inputs), sim_fig7.build(inputs)):
        assert section.png.startswith(b"\x89PNG") and "simulated" in section.title.lower()


def test_simulated_sections_without_runs_say_so():
    empty = ReportInputs(runs=[])
    assert sim_table2.build(empty).frame.empty
    fig5, fig7 = sim_fig5.build(empty), sim_fig7.build(empty)
    assert "No simulated" in fig5.reading and "No simulated" in fig7.reading
    assert fig5.png.startswith(b"\x89PNG") and fig7.png.startswith(b"\x89PNG")


def test_a_trained_run_is_not_accepted_as_simulated(sims, tmp_path):
    import json

    fake = tmp_path / "trained"
    fake.mkdir()
    metrics = json.loads((sims[0] / "metrics.json").read_text())
    del metrics["simulated"]
    (fake / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(UsageError, match="not a 'naspipe simulate' run"):
        load_inputs([], [], [], simulated=[fake])


def test_a_micro_batched_schedule_and_a_second_hardware_sit_beside_the_paper_schedule(sims, tmp_path):
    """csp-mb rows next to csp in Table 2, one Figure 7 facet pair per hardware, Figure 5 on the testbed."""
    extra = []
    for hardware, sets in (("h100-nvlink-ib", []), ("rtx2080ti-pcie3-40gbe", ["--set", "micro_batches=2",
                                                                           "--set", "split_backward=true"])):
        out = tmp_path / f"{hardware}-{len(sets)}"
        assert main(["simulate", "--system", "csp", "--stages", "2", "--steps", "8", "--batch", "max", "--hardware",
                     hardware, "--set", "space.blocks=6", *sets, "--out", str(out)]) == 0
        extra.append(out)
    inputs = ReportInputs(runs=[], simulated=[read_run_info(p) for p in [*sims, *extra]])
    frame = sim_table2.build(inputs).frame
    testbed = frame[frame["hardware"] == "rtx2080ti-pcie3-40gbe"]
    assert list(testbed.loc[testbed["stages"] == 2, "system"]) == ["csp", "csp-mb", "gpipe"]
    assert set(frame["hardware"]) == {"rtx2080ti-pcie3-40gbe", "h100-nvlink-ib"}
    assert int(frame.loc[frame["system"] == "csp-mb", "micro_batches"].iloc[0]) == 2
    fig7 = sim_fig7.build(inputs)  # one stage count on h100 and for csp-mb: nothing to scale there
    assert fig7.png.startswith(b"\x89PNG") and "`toy` csp on rtx2080ti-pcie3-40gbe: D=2 to D=4" in fig7.reading
    assert "h100" not in fig7.reading and "csp-mb" not in fig7.reading
    assert sim_fig5.build(inputs).png.startswith(b"\x89PNG")


def test_runs_on_a_gpu_count_make_their_own_table_and_a_line_of_the_scaling_figure(sims, tmp_path):
    """``simulate.gpus``'s runs (``--gpus G``): csp-mb in its chosen layout per GPU count, beside csp-mb and
    PipeDream on as many stages; kept out of the stage-count table, drawn on the scaling figure's GPU axis."""
    layouts = []
    for gpus in (2, 4):
        out = tmp_path / f"G{gpus}"
        assert main(["simulate", "--system", "csp-mb", "--gpus", str(gpus), "--steps", "8", "--batch", "max",
                     "--set", "space.blocks=6", "--out", str(out)]) == 0
        layouts.append(out)
    staged = tmp_path / "csp-mb-D4"
    assert main(["simulate", "--system", "csp-mb", "--stages", "4", "--steps", "8", "--batch", "max",
                 "--set", "space.blocks=6", "--out", str(staged)]) == 0
    inputs = ReportInputs(runs=[], simulated=[read_run_info(p) for p in [*sims, staged, *layouts]])
    assert len(sim_table2.build(inputs).frame) == 5  # the stage-count runs only
    table = sim_gpus.build(inputs)
    frame = table.frame
    assert list(frame["gpus"]) == [2, 4] and (frame["stages"] * frame["replicas"] == frame["gpus"]).all()
    assert frame["vs_fewest_gpus"].iloc[0] == 1.0 and frame["layouts_tried"].str.contains("x").all()
    four = frame[frame["gpus"] == 4].iloc[0]
    assert four["stages_only_samples_s"] > 0 and pd.isna(four["pipedream_samples_s"])
    assert "2 to 4 GPUs scale" in table.reading
    figure = sim_fig7.build(inputs)
    assert figure.png.startswith(b"\x89PNG") and "csp-mb (stages x replicas)" in figure.reading
    assert sim_gpus.build(ReportInputs(runs=[])).frame.empty
