"""The Evolved-Transformer style NLP space: structure, ops, causality, seeding, learning."""

from __future__ import annotations

import pytest
import torch

from naspipe.space import make_space, space_names
from naspipe.space.base import LayerContext
from naspipe.space.nlp import BOS, EOS, PAD
from naspipe.space.ops.seq import SEQ_OPS
from naspipe.subnet import Subnet
from tests.conftest import forbid_module_construction

ALL_OPS = {"candidates": 24, "dropout": 0.1}


def ctx(layer: int, recompute: bool = False, subnet: int = 3) -> LayerContext:
    return LayerContext(seed=11, subnet=subnet, layer=layer, recompute=recompute)


def run_positions(space, layers, state, upto=None, subnet=3):
    """Run ``layers`` (built modules, in position order) on ``state``."""
    for layer_id, module in layers[:upto]:
        state = module(state, ctx(layer_id, subnet=subnet))
    return state


def build_path(space, subnet: Subnet, seed: int = 5):
    return [(lid, space.build_layer(lid, seed)) for lid in space.structure.position_layers(subnet)]


def test_presets_registered_with_paper_sizes():
    names = space_names()
    for name, candidates in (("nlp.c0", 96), ("nlp.c1", 72), ("nlp.c2", 48), ("nlp.c3", 24)):
        assert name in names
        s = make_space(name).structure
        assert len(s.blocks) == 48
        assert s.choices_per_block == (candidates,) * 48
        assert s.prefix == ("embedding",) and s.suffix == ("output",)
        assert s.num_layers == 2 + 48 * candidates
        assert all(op.startswith("enc.") for block in s.blocks[:24] for op in block)
        assert all(op.startswith("dec.") for block in s.blocks[24:] for op in block)
        # candidate c runs op c % 24: 24 distinct ops per half, copies beyond
        assert len(set(s.blocks[0])) == 24 and s.blocks[0][24 % candidates] == s.blocks[0][0]
    tiny = make_space("nlp.tiny").structure
    assert len(tiny.blocks) >= 4 and min(tiny.choices_per_block) >= 4
    families = {op.split(".")[1].rstrip("0123456789r") for op in tiny.blocks[0]}
    assert {"conv", "sep", "light", "attn", "glu"} <= families


def test_twenty_four_distinct_operations():
    assert len(set(SEQ_OPS)) == 24
    assert sum(op.startswith("conv") for op in SEQ_OPS) == 3
    assert sum(op.startswith("sep") for op in SEQ_OPS) == 5
    assert sum(op.startswith("light") for op in SEQ_OPS) == 12
    assert sum(op.startswith("attn") for op in SEQ_OPS) == 3
    assert "glu" in SEQ_OPS


def test_every_op_shapes_in_encoder_and_decoder_blocks():
    space = make_space("nlp.tiny", ALL_OPS)
    o, s = space.options, space.structure
    batch = space.batch(0, seed=1)
    b, t, d = o["batch_size"], o["seq_len"], o["dim"]
    state = space.build_layer(0, 5)(batch.inputs, ctx(0))
    assert [x.shape for x in state] == [(b, t, d), (b, t, d), (b, t)]
    assert state[2].dtype == torch.long
    last_block = len(s.blocks) - 1
    for block in (0, space.encoder_blocks, last_block):
        for c in range(24):
            lid = s.layer_id(block, c)
            out = space.build_layer(lid, 5)(state, ctx(lid))
            assert [x.shape for x in out] == [(b, t, d), (b, t, d), (b, t)]
            assert out[2] is state[2]  # passed through
            untouched = 1 if block < space.encoder_blocks else 0  # dec through encoders, enc through decoders
            assert out[untouched] is state[untouched]
            assert all(torch.isfinite(x).all() for x in out if x.is_floating_point()), s.op_name(lid)
    head = s.num_layers - 1
    (logits,) = space.build_layer(head, 5)(state, ctx(head))
    assert logits.shape == (b, t, o["vocab"])


@pytest.mark.parametrize("op_index", range(24))
def test_decoder_op_is_causal(op_index):
    space = make_space("nlp.tiny", ALL_OPS)
    s = space.structure
    batch = space.batch(2, seed=1)
    enc, dec, src = space.build_layer(0, 5)(batch.inputs, ctx(0))
    lid = s.layer_id(space.encoder_blocks, op_index)
    layer = space.build_layer(lid, 5)  # training mode: seeded dropout active
    base = layer((enc, dec, src), ctx(lid))[1]
    gen = torch.Generator().manual_seed(op_index)
    for cut in (0, 4, dec.shape[1] - 2):
        perturbed = dec.clone()
        perturbed[:, cut + 1 :] += torch.randn(perturbed[:, cut + 1 :].shape, generator=gen)
        out = layer((enc, perturbed, src), ctx(lid))[1]
        torch.testing.assert_close(out[:, : cut + 1], base[:, : cut + 1], rtol=0, atol=1e-6, msg=s.op_name(lid))
        assert not torch.allclose(out[:, cut + 1 :], base[:, cut + 1 :]), "perturbation had no effect"


