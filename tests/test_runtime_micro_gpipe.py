"""Micro-batched GPipe and VPipe on the runtime (gpipe-mb, vpipe-mb): bulk synchronous over parts, each subnet's
part gradients summed in part order into its own stash and applied at its own update in the flush.

What must hold: the result is a function of the bulk and the parts alone (reruns and stage counts agree when the
bulk is fixed); it is the sequential reference with the same parts when no two subnets of a bulk share a trained
layer (or the bulk is one subnet), and differs from it when they do; VPipe's swapping changes no bit; the split
backward changes no bit; two subnets of a bulk never mix their gradients in ``.grad``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from naspipe import cli
from naspipe.compare import compare_runs, read_run
from naspipe.config import OptimizerConfig
from naspipe.runtime import launch
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.optim import LayerOptimizers
from naspipe.space import make_space
from naspipe.subnet import Subnet
from tests.baselines_harness import SMALL, bulk_disjoint_stream, config_of, run_job_threads, run_threads

PARTS = ("micro_batches=2",)


def same(*dirs: Path) -> bool:
    return compare_runs(list(dirs))[0]


def differ(a: Path, b: Path) -> bool:
    ra, rb = read_run(a), read_run(b)
    return ra.losses != rb.losses and ra.weights != rb.weights


def train(system: str, stages: int, out: Path, *settings: str) -> Path:
    run_threads(config_of(system, stages, 12, *settings), out)
    return out


def test_micro_gpipe_depends_on_the_bulk_not_on_the_stages_and_is_not_sequential(tmp_path: Path) -> None:
    """SMALL's stream (4 blocks of 2 candidates): bulk-mates share trained layers, so a later subnet of a bulk
    reads a version without an earlier one's writes, unlike the sequential reference with the same parts."""
    d2 = train("gpipe", 2, tmp_path / "d2", *PARTS)
    assert same(d2, train("gpipe", 2, tmp_path / "again", *PARTS))
    assert same(d2, train("gpipe", 1, tmp_path / "d1", *PARTS, "bulk_size=2"))
    assert same(d2, train("gpipe", 2, tmp_path / "split", *PARTS, "split_backward=true"))
    reference = train("sequential", 1, tmp_path / "seq", *PARTS)
    assert differ(reference, d2)
    assert differ(d2, train("gpipe", 2, tmp_path / "m1"))  # the parts are another run than the paper's gpipe


def test_micro_vpipe_swaps_but_computes_exactly_what_micro_gpipe_computes(tmp_path: Path) -> None:
    gpipe = train("gpipe", 2, tmp_path / "gpipe", *PARTS, "split_backward=true")
    vpipe = train("vpipe", 2, tmp_path / "vpipe", *PARTS, "split_backward=true")
    assert same(gpipe, vpipe)
    extra = json.loads((vpipe / "metrics.json").read_text())["stage_extra"]
    assert all(e["swap_bytes"] > 0 and e["swap_fetches"] > 0 for e in extra)


def test_a_bulk_of_one_is_the_sequential_reference_with_the_same_parts(tmp_path: Path) -> None:
    reference = train("sequential", 1, tmp_path / "seq", "micro_batches=3")
    assert same(reference, train("gpipe", 2, tmp_path / "gpipe", "micro_batches=3", "bulk_size=1"))
    assert same(reference, train("vpipe", 3, tmp_path / "vpipe", "micro_batches=3", "bulk_size=1"))


def test_micro_gpipe_is_sequential_when_no_bulk_shares_a_trained_layer(tmp_path: Path) -> None:
    stream = bulk_disjoint_stream(blocks=4, candidates=4, bulk=2, steps=12)
    extra = ("space.candidates=4", *PARTS)
    run_threads(config_of("sequential", 1, 12, *extra), tmp_path / "seq", stream)
    run_threads(config_of("gpipe", 2, 12, *extra), tmp_path / "gpipe", stream)
    run_threads(config_of("vpipe", 2, 12, *extra, "split_backward=true"), tmp_path / "vpipe", stream)
    assert same(tmp_path / "seq", tmp_path / "gpipe", tmp_path / "vpipe")


