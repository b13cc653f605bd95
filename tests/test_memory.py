"""A layer's size is known from its shapes alone, and a run whose layers cannot fit is refused up front."""

from __future__ import annotations

import itertools

import pytest
import torch

from naspipe.config import OptimizerConfig, load_config
from naspipe.errors import UsageError
from naspipe.runplan.job import build_job
from naspipe.runtime import memory
from naspipe.space import make_space


@pytest.mark.parametrize("name", ["toy", "nlp.tiny", "cv.tiny"])
def test_the_shape_estimate_is_the_built_layers_size(name):
    space = make_space(name)
    for layer in range(space.structure.num_layers):
        built = space.build_layer(layer, seed=0)
        tensors = list(itertools.chain(built.parameters(), built.buffers()))
        params = sum(p.numel() for p in built.parameters())
        assert space.layer_tensors(layer) == (params, sum(t.numel() * t.element_size() for t in tensors))


def test_a_layer_larger_than_memory_is_refused_naming_it(monkeypatch):
    job = build_job(load_config(None, ["space.vocab=100000"]))
    head = job.space.structure.num_layers - 1
    need = memory.training_bytes(job.space, job.config.optimizer, head)
    monkeypatch.setattr(memory, "available_memory", lambda device: (need - 1, "test"))
    with pytest.raises(UsageError, match=rf"layer {head} \(head\) needs about .* more than the .* available \(test\)"):
        memory.check_fits(job.space, job.config.optimizer, torch.device("cpu"), all_stages_here=False)


def test_the_whole_supernet_must_fit_when_every_stage_is_local(monkeypatch):
    job = build_job(load_config(None, []))
    optimizer = job.config.optimizer
    total = sum(memory.training_bytes(job.space, optimizer, layer) for layer in range(job.space.structure.num_layers))
    monkeypatch.setattr(memory, "available_memory", lambda device: (total - 1, "test"))
    memory.check_fits(job.space, optimizer, torch.device("cpu"), all_stages_here=False)  # each layer fits on its own
    with pytest.raises(UsageError, match=r"its 34 layers need about"):
        memory.check_fits(job.space, optimizer, torch.device("cpu"), all_stages_here=True)


def test_the_check_counts_the_optimizer_state_the_optimizer_keeps():
    job = build_job(load_config(None, []))
    trainable = next(lid for lid in range(job.space.structure.num_layers) if job.space.structure.is_trainable(lid))
    params, tensors = job.space.layer_tensors(trainable)
    per_slot = params * 4

    def need(**optimizer: object) -> int:
        return memory.training_bytes(job.space, OptimizerConfig(**optimizer), trainable)  # type: ignore[arg-type]

    assert need(name="sgd", momentum=0.0) == tensors + per_slot  # the gradient only
    assert need(name="sgd", momentum=0.9) == tensors + 2 * per_slot  # and the momentum buffer
    assert need(name="adam") == tensors + 3 * per_slot  # and Adam's two moments


def test_the_host_reports_some_available_memory():
    available, source = memory.available_memory(torch.device("cpu"))
    assert available is not None and available > 0, source