@pytest.mark.parametrize("op_index", range(24))
def test_encoder_op_ignores_padding(op_index):
    space = make_space("nlp.tiny", ALL_OPS)
    s = space.structure
    batch = space.batch(3, seed=1)
    enc, dec, src = space.build_layer(0, 5)(batch.inputs, ctx(0))
    pad = (src == PAD).unsqueeze(-1)
    assert pad.any() and (~pad).any()
    lid = s.layer_id(0, op_index)
    layer = space.build_layer(lid, 5)
    base = layer((enc, dec, src), ctx(lid))[0]
    noisy = enc + pad * torch.randn(enc.shape, generator=torch.Generator().manual_seed(1))
    out = layer((noisy, dec, src), ctx(lid))[0]
    torch.testing.assert_close(out.masked_fill(pad, 0), base.masked_fill(pad, 0), rtol=0, atol=1e-5)


def test_whole_model_no_future_leakage_and_encoder_reaches_loss():
    space = make_space("nlp.tiny", {"candidates": 24, "blocks": 6})
    subnet = Subnet((3, 14, 22, 3, 7, 12))  # attn4, light15r1, light7r4 / attn4, sep5, attn16
    path = build_path(space, subnet)
    batch = space.batch(0, seed=2)
    src, tgt = batch.inputs
    (logits,) = run_positions(space, path, (src, tgt))
    cut = 5
    tgt2 = tgt.clone()
    tgt2[:, cut + 1 :] = torch.randint(4, space.options["vocab"], tgt2[:, cut + 1 :].shape)
    (logits2,) = run_positions(space, path, (src, tgt2))
    torch.testing.assert_close(logits2[:, : cut + 1], logits[:, : cut + 1], rtol=0, atol=1e-5)
    src2 = src.clone()
    src2[:, 0] = torch.where(src2[:, 0] == 4, 5, 4)
    (logits3,) = run_positions(space, path, (src2, tgt))
    assert (logits3[:, 0] - logits[:, 0]).abs().max() > 1e-4  # the source reaches the first target


def test_forward_and_recompute_agree_bitwise():
    space = make_space("nlp.tiny", ALL_OPS)
    s = space.structure
    batch = space.batch(0, seed=1)
    state = space.build_layer(0, 5)(batch.inputs, ctx(0))
    for lid in (s.layer_id(0, 2), s.layer_id(space.encoder_blocks, 3), s.layer_id(len(s.blocks) - 1, 4)):
        layer = space.build_layer(lid, 5)
        with torch.no_grad():
            first = layer(state, ctx(lid))
        leaves = tuple(x.detach().requires_grad_(x.is_floating_point()) for x in state)
        again = layer(leaves, ctx(lid, recompute=True))
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
        other = layer(state, ctx(lid, subnet=4))  # another subnet: another dropout mask
        assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_seeded_init_identical_across_builds():
    a = make_space("nlp.tiny")
    b = make_space("nlp.tiny")
    ids = list(range(a.structure.num_layers))
    first = {lid: a.build_layer(lid, 9).state_dict() for lid in ids}
    torch.manual_seed(123)  # the global stream must not matter
    second = {lid: b.build_layer(lid, 9).state_dict() for lid in reversed(ids)}
    for lid in ids:
        assert first[lid].keys() == second[lid].keys()
        assert all(torch.equal(first[lid][k], second[lid][k]) for k in first[lid])
    s = a.structure
    copy_a, copy_b = s.layer_id(1, 0), s.layer_id(2, 0)  # same op, different layers
    assert not torch.equal(first[copy_a]["op.conv.weight"], first[copy_b]["op.conv.weight"])
    other_seed = a.build_layer(copy_a, 10).state_dict()
    assert not torch.equal(first[copy_a]["op.conv.weight"], other_seed["op.conv.weight"])


def test_shared_layers_frozen_or_trained_by_policy():
    frozen = make_space("nlp.tiny", {}, "frozen")
    causal = make_space("nlp.tiny", {}, "causal")
    last = frozen.structure.num_layers - 1
    for lid in (0, last):
        assert not any(p.requires_grad for p in frozen.build_layer(lid, 0).parameters())
        assert all(p.requires_grad for p in causal.build_layer(lid, 0).parameters())
    assert all(p.requires_grad for p in frozen.build_layer(1, 0).parameters())


