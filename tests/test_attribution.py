"""Accounting presets, the attribution table's construction, and the unit-time bubble models."""

from __future__ import annotations

import pytest

from naspipe.cli import main
from naspipe.sim.accounting import preset, throughputs
from naspipe.sim.attribution import attribution_rows
from naspipe.sim.bubble_models import artifact_unit_bubble, even_bounds
from naspipe.sim.hardware import load_hardware


def test_the_artifact_preset_feeds_the_baselines_8_token_sentences_and_keeps_table2_batches():
    paper, artifact = preset("paper"), preset("artifact")
    assert [artifact.batch("nlp.c1", s) for s in ("csp", "gpipe", "pipedream", "vpipe")] == [192, 32, 16, 192]
    assert artifact.batch("nlp.c1", "csp-artifact") == paper.batch("nlp.c1", "csp") == 192
    assert artifact.space_options("nlp.c2", "gpipe") == {"seq_len": 8, "vocab": 10004}
    assert artifact.space_options("nlp.c2", "vpipe") == {"seq_len": 64, "vocab": 10004}
    assert artifact.space_options("nlp.c1", "csp-artifact") == {"seq_len": 64, "vocab": 33712}
    assert artifact.space_options("cv.c1", "gpipe") == {} == paper.space_options("nlp.c1", "gpipe")
    assert [a.tokens_per_sample("nlp.c1", "pipedream") for a in (paper, artifact)] == [64, 8]
    assert artifact.tokens_per_sample("cv.c2", "csp") == 1
    metrics = {"space": "nlp.c3", "system": "gpipe", "throughput_samples_s": 10.0}
    assert throughputs(metrics, paper) == {"samples_s": 10.0, "tokens_s": 640.0}
    assert throughputs(metrics, artifact) == {"samples_s": 10.0, "tokens_s": 80.0}


def test_an_unknown_preset_is_a_usage_error():
    from naspipe.errors import UsageError

    with pytest.raises(UsageError, match="--accounting 'x'"):
        preset("x")


@pytest.fixture(scope="module")
def cv_rows():
    base, fitted = load_hardware("rtx2080ti-pcie3-40gbe"), load_hardware("rtx2080ti-paper-fit")
    return attribution_rows("cv.c3", base, fitted, steps=8)


def test_attribution_applies_each_factor_once_and_cumulatively(cv_rows):
    assert [r["order"] for r in cv_rows] == [-1, 0, 1, 2, 3]
    assert [r["factor"] for r in cv_rows] == ["base-testbed", "paper-fit", "accounting", "relaxed-check", "stages"]
    assert [r["unit"] for r in cv_rows] == ["samples/s", "samples/s", "tokens/s", "tokens/s", "tokens/s"]
    for r in cv_rows:
        assert r["ratio"] == pytest.approx(r["csp_throughput"] / r["gpipe_throughput"])
    base, fit, acc, relaxed, stages = cv_rows
    assert fit["gpipe_throughput"] < base["gpipe_throughput"]  # the fitted fixed cost per task slows GPipe
    # CV: the artifact has no CV throughput script, so its accounting is the paper's (an image is a sample)
    assert (acc["csp_throughput"], acc["gpipe_throughput"]) == (fit["csp_throughput"], fit["gpipe_throughput"])
    assert relaxed["gpipe_throughput"] == acc["gpipe_throughput"]  # only NASPipe's check changed
    assert stages["gpipe_throughput"] != relaxed["gpipe_throughput"]  # both systems at 4 stages


def test_nlp_accounting_counts_each_systems_tokens():
    base, fitted = load_hardware("rtx2080ti-pcie3-40gbe"), load_hardware("rtx2080ti-paper-fit")
    rows = attribution_rows("nlp.c3", base, fitted, steps=8)
    fit, acc = rows[1], rows[2]
    # NASPipe: the same runs (the preset's sentences and dictionary are the artifact's), 64 tokens a sentence
    assert acc["csp_throughput"] == pytest.approx(64 * fit["csp_throughput"])
    # GPipe's 8-token sentences: 8 tokens a sample, and cheaper samples (same batch, same fixed costs)
    assert 8 * fit["gpipe_throughput"] < acc["gpipe_throughput"] < 64 * fit["gpipe_throughput"]


def identical(n: int, blocks: int = 8) -> list[tuple[int, ...]]:
    return [(0,) * blocks] * n


def disjoint(n: int, blocks: int = 8) -> list[tuple[int, ...]]:
    return [(y,) * blocks for y in range(n)]


@pytest.mark.parametrize("stages", [1, 2, 4, 8])
def test_artifact_unit_model_serialises_identical_subnets(stages):
    """Each subnet waits for the previous one's last backward on stage 0: 2D steps each, D x 2D slots."""
    assert artifact_unit_bubble(identical(12), stages) == pytest.approx(1 - 1 / stages)


def test_artifact_unit_model_overlaps_disjoint_subnets_and_respects_its_window():
    assert artifact_unit_bubble(disjoint(200), 1) == 0.0
    free = artifact_unit_bubble(disjoint(400), 4)
    assert free < 0.05  # only the fill and drain of a 4-stage pipe
    assert artifact_unit_bubble(disjoint(400), 4, window=2) > free + 0.2  # two subnets at a time
    assert even_bounds(32, 4) == [0, 8, 16, 24, 32] and even_bounds(48, 8)[1] == 6


@pytest.mark.parametrize(("command", "args", "expect"), [
    ("attribute", ["--spaces", "nlp.c9"], "nlp.c9"),
    ("attribute", ["--steps", "0"], "--steps 0"),
    ("attribute", ["--fitted", "nope"], "nope"),
    ("bubble-models", ["--subnets", "0"], "--subnets 0"),
    ("bubble-models", ["--spaces", ""], "--spaces"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, command, args, expect):
    out = tmp_path / "t.csv"
    assert main([command, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1 and not out.exists()


def test_the_commands_write_the_contracted_columns(tmp_path):
    import pandas as pd

    att, acc, bub = tmp_path / "attribution.csv", tmp_path / "accounting.csv", tmp_path / "bubble_models.csv"
    assert main(["attribute", "--spaces", "cv.c3", "--steps", "4", "--out", str(att), "--accounting-out",
                 str(acc)]) == 0
    assert main(["bubble-models", "--spaces", "cv.c3", "--subnets", "60", "--steps", "4", "--out", str(bub)]) == 0
    assert list(pd.read_csv(att).columns) == ["space", "order", "factor", "description", "csp_throughput",
                                              "gpipe_throughput", "ratio", "unit"]
    table = pd.read_csv(acc)
    assert list(table.columns) == ["space", "system", "accounting", "batch", "tokens_per_sample", "samples_s",
                                   "tokens_s"]
    assert len(table) == 8  # 4 systems x 2 presets
    bubbles = pd.read_csv(bub)
    assert list(bubbles.columns) == ["space", "model", "stages", "system", "bubble", "paper_bubble"]
    assert set(bubbles.model) == {"artifact-unit", "unit-time", "simulated"} and set(bubbles.stages) == {4, 8}
    assert bubbles.bubble.between(0, 1).all()
