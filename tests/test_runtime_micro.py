"""The runtime's micro-batched schedules (issue 33): csp with its batch in m parts, with and without a
split backward, is bitwise the sequential reference with the same settings at any stage count, with the
cache and per-subnet partitions; the settings really change the numbers (m) or provably do not (split)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from naspipe import cli
from naspipe.config import load_config
from naspipe.context.cache import CacheCapacityError
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.micro import split_batch
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.wire import Message, pack, unpack
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State
from tests.baselines_harness import run_threads

CPU = torch.device("cpu")
TOY = ("space.blocks=6", "space.candidates=3", "space.dim=16", "space.seq_len=8")
ADAM = ("optimizer.name=adam", "optimizer.lr=0.01")
CACHE = ("cache.enabled=true", "cache.budget=3x", "cache.horizon=8")
PER_SUBNET = ("partition_mode=per-subnet",)


def run(system: str, stages: int, space: str, *settings: str, steps: int = 6) -> tuple[str, list[str], Path]:
    """A threaded run (the real stage workers, exact-byte messages): its losses, its layers' hashes, its dir
    (under the test's temporary directory, :func:`_runs_here`)."""
    out = Path(tempfile.mkdtemp(prefix=f"{system}-D{stages}-", dir=_RUNS[-1]))
    options = [*(TOY if space == "toy" else ()), "timeout_s=60", *settings]
    config = load_config(None, options, {"system": system, "stages": stages, "steps": steps, "space.name": space})
    run_threads(config, out)
    rows = (out / "layer_hashes.csv").read_text().splitlines()
    hashes = [row.split(",")[0] + "," + row.split(",")[-1] for row in rows]  # layer, sha256 (not the stage)
    return (out / "losses.csv").read_text(), hashes, out


_RUNS: list[Path] = []


@pytest.fixture(autouse=True)
def _runs_here(tmp_path: Path):
    """Every run of a test goes under its ``tmp_path`` (removed by pytest's retention, not left in /tmp)."""
    _RUNS.append(tmp_path)
    yield
    _RUNS.pop()


def same(a: tuple[str, list[str], Path], b: tuple[str, list[str], Path]) -> bool:
    return a[0] == b[0] and a[1] == b[1]


# Each (space, m, split) once, at D = 1..4; the optimizer alternates, D = 2 runs the cache, D = 3 per-subnet
# partitions (with the cache on toy), so every space sees SGD and Adam, each setting both optimizers.
CASES = [(space, m, split) for space in ("toy", "nlp.tiny", "cv.tiny") for m in (2, 4) for split in (False, True)]


@pytest.mark.parametrize(("space", "m", "split"), CASES)
def test_csp_equals_sequential_with_parts(space: str, m: int, split: bool) -> None:
    adam = (m == 4) != split
    settings = (f"micro_batches={m}", f"split_backward={str(split).lower()}", *(ADAM if adam else ()))
    steps = 6 if space == "toy" else 4  # the tiny spaces' layers cost more: fewer steps keep the suite short
    reference = run("sequential", 1, space, *settings, steps=steps)
    variants = {1: (), 2: CACHE, 3: PER_SUBNET + (CACHE if space == "toy" else ()), 4: ()}
    for stages, extra in variants.items():
        result = run("csp", stages, space, *settings, *extra, steps=steps)
        assert same(result, reference), (space, m, split, stages, extra)
    assert len(reference[0].splitlines()) == steps + 1


def test_the_least_cache_budget_holds_a_long_run_and_less_is_refused_at_the_start() -> None:
    """Parts of several subnets interleave on a stage; one subnet at a time holds its layers (one_holder),
    so two shares are enough for every step (before that rule, 3x failed here mid-run) and less is refused."""
    settings = ("micro_batches=4", "split_backward=true", "partition_mode=static")
    least = ("cache.enabled=true", "cache.budget=2x", "cache.horizon=8")
    reference = run("sequential", 1, "nlp.tiny", *settings, steps=24)
    assert same(run("csp", 3, "nlp.tiny", *settings, *least, steps=24), reference)
    with pytest.raises(CacheCapacityError, match="below two subnets' share of stage"):
        run("csp", 3, "nlp.tiny", *settings, "cache.enabled=true", "cache.budget=1.5x", steps=24)


def test_the_least_cache_budget_holds_when_no_copy_lands_before_the_next_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interleaving a busy core made (issue 41, item 0): the copy thread lags, so no prefetched copy has
    landed when a stage's next task starts, and those copies, which cannot be evicted mid-flight, took the room
    of the task's own layers (CacheCapacityError mid-run at a budget the start-up check accepted). Forced here:
    every copy reports 'not landed' until a task waits for it. The task now waits for the copies on their way
    when it needs their room, and the run is bitwise the reference."""
    from naspipe.runtime import context

    fetch = context._Copies.fetch

    def lagging(self: Any, hosts: Any, allocate: Any) -> Any:
        wait, _ = fetch(self, hosts, allocate)
        return wait, lambda: False

    monkeypatch.setattr(context._Copies, "fetch", lagging)
    settings = ("micro_batches=4", "split_backward=true", "partition_mode=static")
    reference = run("sequential", 1, "nlp.tiny", *settings, steps=12)
    least = ("cache.enabled=true", "cache.budget=2x", "cache.horizon=8")
    assert same(run("csp", 3, "nlp.tiny", *settings, *least, steps=12), reference)


@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True])
def test_csp_equals_sequential_with_parts_at_8_stages(split: bool) -> None:
    settings = ("space.blocks=10", "micro_batches=4", f"split_backward={str(split).lower()}")
    reference = run("sequential", 1, "toy", *settings, steps=12)
    assert same(run("csp", 8, "toy", *settings, steps=12), reference)
    assert same(run("csp", 8, "toy", *settings, *PER_SUBNET, *CACHE, steps=12), reference)


@pytest.mark.parametrize("space", ["toy", "nlp.tiny", "cv.tiny"])
def test_parts_change_the_numbers_and_the_split_does_not(space: str) -> None:
    """m = 2 is another training run than m = 1 (losses and weights); the split backward is bitwise the
    unsplit one (B's input gradients and W's weight gradients are the plain backward's arithmetic), and
    m = 1 with the split through the micro path is bitwise the paper's path."""
    paper = run("sequential", 1, space)
    two = run("sequential", 1, space, "micro_batches=2")
    assert paper[0] != two[0] and paper[1] != two[1]
    assert same(run("sequential", 1, space, "micro_batches=2", "split_backward=true"), two)
    assert same(run("sequential", 1, space, "split_backward=true"), paper)


def test_uneven_parts_gpipe_and_pipedream_still_differ() -> None:
    """m = 3 of a batch of 8 (parts of 3, 3, 2: loss scales 3/8, 3/8, 2/8) keeps the contract; the
    baselines (m = 1, as the paper ran them) still differ from the reference."""
    reference = run("sequential", 1, "toy", "micro_batches=3", "split_backward=true")
    assert same(run("csp", 3, "toy", "micro_batches=3", "split_backward=true"), reference)
    plain = run("sequential", 1, "toy")
    for system in ("gpipe", "pipedream"):
        assert not same(run(system, 3, "toy"), plain)


def test_metrics_and_trace_name_the_parts() -> None:
    _, _, out = run("csp", 2, "toy", "micro_batches=2", "split_backward=true", "priority=fifo")
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["micro_batches"], metrics["split_backward"], metrics["priority"]) == (2, True, "fifo")
    assert all(s["backward"] > 0 and s["forward"] > 0 for s in metrics["seconds_per_stage"])
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {(e["name"], e["cat"]) for e in events if e.get("ph") == "X"}
    for kind, category in (("F", "forward"), ("B", "backward"), ("W", "backward"), ("R", "recompute")):
        assert (f"{kind}3.1", category) in names
    assert ("U3", "optimizer") in names
    access = (out / "access_order.csv").read_text()
    assert "0F-0B" in access and ".1" not in access  # one F and one B per subnet and layer, as for m = 1


def test_a_message_carries_its_part_and_a_plain_one_is_unchanged() -> None:
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    back = unpack(pack(Message("F", 5, (tensor, None), 3), CPU))
    assert (back.kind, back.subnet, back.micro) == ("F", 5, 3) and torch.equal(back.tensors[0], tensor)
    plain = pack(Message("B", 5, (tensor,)), CPU)
    assert b'"j"' not in bytes(plain.tolist()) and unpack(plain).micro == 0


def test_split_batch_depends_on_m_only() -> None:
    batch = Batch((torch.arange(10).reshape(5, 2),), (torch.arange(5),))
    parts, scales = split_batch(batch, 2)
    assert [p.inputs[0].shape[0] for p in parts] == [3, 2] and scales == [0.6, 0.4]
    assert torch.equal(torch.cat([p.targets[0] for p in parts]), batch.targets[0])
    assert split_batch(batch, 1)[1] == [1.0]


def test_dropout_masks_differ_per_part_and_part_0_keeps_the_seed() -> None:
    plain, first, second = LayerContext(0, 4, 2), LayerContext(0, 4, 2, micro=0), LayerContext(0, 4, 2, micro=1)
    assert plain.dropout_seed() == first.dropout_seed() != second.dropout_seed()
    assert first.dropout_seed("ffn") != second.dropout_seed("ffn")


# -- a parameter used at two sites (pytorch issue 180952) ----------------------------------------------
class _TwoSites(SpaceLayer):
    """``tanh(x W) W``: one weight at two sites of one layer."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 16).reshape(4, 4))

    def forward(self, state: State, ctx: LayerContext) -> State:
        return (torch.tanh(state[0] @ self.weight) @ self.weight,)


class _Space:
    """What the executor asks of a space: the loss."""

    def loss(self, output: State, batch: Batch) -> torch.Tensor:
        return ((output[0] - batch.targets[0]) ** 2).mean()


def _batch(_: int) -> Batch:
    gen = torch.Generator().manual_seed(7)
    return Batch((torch.randn(6, 4, generator=gen),), (torch.randn(6, 4, generator=gen),))


def _gradient(split: bool, parts: int) -> torch.Tensor:
    """The weight's gradient after one subnet's parts on one stage (forward, backward, weight tasks)."""
    layer = _TwoSites()
    optimizer_config = load_config(None, []).optimizer
    executor = StageExecutor(cast(SearchSpace, _Space()), {0: layer}, LayerOptimizers({0: layer}, optimizer_config),
                             0, True, True, _batch, is_first=True, parts=parts, split=split)
    for j in range(parts):
        executor.forward(0, j, (0,), executor.part_batch(0, j).inputs)
        executor.backward(0, j, (0,), None)
        if split:
            executor.weight(0, j)
    assert layer.weight.grad is not None
    return layer.weight.grad.clone()


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_a_parameter_used_twice_gets_its_gradient_once(parts: int) -> None:
    split = _gradient(True, parts)
    assert torch.equal(split, _gradient(False, parts))  # the split's W is the plain backward's arithmetic
    layer, batch = _TwoSites(), _batch(0)
    loss = _Space().loss(layer((batch.inputs[0],), LayerContext(0, 0, 0)), batch)
    (reference,) = torch.autograd.grad(loss, [layer.weight])
    torch.testing.assert_close(split, reference)  # the whole batch's gradient, counted once (not twice)
    assert not torch.allclose(split, 2 * reference)


# -- checkpoints ---------------------------------------------------------------------------------------
def _config(**change: Any) -> dict[str, Any]:
    return {**load_config(None, [], {"system": "csp", "steps": 8}).to_dict(), **change}


def test_resume_checks_the_parts_and_reads_old_checkpoints_as_m_1(tmp_path: Path) -> None:
    manifest = {"step": 4, "config": _config(micro_batches=2, split_backward=True)}
    ckpt.check_compatible(manifest, _config(micro_batches=2, split_backward=True), tmp_path)
    for change in ({"micro_batches": 4, "split_backward": True}, {"micro_batches": 2, "split_backward": False}):
        with pytest.raises(Exception, match="config key '(micro_batches|split_backward)'"):
            ckpt.check_compatible(manifest, _config(**change), tmp_path)
    old = {key: value for key, value in _config().items() if key not in ("micro_batches", "split_backward")}
    ckpt.check_compatible({"step": 4, "config": old}, _config(), tmp_path)  # written before the keys existed
    with pytest.raises(Exception, match="micro_batches"):
        ckpt.check_compatible({"step": 4, "config": old}, _config(micro_batches=2), tmp_path)


def test_spawned_stages_checkpoint_and_resume_at_another_stage_count(tmp_path: Path, capsys) -> None:
    """The real launch (a process per stage, gloo): csp at D = 2 with parts and a split, drained at a
    checkpoint, resumed at D = 3, is bitwise the threaded sequential reference."""
    settings = ["--set", "micro_batches=2", "--set", "split_backward=true"]
    toy = [arg for item in TOY for arg in ("--set", item)]
    first = ["train", "--system", "csp", "--stages", "2", "--steps", "4", "--seed", "0", "--checkpoint-every", "2",
             "--out", str(tmp_path / "part"), *toy, *settings]
    assert cli.main(first) == 0
    resumed = ["train", "--system", "csp", "--stages", "3", "--steps", "6", "--seed", "0", "--resume",
               str(tmp_path / "part"), "--out", str(tmp_path / "resumed"), *toy, *settings]
    assert cli.main(resumed) == 0
    reference = run("sequential", 1, "toy", "micro_batches=2", "split_backward=true")
    capsys.readouterr()
    assert cli.main(["compare", str(reference[2]), str(tmp_path / "resumed")]) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_more_parts_than_samples_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    args = ["train", "--system", "csp", "--stages", "2", "--steps", "2", "--out", str(tmp_path / "r"),
            "--set", "micro_batches=9"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "micro_batches 9 exceeds space.batch_size 8" in err[0]
    assert not any(tmp_path.iterdir())
