"""Figure 6 (ablations): variants are labelled by what is switched off and normalised to NASPipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from naspipe.report import fig6_ablation
from naspipe.report.inputs import ReportInputs
from naspipe.report.runinfo import RunInfo


def run(system: str, throughput: float, bubble: float, cache: dict | None = None, seed: int = 0,
        mode: str = "per-subnet") -> RunInfo:
    config = {"seed": seed, "cache": cache if cache is not None else {"enabled": True, "horizon": 8},
              "partition_mode": mode}
    metrics = {"system": system, "space": "toy", "stages": 4, "throughput_samples_s": throughput,
               "bubble_ratio": bubble, "config": config}
    return RunInfo(Path(f"/runs/{system}-{seed}"), metrics)


def test_variants_are_normalised_to_naspipe_with_the_median_over_seeds() -> None:
    inputs = ReportInputs(runs=[], ablations=[
        run("csp", 100.0, 0.3), run("csp", 120.0, 0.3, seed=1), run("csp", 110.0, 0.3, seed=2),
        run("csp-no-predictor", 55.0, 0.5), run("csp-no-scheduler", 22.0, 0.8),
        run("csp", 90.0, 0.4, cache={"enabled": True, "horizon": 0}), run("csp", 99.0, 0.35, mode="static"),
        run("csp", 70.0, 0.3, cache={"enabled": False}),
    ])
    frame = fig6_ablation.ablation_frame(inputs).set_index("variant")
    assert frame.loc["naspipe", "throughput"] == 110.0  # median of three seeds
    assert frame.loc["no-scheduler", "throughput_vs_naspipe"] == pytest.approx(0.2)
    # csp with horizon 0 is the no-predictor variant too: its median with csp-no-predictor's run
    assert frame.loc["no-predictor", "throughput"] == pytest.approx(72.5)
    assert frame.loc["no-mirroring", "throughput_vs_naspipe"] == pytest.approx(0.9)
    assert frame.loc["naspipe (no cache)", "throughput"] == 70.0
    figure = fig6_ablation.build(inputs)
    assert figure.png.startswith(b"\x89PNG") and "no-scheduler 22.0 samples/s (bubble 0.80)" in figure.reading


def test_no_ablation_runs_still_draws_and_says_so() -> None:
    figure = fig6_ablation.build(ReportInputs(runs=[]))
    assert figure.png.startswith(b"\x89PNG") and "No ablation runs" in figure.reading
