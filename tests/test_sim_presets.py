"""The paper-size presets have the paper's sizes, and the simulator handles them without tensors."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.space import make_space

PAPER_PARAMS = {"nlp.c1": 14.8e9, "nlp.c2": 10.8e9, "nlp.c3": 5.8e9, "cv.c1": 7.4e9, "cv.c2": 3.8e9, "cv.c3": 1.7e9}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_preset_matches_the_papers_supernet_size(name):
    space = make_space(name)
    total = sum(space.layer_tensors(lid)[0] for lid in range(space.structure.num_layers))
    assert abs(total / PAPER_PARAMS[name] - 1) <= 0.15, (name, total)


def test_simulating_nlp_c1_at_8_stages_allocates_nothing(tmp_path):
    """Its 16B parameters would need 64 GB; layers are sized on the meta device, so memory stays small."""
    import resource

    out = tmp_path / "c1"
    assert main(["simulate", "--space", "nlp.c1", "--system", "csp", "--stages", "8", "--steps", "16",
                 "--set", "cache.enabled=true", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["space"] == "nlp.c1" and metrics["host_bytes"] > 14e9 * 4
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 << 20  # KiB: under 4 GiB
