"""A cache budget too small for the run is refused before any stage starts (issue 41, item 6): one line at any
stage count, from the layers' sizes that the plan computes without building them, which are the bytes the
stages' context managers count once the layers are built."""

from __future__ import annotations

from pathlib import Path

import pytest

from naspipe import cli
from naspipe.config import load_config
from naspipe.runplan.job import build_job, build_space
from naspipe.runtime.context import layer_bytes
from naspipe.runtime.memory import training_bytes


@pytest.mark.parametrize(("space", "settings", "words"), [
    ("nlp.tiny", ("cache.budget=1x", "micro_batches=2"), "below two subnets' share of stage 0"),
    ("cv.tiny", ("cache.budget=2000",), "2000 bytes is below one subnet's share of stage 0"),
])
def test_a_budget_below_the_rule_is_one_line_before_any_stage_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], space: str, settings: tuple[str, ...], words: str) -> None:
    sets = [arg for s in ("cache.enabled=true", *settings) for arg in ("--set", s)]
    out = tmp_path / "run"
    code = cli.main(["train", "--space", space, "--system", "csp", "--stages", "2", "--steps", "4", *sets,
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no DIR, no DIR.partial


@pytest.mark.parametrize(("space", "optimizer", "shared"), [
    ("nlp.tiny", "adam", "frozen"), ("cv.tiny", "sgd", "windowed"), ("toy", "adam", "causal")])
def test_the_start_up_sizes_are_the_built_layers_device_bytes(space: str, optimizer: str, shared: str) -> None:
    config = load_config(None, [f"optimizer.name={optimizer}", f"shared_policy={shared}"],
                         {"system": "csp", "stages": 2, "steps": 4, "space.name": space})
    job = build_job(config, build_space(config))
    for lid in range(job.space.structure.num_layers):
        built = layer_bytes(job.space.build_layer(lid, config.seed), config.optimizer)
        assert max(1, training_bytes(job.space, config.optimizer, lid) - job.space.unmoved_bytes(lid)) == built, lid