def test_batches_are_pure_and_well_formed():
    space = make_space("nlp.tiny")
    a, b = space.batch(7, seed=3), space.batch(7, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.inputs + a.targets, b.inputs + b.targets, strict=True))
    c = space.batch(8, seed=3)
    assert not torch.equal(a.inputs[0], c.inputs[0])
    src, tgt_in = a.inputs
    (tgt_out,) = a.targets
    o = space.options
    for x in (src, tgt_in, tgt_out):
        assert x.shape == (o["batch_size"], o["seq_len"]) and x.dtype == torch.long
        assert int(x.max()) < o["vocab"]
    assert (tgt_in[:, 0] == BOS).all()
    words = (tgt_out != PAD) & (tgt_out != EOS)
    assert torch.equal(tgt_in[:, 1:][words[:, :-1]], tgt_out[:, :-1][words[:, :-1]])  # teacher forcing shift
    assert ((tgt_out == EOS).sum(1) == 1).all() and ((src == EOS).sum(1) == 1).all()
    assert torch.equal((src != PAD).sum(1), (tgt_out != PAD).sum(1))


def test_bad_options_name_the_option():
    with pytest.raises(ValueError, match="dimm"):
        make_space("nlp.tiny", {"dimm": 3})
    with pytest.raises(ValueError, match="dim"):
        make_space("nlp.tiny", {"dim": 36, "candidates": 24})  # not divisible by 16
    with pytest.raises(ValueError, match="blocks"):
        make_space("nlp.tiny", {"blocks": 1})


def test_analytic_layer_cost_without_building(monkeypatch):
    space = make_space("nlp.c1")
    s = space.structure
    forbid_module_construction(monkeypatch, space)
    every = [space.layer_cost(lid) for lid in range(s.num_layers)]  # 3,458 layers, none built
    assert len(every) == s.num_layers and all(c > 1 for c in every)
    costs = [every[lid] for lid in (0, s.layer_id(0, 0), s.layer_id(30, 0), s.num_layers - 1)]
    assert costs[2] > costs[1]  # a decoder block adds cross-attention


def test_loss_decreases_for_a_fixed_subnet():
    torch.set_num_threads(1)
    space = make_space("nlp.tiny", {"dropout": 0.0}, "causal")
    subnet = Subnet((3, 1, 2, 3, 1, 2))
    path = build_path(space, subnet)
    params = [p for _, m in path for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    losses = []
    for step in range(100):
        batch = space.batch(step, seed=0)
        out = run_positions(space, path, batch.inputs, subnet=step)
        loss = space.loss(out, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < first - 0.3, (first, last)


def test_label_smoothed_loss_ignores_padding():
    space = make_space("nlp.tiny")
    batch = space.batch(0, seed=0)
    (target,) = batch.targets
    logits = torch.randn(*target.shape, space.options["vocab"])
    pad = target == PAD
    assert pad.any() and not pad.all()  # the batch has both padding and words
    changed = logits.clone()
    changed[pad] += 100 * torch.randn_like(changed[pad])
    assert torch.equal(space.loss((logits,), batch), space.loss((changed,), batch))
    words = logits.clone()
    words[~pad] += 100 * torch.randn_like(words[~pad])
    assert not torch.equal(space.loss((logits,), batch), space.loss((words,), batch))


SHARED_FAIRSEQ = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared/data/fairseq-bin-multi30k-sample"


@pytest.mark.skipif(not SHARED_FAIRSEQ.is_dir(), reason="shared fairseq sample not present")
def test_dataset_batches_from_a_fairseq_directory():
    space = make_space("nlp.tiny", {"data": str(SHARED_FAIRSEQ), "vocab": 6008, "seq_len": 16, "batch_size": 4})
    a, b = space.batch(3, seed=1), space.batch(3, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.inputs + a.targets, b.inputs + b.targets, strict=True))
    src, tgt_in = a.inputs
    (tgt_out,) = a.targets
    assert src.shape == tgt_in.shape == tgt_out.shape == (4, 16) and src.dtype == torch.long
    assert (tgt_in[:, 0] == BOS).all()
    path = build_path(space, Subnet((0,) * 6))
    out = run_positions(space, path, a.inputs)
    assert torch.isfinite(space.loss(out, a))
    with pytest.raises(ValueError, match="vocab"):
        make_space("nlp.tiny", {"data": str(SHARED_FAIRSEQ)}).batch(0, seed=1)
    with pytest.raises(ValueError, match="split"):
        make_space("nlp.tiny", {"data": str(SHARED_FAIRSEQ), "vocab": 6008, "split": "nope"}).batch(0, seed=1)
