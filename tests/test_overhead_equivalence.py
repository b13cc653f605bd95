"""The plain PyTorch loop of ``benchmarks/bench_overhead.py`` is the very computation naspipe runs.

The overhead benchmark compares naspipe's sequential runtime with that loop; the comparison
means something only if both do the same arithmetic. So: same losses (every bit, as
``float.hex``) and the same final parameters (every layer's digest) after a few steps, with
recomputation off and on, on each space the benchmark times. Timings are the benchmark's
business, never asserted here.
"""

from __future__ import annotations

import csv
from pathlib import Path
from types import ModuleType

import pytest

from naspipe.config import load_config
from naspipe.runtime.launch import train
from naspipe.runtime.outputs import tensor_digest
from tests.conftest import load_benchmark


def bench() -> ModuleType:
    return load_benchmark("bench_overhead")


def naspipe_run(tmp_path: Path, space: str, steps: int, recompute: bool) -> tuple[list[str], dict[int, str]]:
    config = load_config(None, [f"space.name={space}", f"recompute={str(recompute).lower()}", "progress=off",
                                "device=cpu"],  # the plain loop's device, also where a GPU is
                         {"system": "sequential", "stages": 1, "steps": steps})
    out = tmp_path / f"{space}-{recompute}"
    train(config, out)
    with open(out / "losses.csv", encoding="utf-8") as f:
        losses = [row["loss_hex"] for row in csv.DictReader(f)]
    with open(out / "layer_hashes.csv", encoding="utf-8") as f:
        hashes = {int(row["layer"]): row["sha256"] for row in csv.DictReader(f)}
    return losses, hashes


@pytest.mark.parametrize("space", ["toy", "nlp.tiny", "cv.tiny"])
def test_plain_loop_is_bitwise_the_sequential_run(tmp_path, space):
    steps = 6
    module = bench()
    plain = module.plain_train(module.plain_config(space, steps))
    plain_losses = [float.hex(x) for x in plain.losses]
    plain_hashes = {lid: tensor_digest(layer.state_dict()) for lid, layer in enumerate(plain.layers)}
    assert len(plain_losses) == steps
    for recompute in (False, True):
        losses, hashes = naspipe_run(tmp_path, space, steps, recompute)
        assert losses == plain_losses, f"recompute={recompute}"
        assert hashes == plain_hashes, f"recompute={recompute}"


@pytest.mark.parametrize("recompute", [False, True])
def test_each_batch_is_built_once_as_in_the_plain_loop(tmp_path, monkeypatch, recompute):
    """The plain loop builds batch i once; so does a one-stage run, although stage 0 feeds its inputs and
    the last stage's loss reads its targets (a second time in a recomputed backward): one build serves
    every use (``StageExecutor.batch``), and the bits stay the plain loop's (the test above)."""
    from collections import Counter

    from naspipe.space.base import Batch
    from naspipe.space.toy import ToySpace

    built: Counter[int] = Counter()
    make = ToySpace._synthetic_batch

    def counting(self: ToySpace, step: int, seed: int) -> Batch:
        built[step] += 1
        return make(self, step, seed)

    monkeypatch.setattr(ToySpace, "_synthetic_batch", counting)
    naspipe_run(tmp_path, "toy", 5, recompute)
    assert built == Counter(dict.fromkeys(range(5), 1))
