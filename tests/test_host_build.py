"""A stage's layers built by worker processes are bitwise the layers built one by one here."""

from __future__ import annotations

import pytest

from naspipe.runtime.build import build_layers, default_workers
from naspipe.runtime.outputs import tensor_digest
from naspipe.space import make_space


def fingerprint(module):
    """Every tensor (non-persistent buffers too), its dtype and whether it trains."""
    params = [(n, tensor_digest({n: p.detach()}), p.requires_grad) for n, p in module.named_parameters()]
    buffers = [(n, tensor_digest({n: b})) for n, b in module.named_buffers()]
    return type(module).__name__, module.training, params, buffers


@pytest.mark.parametrize("name", ["nlp.tiny", "cv.tiny"])
def test_workers_build_the_very_bits_of_a_serial_build(name):
    space = make_space(name)
    ids = range(space.structure.num_layers)
    serial = build_layers(space, ids, seed=5, workers=1)
    parallel = build_layers(space, ids, seed=5, workers=2, min_params=0)
    assert list(parallel) == list(serial)
    for lid in serial:
        assert fingerprint(parallel[lid]) == fingerprint(serial[lid]), lid


def test_small_stages_build_here_and_workers_follow_the_cores():
    assert default_workers(1) >= default_workers(2) >= 1
    space = make_space("toy", {"blocks": 2})
    built = build_layers(space, [0, 1], seed=0, workers=8)  # far below the size a pool pays for itself
    assert sorted(built) == [0, 1]
