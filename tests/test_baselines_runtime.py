"""The baselines on the runtime: Table 3 and Table 4 in miniature, stashes, swapping, bubble.

Most runs use the real stage workers as threads (tests/baselines_harness.py; bitwise equal
to spawned gloo runs, checked below), so the whole file takes well under a minute of
compute plus a few process launches.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from naspipe import systems
from naspipe.cli import main as cli_main
from naspipe.compare import compare_runs, read_run
from naspipe.config import OptimizerConfig, load_config
from naspipe.errors import UsageError
from naspipe.report.access_order import read_access, render_table
from naspipe.runplan.job import build_job
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.swap import HostSwapper
from naspipe.scheduling import PolicyOptions, make_policy
from naspipe.scheduling.driver import drive
from naspipe.space import make_space
from naspipe.subnet import Subnet
from tests.baselines_harness import SMALL, bulk_disjoint_stream, config_of, run_threads
from tests.conftest import make_plan, run_cli


def same(*dirs: Path) -> bool:
    return compare_runs(list(dirs))[0]


def differ(a: Path, b: Path) -> bool:
    ra, rb = read_run(a), read_run(b)
    return ra.losses != rb.losses and ra.weights != rb.weights


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """Shared-layer stream (4 blocks x 2 candidates): each system at several stage counts."""
    root = tmp_path_factory.mktemp("table3")
    matrix = [("sequential", 1), ("csp", 2), ("csp", 3), ("csp", 4), ("gpipe", 2), ("gpipe", 4),
              ("pipedream", 2), ("pipedream", 4), ("vpipe", 2), ("csp-no-scheduler", 2), ("csp-no-scheduler", 4)]
    out = {}
    for system, stages in matrix:
        out[(system, stages)] = root / f"{system}-{stages}"
        run_threads(config_of(system, stages, 12), out[(system, stages)])
    return out


def test_table3_csp_is_identical_at_every_stage_count_and_bsp_asp_are_not(runs):
    seq = runs[("sequential", 1)]
    assert same(seq, runs[("csp", 2)], runs[("csp", 3)], runs[("csp", 4)])
    assert same(seq, runs[("csp-no-scheduler", 2)], runs[("csp-no-scheduler", 4)])
    for system in ("gpipe", "pipedream"):
        d2, d4 = runs[(system, 2)], runs[(system, 4)]
        assert differ(d2, d4), f"{system}: D=2 and D=4 should give different losses and weights"
        assert differ(seq, d2) and differ(seq, d4), f"{system} should differ from sequential"


def test_vpipe_swaps_but_computes_exactly_what_gpipe_computes(runs):
    assert same(runs[("gpipe", 2)], runs[("vpipe", 2)])
    metrics = json.loads((runs[("vpipe", 2)] / "metrics.json").read_text())
    for extra in metrics["stage_extra"]:
        assert extra["swap_bytes"] > 0 and extra["swap_wait_s"] > 0 and extra["swap_fetches"] > 0
    gpipe = json.loads((runs[("gpipe", 2)] / "metrics.json").read_text())
    assert all(e["swap_bytes"] == 0 for e in gpipe["stage_extra"])


def test_bsp_results_depend_on_the_bulk_not_on_the_stages(runs, tmp_path):
    run_threads(config_of("gpipe", 1, 12, "bulk_size=2"), tmp_path / "g1")
    assert same(runs[("gpipe", 2)], tmp_path / "g1")


def test_recompute_is_forced_off_for_pipedream_and_recorded(runs):
    for stages in (2, 4):
        metrics = json.loads((runs[("pipedream", stages)] / "metrics.json").read_text())
        assert metrics["config"]["recompute"] is True  # what was asked ...
        assert all(e["recompute"] == 0.0 for e in metrics["stage_extra"])  # ... and what ran
        assert all(s["recompute"] == 0.0 for s in metrics["seconds_per_stage"])
    gpipe = json.loads((runs[("gpipe", 2)] / "metrics.json").read_text())
    assert all(e["recompute"] == 1.0 for e in gpipe["stage_extra"])


def test_pipedream_at_one_stage_is_sequential(runs, tmp_path):
    """1F1B on one stage is sequential: checks the weight-stash path (functional_call on clones)."""
    run_threads(config_of("pipedream", 1, 12), tmp_path / "p1")
    assert same(runs[("sequential", 1)], tmp_path / "p1")


@pytest.mark.parametrize("stages", [2, 4])
def test_gpipe_equals_sequential_when_no_bulk_shares_a_trained_layer(tmp_path, stages):
    """Bulk-mates are disjoint in every block; the shared embedding and head are frozen (not
    trained), so nothing a bulk reads was written inside it: BSP is then exactly sequential."""
    stream = bulk_disjoint_stream(blocks=4, candidates=4, bulk=stages, steps=12)
    extra = ("space.candidates=4",)
    run_threads(config_of("sequential", 1, 12, *extra), tmp_path / "seq", stream)
    run_threads(config_of("gpipe", stages, 12, *extra), tmp_path / "gpipe", stream)
    run_threads(config_of("vpipe", stages, 12, *extra), tmp_path / "vpipe", stream)
    assert same(tmp_path / "seq", tmp_path / "gpipe", tmp_path / "vpipe")
    if stages == 2:  # control: train the shared layers and the bulk-mates share them again
        run_threads(config_of("sequential", 1, 12, *extra, "shared_policy=causal"), tmp_path / "seq-c", stream)
        run_threads(config_of("gpipe", 2, 12, *extra, "shared_policy=causal"), tmp_path / "gpipe-c", stream)
        assert differ(tmp_path / "seq-c", tmp_path / "gpipe-c")


def _pairs(seq: list[str]) -> bool:
    """``yF-yB`` pairs in increasing subnet order: the sequential access order."""
    ids = [int(a[:-1]) for a in seq[::2]]
    return (len(seq) % 2 == 0 and ids == sorted(ids)
            and all(f == f"{y}F" and b == f"{y}B" for y, f, b in zip(ids, seq[::2], seq[1::2], strict=True)))


def test_table4_access_orders(runs):
    seq = read_access(runs[("sequential", 1)])
    trainable = seq.trainable
    assert trainable
    for stages in (2, 3, 4):
        csp = read_access(runs[("csp", stages)])
        for layer in trainable & csp.accesses.keys():
            assert csp.accesses[layer] == seq.accesses[layer]
            assert _pairs(csp.accesses[layer])
    gpipe = read_access(runs[("gpipe", 2)])
    interleaved = [lid for lid in trainable & gpipe.accesses.keys() if not _pairs(gpipe.accesses[lid])]
    assert interleaved, "BSP should interleave bulk-mates on some shared layer"
    seq_g = gpipe.accesses[interleaved[0]]
    i = next(i for i, a in enumerate(seq_g) if a.endswith("F") and seq_g[i + 1].endswith("F"))
    a, b = int(seq_g[i][:-1]), int(seq_g[i + 1][:-1])
    assert a // 2 == b // 2  # bulk-mates (B = 2) ...
    assert seq_g[i:i + 4] == [f"{a}F", f"{b}F", f"{b}B", f"{a}B"]  # ... GPipe's reverse backward
    pipedream = read_access(runs[("pipedream", 4)])
    assert any(not _pairs(pipedream.accesses[lid]) for lid in trainable & pipedream.accesses.keys())


def test_access_order_command_renders_the_paper_row(runs, capsys):
    dirs = [runs[("sequential", 1)], runs[("csp", 4)], runs[("gpipe", 2)]]
    layer = next(lid for lid in sorted(read_access(dirs[2]).accesses)
                 if lid in read_access(dirs[0]).trainable and not _pairs(read_access(dirs[2]).accesses[lid]))
    assert cli_main(["access-order", *map(str, dirs), "--layer", str(layer)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Table 4: access order of layer {layer} (")
    rows = {line.split("  ")[0].strip(): line.split()[-1] for line in out[1:]}
    assert rows["sequential D=1"] == rows["csp D=4"] != rows["gpipe D=2 B=2"]
    assert "-".join(read_access(dirs[1]).accesses[layer]) == rows["csp D=4"]
    text = render_table([read_access(d) for d in dirs], limit=2)
    assert text.splitlines()[1].endswith("...")


def test_threads_match_spawned_gloo_runs(runs, tmp_path):
    """The thread harness is the runtime: spawned D=2 gloo runs give the same bits."""
    sets = [arg for s in (*SMALL, "device=cpu") for arg in ("--set", s)]  # the harness computes on the CPU
    for system in ("vpipe", "pipedream"):
        result = run_cli("train", "--system", system, "--stages", "2", "--steps", "12", *sets,
                         "--out", str(tmp_path / system))
        assert result.returncode == 0, result.stderr
        assert same(runs[(system, 2)], tmp_path / system)


def test_runtime_needs_of_each_system():
    """What each policy asks of the executors, as the registry reads it from the policy (the worker's source)."""
    plan = make_plan(4, 2, 2)
    keys = ("stash_gradients", "stash_weights", "recompute", "swap_parameters", "bulk_synchronous")
    needs = {s: {k: getattr(systems.get(s), k) for k in keys} for s in systems.names()}
    for s in needs:  # the registry reads the very attributes a live policy has
        assert needs[s] == {k: getattr(make_policy(s, 0, plan, PolicyOptions()), k) for k in keys}
    none = {"stash_gradients": False, "stash_weights": False, "recompute": None, "swap_parameters": False,
            "bulk_synchronous": False}
    assert needs["csp"] == needs["sequential"] == needs["csp-no-scheduler"] == none
    assert needs["gpipe"] == {**none, "stash_gradients": True, "bulk_synchronous": True}
    assert needs["vpipe"] == {**none, "stash_gradients": True, "swap_parameters": True, "bulk_synchronous": True}
    assert needs["pipedream"] == {**none, "stash_gradients": True, "stash_weights": True, "recompute": False}


def test_bsp_checkpoints_must_fall_on_bulk_boundaries(tmp_path):
    with pytest.raises(UsageError, match="multiple of the bulk size 2"):
        run_threads(config_of("gpipe", 2, 8, "checkpoint_every=3"), tmp_path / "x")


# -- executor and swapper units --------------------------------------------------------

def _toy(candidates: int = 1):
    return make_space("toy", {"blocks": 2, "candidates": candidates, "dim": 8, "seq_len": 4, "batch_size": 2,
                              "vocab": 16, "dropout": 0.1})


def _executor(space, layers, **kwargs):
    optimizers = LayerOptimizers(layers, OptimizerConfig(name="sgd", lr=0.1, momentum=0.9))
    recompute = kwargs.pop("recompute", True)
    ex = StageExecutor(space, layers, optimizers, 0, recompute, True, lambda y: space.batch(y, 0), **kwargs)
    return ex, optimizers


def _fresh(space):
    return {lid: space.build_layer(lid, 0) for lid in range(space.structure.num_layers)}


def test_gradient_stash_gives_each_subnet_its_own_optimizer_step():
    """Two subnets of a bulk use the same layers: two steps, each with its own gradient."""
    space = _toy()
    ids = space.structure.position_layers(Subnet((0, 0)))
    inputs = {y: space.batch(y, 0).inputs for y in (0, 1)}

    layers = _fresh(space)
    ex, _ = _executor(space, layers, stash_gradients=True)
    for y in (0, 1):
        ex.forward(y, 0, ids, inputs[y])
        ex.backward(y, 0, ids, None)
        assert all(p.grad is None for lid in ids for p in layers[lid].parameters())  # nothing summed in .grad
    ex.update(ids, subnet=0)
    ex.update(ids, subnet=1)

    ref_layers = _fresh(space)  # reference: gradients at the same version, applied one by one
    ref, ref_opt = _executor(space, ref_layers)
    grads = {}
    for y in (0, 1):
        ref.forward(y, 0, ids, inputs[y])
        ref.backward(y, 0, ids, None)
        grads[y] = {lid: [None if p.grad is None else p.grad.clone() for p in ref_layers[lid].parameters()]
                    for lid in ids}
        for lid in ids:
            for p in ref_layers[lid].parameters():
                p.grad = None
    for y in (0, 1):
        for lid in ids:
            for p, g in zip(ref_layers[lid].parameters(), grads[y][lid], strict=True):
                p.grad = g
            ref_opt.step(lid)
    for lid in ids:
        for a, b in zip(layers[lid].parameters(), ref_layers[lid].parameters(), strict=True):
            assert torch.equal(a, b)

    summed_layers = _fresh(space)  # the wrong way (one step with the sum) is observably different
    summed, _ = _executor(space, summed_layers)
    for y in (0, 1):
        summed.forward(y, 0, ids, inputs[y])
        summed.backward(y, 0, ids, None)
    summed.update(ids)
    trained = [lid for lid in ids if space.structure.is_trainable(lid)]
    assert any(not torch.equal(a, b) for lid in trained
               for a, b in zip(layers[lid].parameters(), summed_layers[lid].parameters(), strict=True))


def test_weight_stash_backward_uses_the_version_the_forward_read():
    space = _toy()
    ids = space.structure.position_layers(Subnet((0, 0)))
    inputs = space.batch(0, 0).inputs
    trained = [lid for lid in ids if space.structure.is_trainable(lid)]

    plain_layers = _fresh(space)
    plain, _ = _executor(space, plain_layers, recompute=False, stash_gradients=True)
    plain.forward(0, 0, ids, inputs)
    plain.backward(0, 0, ids, None)
    expected = {lid: plain.stash.get(0)[lid] for lid in trained}

    layers = _fresh(space)
    ex, _ = _executor(space, layers, recompute=False, stash_gradients=True, stash_weights=True)
    loss = ex.forward(0, 0, ids, inputs)
    before = {lid: [p.detach().clone() for p in layers[lid].parameters()] for lid in trained}
    with torch.no_grad():  # another subnet's update lands between this forward and backward
        for lid in trained:
            for p in layers[lid].parameters():
                p.add_(1.0)
    ex.backward(0, 0, ids, None)
    for lid in trained:
        assert all(torch.equal(a, b) for a, b in zip(ex.stash.get(0)[lid], expected[lid], strict=True))
        assert all(p.grad is None for p in layers[lid].parameters())
        assert all(torch.equal(p, b + 1.0) for p, b in zip(layers[lid].parameters(), before[lid], strict=True))
    ex.update(tuple(ids), subnet=0)  # applied to the live parameters
    assert all(not torch.equal(p, b + 1.0)
               for lid in trained for p, b in zip(layers[lid].parameters(), before[lid], strict=True))
    assert torch.isfinite(torch.as_tensor(loss)).all()
    with pytest.raises(ValueError, match="recomputation off"):
        _executor(space, _fresh(space), recompute=True, stash_gradients=True, stash_weights=True)


def test_host_swapper_moves_exact_bytes_and_keeps_layers_off_the_device():
    layer = torch.nn.Linear(4, 3)
    layer.register_buffer("stat", torch.arange(5.0))
    layers = {7: layer}
    optimizers = LayerOptimizers(layers, OptimizerConfig(name="sgd", lr=0.1, momentum=0.9))
    original = {k: v.clone() for k, v in layer.state_dict().items()}
    swapper = HostSwapper(layers, optimizers, torch.device("cpu"))
    assert layer.weight.numel() == 0 and layer.stat.numel() == 0  # not resident: placeholders
    assert all(torch.equal(swapper.host_state(7)[k], v) for k, v in original.items())
    params, buffers = (12 + 3) * 4, 5 * 4

    swapper.fetch([7])
    assert torch.equal(layer.weight, original["weight"]) and swapper.swap_bytes == params + buffers
    assert layer.weight.data_ptr() != swapper.host_state(7)["weight"].data_ptr()  # a real copy
    layer.stat.add_(1.0)  # a forward moved a running statistic
    swapper.evict([7], buffers=True)
    assert swapper.swap_bytes == 2 * (params + buffers) - params  # buffers written back, params not
    assert torch.equal(swapper.host_state(7)["stat"], original["stat"] + 1.0)

    swapper.fetch([7], optimizer=True)  # an update: gradients in, step, all written back
    grads = swapper.stash_in(swapper.stash_out([torch.ones(3, 4), torch.ones(3)]))
    layer.weight.grad, layer.bias.grad = grads
    optimizers.step(7)
    swapper.evict([7], params=True, optimizer=True)
    momentum = optimizers.get(7).state[layer.weight]["momentum_buffer"]
    assert momentum.numel() == 12 and layer.weight.numel() == 0
    assert torch.equal(swapper.host_state(7)["weight"], original["weight"] - 0.1)
    total = 2 * (params + buffers) - params + (params + buffers) + 2 * params + params + params
    assert swapper.swap_bytes == total  # + fetch, + grads out and in, + params back, + momentum out
    swapper.fetch([7], optimizer=True)
    assert optimizers.get(7).state[layer.weight]["momentum_buffer"].data_ptr() != momentum.data_ptr()
    assert swapper.swap_bytes == total + params + buffers + params  # layer + momentum in


# -- bubble ------------------------------------------------------------------------------

def test_gpipe_bubble_of_the_runtime_plan_is_exactly_the_formula():
    """D = B = 2, all candidates the same op, uniform partition: the job the runtime builds.

    The runtime's metrics.json defines bubble = 1 - sum(busy) / (D x makespan) with every
    stage starting together; the virtual-time driver uses the same definition. Driven with
    forward 1, backward 2 (recompute + backward), update 0, this job's schedule must give
    exactly the GPipe formula (D-1)/(B+D-1) = 1/3. The wall-clock figure of the same run on
    the real runtime is measured, not asserted: benchmarks/bench_systems.py --gpipe-bubble.
    """
    sets = ["space.candidates=1", "space.blocks=32", "space.dim=256", "space.dropout=0.0",
            "partition_costs=uniform"]
    job = build_job(load_config(None, sets, {"system": "gpipe", "stages": 2, "steps": 16}))
    assert job.config.bulk == 2 and job.partition.bounds == (0, 17, 34)
    timeline = drive(job.plan, "gpipe", job.config.steps, job.policy_options)
    stages = len(timeline.stages)
    busy = sum(Fraction(timeline.busy(k)) for k in range(stages))
    assert 1 - busy / (stages * Fraction(timeline.makespan)) == Fraction(1, 3)
    assert timeline.bubble_ratio() == pytest.approx(1 / 3, abs=1e-15)  # the same, in floating point