# -- the stash with parts, on one executor ---------------------------------------------------------
def _toy():  # type: ignore[no-untyped-def]
    return make_space("toy", {"blocks": 2, "candidates": 1, "dim": 8, "seq_len": 4, "batch_size": 4,
                              "vocab": 16, "dropout": 0.1})


def _executor(space, stash: bool) -> tuple[StageExecutor, dict[int, torch.nn.Module]]:  # type: ignore[no-untyped-def]
    layers = {lid: space.build_layer(lid, 0) for lid in range(space.structure.num_layers)}
    optimizers = LayerOptimizers(layers, OptimizerConfig(name="sgd", lr=0.1, momentum=0.9))
    executor = StageExecutor(space, layers, optimizers, 0, True, True, lambda y: space.batch(y, 0), is_first=True,
                             parts=2, stash_gradients=stash)
    return executor, layers


def _parts(executor: StageExecutor, y: int, ids: tuple[int, ...], part: int) -> None:
    executor.forward(y, part, ids, executor.part_batch(y, part).inputs)
    executor.backward(y, part, ids, None)


def test_the_stash_sums_each_subnets_parts_apart_in_part_order() -> None:
    """Two subnets sharing every layer, their parts interleaved as a bulk's backwards run (1.0 0.0 1.1 0.1):
    nothing is summed in ``.grad``, and each subnet's stash holds exactly the bits that ``.grad`` holds after
    that subnet's two parts run alone (the reference's accumulation, part 0 first)."""
    space = _toy()
    ids = tuple(space.structure.position_layers(Subnet((0, 0))))
    trained = [lid for lid in ids if space.structure.is_trainable(lid)]
    stashing, layers = _executor(space, stash=True)
    for y, part in ((1, 0), (0, 0), (1, 1), (0, 1)):
        _parts(stashing, y, ids, part)
        assert all(p.grad is None for lid in ids for p in layers[lid].parameters())
    for y in (0, 1):
        plain, plain_layers = _executor(space, stash=False)
        _parts(plain, y, ids, 0)
        _parts(plain, y, ids, 1)
        for lid in trained:
            expected = [p.grad for p in plain_layers[lid].parameters() if p.requires_grad]
            assert all(torch.equal(a, b) for a, b in zip(stashing.stash.get(y)[lid], expected, strict=True))
    one_part, one_layers = _executor(space, stash=False)
    _parts(one_part, 0, ids, 0)
    assert any(not torch.equal(a, p.grad) for lid in trained  # the second part really adds something
               for a, p in zip(stashing.stash.get(0)[lid], one_layers[lid].parameters(), strict=False))


@pytest.mark.parametrize("system", ["gpipe", "vpipe"])
def test_micro_bsp_drains_at_a_bulk_boundary_and_resumes_at_another_stage_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system: str) -> None:
    """The real launcher (stages as threads): a checkpoint at a bulk boundary, resumed with the same bulk at
    another stage count, is bitwise the uninterrupted run (the stash holds nothing across a flush)."""
    monkeypatch.setattr(launch, "_spawn_stages", lambda job, work, checkpoint, lock: run_job_threads(job, work,
                                                                                                    checkpoint))
    sets = [arg for item in (*SMALL, *PARTS, "split_backward=true", "bulk_size=2", "device=cpu")
            for arg in ("--set", item)]

    def train_cli(out: Path, stages: int, steps: int, *extra: str) -> Path:
        assert cli.main(["train", "--system", system, "--stages", str(stages), "--steps", str(steps), "--seed", "0",
                         "--out", str(out), *sets, *extra]) == 0
        return out

    whole = train_cli(tmp_path / "whole", 2, 8)
    train_cli(tmp_path / "part", 2, 4, "--checkpoint-every", "2")
    resumed = train_cli(tmp_path / "resumed", 1, 8, "--resume", str(tmp_path / "part"))
    assert same(whole, resumed)
