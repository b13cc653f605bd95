"""The AmoebaNet style CV space: structure, ops, batch norm once per step, seeding, learning."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from naspipe.space import make_space, space_names
from naspipe.space.base import LayerContext
from naspipe.space.ops.common import BatchNorm
from naspipe.space.ops.vision import IMAGE_OPS
from naspipe.subnet import Subnet
from tests.conftest import forbid_module_construction

ALL_OPS = {"candidates": 10}


def ctx(layer: int, recompute: bool = False, subnet: int = 2) -> LayerContext:
    return LayerContext(seed=4, subnet=subnet, layer=layer, recompute=recompute)


def test_presets_registered_with_paper_sizes():
    names = space_names()
    for name, candidates in (("cv.c1", 48), ("cv.c2", 24), ("cv.c3", 12)):
        assert name in names
        s = make_space(name).structure
        assert len(s.blocks) == 32 and s.choices_per_block == (candidates,) * 32
        assert s.prefix == ("stem",) and s.suffix == ("classifier",)
        assert {op.removeprefix("reduce.") for op in s.blocks[0]} == set(IMAGE_OPS)
    tiny = make_space("cv.tiny")
    assert tiny.structure.num_positions >= 6
    assert len(IMAGE_OPS) == len(set(IMAGE_OPS)) == 10


@pytest.mark.parametrize(
    "options",
    [
        ALL_OPS,
        {**ALL_OPS, "image_size": 19, "stem_stride": 2, "reductions": 2, "channels": 6},  # odd sizes
        {**ALL_OPS, "reductions": 0},
    ],
)
def test_every_op_shapes(options):
    space = make_space("cv.tiny", options)
    o, s = space.options, space.structure
    (x,) = space.batch(0, seed=1).inputs
    assert x.shape == (o["batch_size"], 3, o["image_size"], o["image_size"]) and x.dtype == torch.float32
    (state,) = space.build_layer(0, 3)((x,), ctx(0))
    for block in range(len(s.blocks)):
        c_in, c_out, stride, size = space.block_shape(block)
        assert state.shape == (o["batch_size"], c_in, size, size)
        outs = []
        for c in range(len(s.blocks[block])):
            lid = s.layer_id(block, c)
            (y,) = space.build_layer(lid, 3)((state,), ctx(lid))
            expect = (o["batch_size"], c_out, -(-size // stride), -(-size // stride))
            assert y.shape == expect, (s.op_name(lid), y.shape, expect)
            assert torch.isfinite(y).all()
            outs.append(y)
        state = outs[0]
    head = s.num_layers - 1
    (logits,) = space.build_layer(head, 3)((state,), ctx(head))
    assert logits.shape == (o["batch_size"], o["classes"])
    if o["reductions"]:
        assert any(op.startswith("reduce.") for block in s.blocks for op in block)


def _conv_layer(space):
    lid = space.structure.layer_id(0, IMAGE_OPS.index("conv3x3"))
    return lid, space.build_layer(lid, 3)


def test_batch_norm_updates_running_stats_exactly_once_per_step():
    space = make_space("cv.tiny", ALL_OPS)
    (x,) = space.build_layer(0, 3)(space.batch(0, seed=1).inputs, ctx(0))
    x = x.detach()
    lid, layer = _conv_layer(space)
    pristine = copy.deepcopy(layer)
    bn: BatchNorm = layer.op.bn

    # forward task (no grad), then backward task (recompute forward with grad + backward)
    with torch.no_grad():
        first = layer((x,), ctx(lid))
    leaf = x.clone().requires_grad_(True)
    again = layer((leaf,), ctx(lid, recompute=True))
    again[0].sum().backward()
    assert torch.equal(first[0], again[0])  # recompute reproduces the forward bitwise
    assert int(bn.num_batches_tracked) == 1
    assert leaf.grad is not None and layer.op.conv.weight.grad is not None

    # reference: one plain nn.BatchNorm2d training step on the same pre-norm activation
    ref = nn.BatchNorm2d(bn.running_mean.numel(), momentum=bn.momentum, eps=bn.eps)
    with torch.no_grad():
        ref(pristine.op.conv(F.relu(x)))
    assert torch.equal(bn.running_mean, ref.running_mean)
    assert torch.equal(bn.running_var, ref.running_var)
    assert not torch.equal(bn.running_mean, pristine.op.bn.running_mean)

    # more recomputes change nothing; a second real step does
    before = bn.running_mean.clone()
    layer((x,), ctx(lid, recompute=True))
    assert torch.equal(bn.running_mean, before)
    layer((x * 2 + 1,), ctx(lid))
    assert not torch.equal(bn.running_mean, before) and int(bn.num_batches_tracked) == 2


def test_batch_norm_without_recompute_updates_once():
    space = make_space("cv.tiny", ALL_OPS)
    (x,) = space.build_layer(0, 3)(space.batch(0, seed=1).inputs, ctx(0))
    lid, layer = _conv_layer(space)
    twin = copy.deepcopy(layer)
    out = layer((x.detach().requires_grad_(),), ctx(lid))  # forward with grad, no recompute later
    out[0].sum().backward()
    with torch.no_grad():
        twin((x,), ctx(lid))
    assert torch.equal(layer.op.bn.running_var, twin.op.bn.running_var)


def test_eval_mode_uses_running_statistics():
    space = make_space("cv.tiny", ALL_OPS)
    (x,) = space.build_layer(0, 3)(space.batch(0, seed=1).inputs, ctx(0))
    lid, layer = _conv_layer(space)
    layer.eval()
    stats = layer.op.bn.running_mean.clone()
    with torch.no_grad():
        a = layer((x,), ctx(lid))[0]
        b = layer((x[:2],), ctx(lid))[0]
    assert torch.equal(layer.op.bn.running_mean, stats)
    torch.testing.assert_close(a[:2], b)  # per-sample: no batch statistics


def test_every_op_forward_and_recompute_agree():
    space = make_space("cv.tiny", {**ALL_OPS, "dropout": 0.2})
    s = space.structure
    (x,) = space.build_layer(0, 3)(space.batch(0, seed=1).inputs, ctx(0))
    x = x.detach()
    for block in (0, min(space.reduction_blocks)):
        for c in range(10):
            lid = s.layer_id(block, c)
            layer = space.build_layer(lid, 3)
            state = (x,) if block == 0 else layer_input_at(space, block)
            with torch.no_grad():
                first = layer(state, ctx(lid))
            again = layer(tuple(t.detach().requires_grad_() for t in state), ctx(lid, recompute=True))
            assert torch.equal(first[0], again[0]), s.op_name(lid)
            again[0].square().mean().backward()


def layer_input_at(space, block):
    o = space.options
    c_in, _, _, size = space.block_shape(block)
    gen = torch.Generator().manual_seed(block)
    return (torch.randn(o["batch_size"], c_in, size, size, generator=gen),)


def test_seeded_init_identical_across_builds():
    a, b = make_space("cv.tiny"), make_space("cv.tiny")
    ids = list(range(a.structure.num_layers))
    first = [a.build_layer(lid, 8).state_dict() for lid in ids]
    torch.manual_seed(99)
    second = [b.build_layer(lid, 8).state_dict() for lid in ids]
    for sa, sb in zip(first, second, strict=True):
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    conv0 = a.structure.layer_id(0, 0)
    conv1 = a.structure.layer_id(1, 0)
    assert not torch.equal(first[conv0]["op.conv.weight"], first[conv1]["op.conv.weight"])


def test_batches_pure_balanced_and_learnable_signal():
    space = make_space("cv.tiny", {"batch_size": 64})
    a, b = space.batch(5, seed=2), space.batch(5, seed=2)
    assert torch.equal(a.inputs[0], b.inputs[0]) and torch.equal(a.targets[0], b.targets[0])
    assert not torch.equal(a.inputs[0], space.batch(6, seed=2).inputs[0])
    (labels,) = a.targets
    assert labels.dtype == torch.long and 0 <= int(labels.min()) and int(labels.max()) < 10
    assert len(labels.unique()) >= 5


def test_bad_options_name_the_option():
    with pytest.raises(ValueError, match="stem_stride"):
        make_space("cv.tiny", {"stem_stride": 3})
    with pytest.raises(ValueError, match="reductions"):
        make_space("cv.tiny", {"reductions": 6})
    with pytest.raises(ValueError, match="colour"):
        make_space("cv.tiny", {"colour": 1})


def test_analytic_layer_cost_without_building(monkeypatch):
    space = make_space("cv.c1")
    s = space.structure
    forbid_module_construction(monkeypatch, space)
    every = [space.layer_cost(lid) for lid in range(s.num_layers)]  # no layer is built
    assert len(every) == s.num_layers and all(c > 0 for c in every)
    conv = every[s.layer_id(0, 0)]
    pool = every[s.layer_id(0, IMAGE_OPS.index("avgpool3x3"))]
    assert conv > pool > 1 and every[0] > 1 and every[-1] > 1


def test_loss_decreases_and_accuracy_rises_for_a_fixed_subnet():
    torch.set_num_threads(1)
    space = make_space("cv.tiny")
    subnet = Subnet((0, 1, 2, 3, 4, 5))
    path = [(lid, space.build_layer(lid, 5)) for lid in space.structure.position_layers(subnet)]
    params = [p for _, m in path for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    losses, accs = [], []
    for step in range(100):
        batch = space.batch(step, seed=0)
        state = batch.inputs
        for lid, module in path:
            state = module(state, ctx(lid, subnet=step))
        loss = space.loss(state, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        accs.append(space.accuracy(state, batch).item())
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.3
    assert sum(accs[-10:]) / 10 > 0.25  # chance is 0.1


SHARED_IMAGES = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared/data/cifar10-imagefolder"


@pytest.mark.skipif(not SHARED_IMAGES.is_dir(), reason="shared image sample not present")
def test_dataset_batches_from_image_shards(tmp_path):
    from naspipe.data.images import prepare_images

    shards = tmp_path / "shards"
    prepare_images(SHARED_IMAGES, shards, resize=32, crop=32, limit_per_class=3)
    space = make_space("cv.tiny", {"data": str(shards), "image_size": 32, "batch_size": 4})
    a, b = space.batch(2, seed=1), space.batch(2, seed=1)
    assert torch.equal(a.inputs[0], b.inputs[0]) and torch.equal(a.targets[0], b.targets[0])
    (x,) = a.inputs
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and -3 < float(x.min()) < float(x.max()) < 3
    path = [(lid, space.build_layer(lid, 0)) for lid in space.structure.position_layers(Subnet((1,) * 6))]
    state = a.inputs
    for lid, module in path:
        state = module(state, ctx(lid))
    assert torch.isfinite(space.loss(state, a))
    with pytest.raises(ValueError, match="image_size"):
        make_space("cv.tiny", {"data": str(shards), "image_size": 16}).batch(0, seed=1)
