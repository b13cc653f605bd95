"""Issue 41.2: a resume changes no setting that a run's numbers depend on, and every setting it may change is
bitwise harmless.

Which keys are which, per system, is :mod:`naspipe.runtime.checkpoint`'s (docs/reliability.md tables it).
Each setting a resume may change is proven here: a run trained with one value, checkpointed and resumed with
another is bitwise the uninterrupted run. Each setting it may not change is refused in one line (exit 2)
before any stage starts. Every run is the real launcher (``naspipe.cli.main``) on a tiny toy space in this
process; several stages run as threads (:func:`tests.baselines_harness.run_job_threads`, the production
stage workers with queues for gloo), so each case costs about a second.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from naspipe.cli import main
from naspipe.config import Config
from naspipe.errors import UsageError
from naspipe.partition_file import PartitionFile, write_partition_file
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime import launch
from tests.baselines_harness import run_job_threads
from tests.test_runtime_checkpoint import TOY, one_line_error
from tests.test_runtime_resume import assert_same_bytes

Run = tuple[str, int, tuple[str, ...]]  # system, stages, --set items


@pytest.fixture(scope="module", autouse=True)
def threaded_stages() -> Iterator[None]:
    """Several stages run as threads of this process instead of spawned processes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch, "_spawn_stages", lambda job, work, checkpoint, lock: run_job_threads(job, work,
                                                                                                    checkpoint))
        yield


def train(out: Path, run: Run, steps: int, *extra: str) -> int:
    system, stages, settings = run
    sets = [arg for item in settings for arg in ("--set", item)]
    return main(["train", "--system", system, "--stages", str(stages), "--steps", str(steps), "--seed", "0",
                 "--out", str(out), *TOY, *sets, *extra])


def trained(out: Path, run: Run, steps: int, *extra: str) -> Path:
    assert train(out, run, steps, *extra) == 0
    return out


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The uninterrupted runs every resume below must reproduce: the sequential reference (which every system
    that keeps CSP's version rule computes at any stage count), with two micro-batches, GPipe's bulk of two and
    PipeDream at two stages with its drain points."""
    root = tmp_path_factory.mktemp("references")
    return {"seq": trained(root / "seq", ("sequential", 1, ()), 8),
            "seq-m2": trained(root / "seq-m2", ("sequential", 1, ("micro_batches=2",)), 8),
            "gpipe": trained(root / "gpipe", ("gpipe", 2, ()), 8),
            "pipedream": trained(root / "pipedream", ("pipedream", 2, ()), 8, "--checkpoint-every", "4")}


CACHE = ("cache.enabled=true",)
HOUSEKEEPING = ("keep_checkpoints=1", "final_checkpoint=false", "trace_max_events=5", "timeout_s=100",
                "device=cpu", "priority=fifo")
# case: (reference, the first segment, the resumed segment)
MAY_CHANGE: dict[str, tuple[str, Run, Run]] = {
    "stages 2 to 3, checkpoint_every 2 to none": ("seq", ("csp", 2, ("checkpoint_every=2",)), ("csp", 3, ())),
    "partition_costs params to uniform": ("seq", ("csp", 3, ()), ("csp", 3, ("partition_costs=uniform",))),
    "a partition_file": ("seq", ("csp", 2, ()), ("csp", 2, ("partition_file={tmp}/partition.json",))),
    "static to per-subnet partitions": ("seq", ("csp", 2, ()), ("csp", 2, ("partition_mode=per-subnet",))),
    "per-subnet partitions to static at another D": ("seq", ("csp", 2, ("partition_mode=per-subnet",)),
                                                     ("csp", 3, ())),
    "max_inflight 1 to 3": ("seq", ("csp", 2, ("max_inflight=1",)), ("csp", 2, ("max_inflight=3",))),
    "bulk_size": ("seq", ("csp", 2, ()), ("csp", 2, ("bulk_size=3",))),
    "cache off to on": ("seq", ("csp", 2, ()), ("csp", 2, CACHE)),
    "cache on to off": ("seq", ("csp", 2, CACHE), ("csp", 2, ())),
    "cache budget 3x to 2x": ("seq", ("csp", 2, CACHE), ("csp", 2, (*CACHE, "cache.budget=2x"))),
    "cache horizon 8 to 0": ("seq", ("csp", 2, CACHE), ("csp", 2, (*CACHE, "cache.horizon=0"))),
    "housekeeping and device auto to cpu": ("seq", ("csp", 2, ()), ("csp", 2, HOUSEKEEPING)),
    "sequential at another D with the cache": ("seq", ("sequential", 1, ()), ("sequential", 2, CACHE)),
    "csp-no-scheduler at another D": ("seq", ("csp-no-scheduler", 2, ()), ("csp-no-scheduler", 3, ())),
    "csp-no-predictor with the cache": ("seq", ("csp-no-predictor", 2, ()), ("csp-no-predictor", 3, CACHE)),
    "micro-batched priority critical to fifo": ("seq-m2", ("csp", 2, ("micro_batches=2",)),
                                                ("csp", 2, ("micro_batches=2", "priority=fifo"))),
    "micro-batched cache on (one holder) at another D": ("seq-m2", ("csp", 2, ("micro_batches=2",)),
                                                         ("csp", 3, ("micro_batches=2", *CACHE))),
    "gpipe partition, max_inflight, checkpoint_every": ("gpipe", ("gpipe", 2, ("checkpoint_every=2",)),
                                         ("gpipe", 2, ("partition_costs=uniform", "max_inflight=1"))),
    "gpipe at another D with its bulk": ("gpipe", ("gpipe", 2, ()), ("gpipe", 4, ("bulk_size=2",))),
    "vpipe (gpipe's numbers) at another partition": ("gpipe", ("vpipe", 2, ()),
                                                     ("vpipe", 2, ("partition_costs=uniform",))),
    "pipedream housekeeping": ("pipedream", ("pipedream", 2, ()), ("pipedream", 2, HOUSEKEEPING[:-1])),
}


def _with_tmp(run: Run, tmp: Path) -> Run:
    return run[0], run[1], tuple(item.replace("{tmp}", str(tmp)) for item in run[2])


@pytest.mark.parametrize("case", sorted(MAY_CHANGE))
def test_a_setting_a_resume_may_change_keeps_the_run_bitwise(references, tmp_path, case):
    reference, first, then = MAY_CHANGE[case]
    write_partition_file(tmp_path / "partition.json", PartitionFile("toy", {}, 2, "uniform", (0, 1, 5), (1.0, 4.0)))
    first, then = _with_tmp(first, tmp_path), _with_tmp(then, tmp_path)
    extra = ("--checkpoint-every", "4") if first[0] == "pipedream" else ()
    part = trained(tmp_path / "part", first, 4, *extra)
    assert train(tmp_path / "resumed", then, 8, "--resume", str(part), *extra) == 0
    assert_same_bytes(references[reference], tmp_path / "resumed")


def _refused(capsys: pytest.CaptureFixture[str], out: Path, *needles: str) -> None:
    one_line_error(capsys, *needles)
    assert not out.exists() and not Path(f"{out}.partial").exists()  # no stage ran, nothing written


@pytest.mark.parametrize("system", ["csp", "sequential", "gpipe", "pipedream"])
def test_another_thread_count_is_refused_for_every_system(tmp_path, capsys, system):
    """The issue's case: csp at D = 2, resumed at D = 3 with threads = 2, trained a hybrid of the two runs."""
    part = trained(tmp_path / "part", (system, 1, ()), 2)
    capsys.readouterr()
    assert train(tmp_path / "resumed", (system, 1, ("threads=2",)), 4, "--resume", str(part)) == 2
    _refused(capsys, tmp_path / "resumed", "config key 'threads' is 2, checkpoint has 1", "hybrid")


def test_pipedream_refuses_a_partition_file_rewritten_under_the_same_name(tmp_path, capsys):
    """PipeDream's updates follow its partition: the same ``partition_file`` with other bounds is another run."""
    path = tmp_path / "partition.json"
    write_partition_file(path, PartitionFile("toy", {}, 2, "uniform", (0, 1, 5), (1.0, 4.0)))
    run: Run = ("pipedream", 2, (f"partition_file={path}",))
    part = trained(tmp_path / "part", run, 4, "--checkpoint-every", "4")
    write_partition_file(path, PartitionFile("toy", {}, 2, "uniform", (0, 3, 5), (3.0, 2.0)))
    capsys.readouterr()
    assert train(tmp_path / "resumed", run, 8, "--checkpoint-every", "4", "--resume", str(part)) == 2
    _refused(capsys, tmp_path / "resumed", "'pipedream'", "stage bounds = [0, 1, 5] in the checkpoint but [0, 3, 5]")


@pytest.mark.parametrize(("change", "needle"), [
    (("--stages", "2"), "stages = 1 in the checkpoint but 2"),
    (("--set", "cache.enabled=true"), "cache = {'enabled': False} in the checkpoint"),
    (("--set", "partition_costs=uniform"), "partition_costs = 'params' in the checkpoint but 'uniform'"),
])
def test_the_artifacts_racing_check_keeps_its_pipeline(tmp_path, capsys, change, needle):
    """csp-artifact's relaxed check lets subnets race (two runs differ), so a resume keeps at least the pipeline
    and timing settings it raced under, as PipeDream does; it was treated as CSP and resumed anywhere."""
    part = trained(tmp_path / "part", ("csp-artifact", 1, ()), 4, "--checkpoint-every", "2")
    capsys.readouterr()
    assert main(["train", "--system", "csp-artifact", "--stages", "1", "--steps", "8", "--seed", "0", "--out",
                 str(tmp_path / "resumed"), "--checkpoint-every", "2", *TOY, "--resume", str(part), *change]) == 2
    _refused(capsys, tmp_path / "resumed", "'csp-artifact'", needle)


def test_a_checkpoint_trained_on_another_device_type_is_refused(tmp_path):
    """``device: auto`` resolves per machine: the type the stages ran on is recorded and compared."""
    config = Config(system="csp", steps=8).to_dict()
    manifest: dict[str, Any] = {"step": 4, "config": config, "settings": {"device": "cuda", "partition": [0, 5]}}
    ckpt.check_compatible(manifest, config, tmp_path, {"device": "cuda", "partition": [0, 5]})
    with pytest.raises(UsageError, match="trained on cuda, this run's stages run on cpu"):
        ckpt.check_compatible(manifest, config, tmp_path, {"device": "cpu", "partition": [0, 5]})


def test_every_config_key_has_a_resume_rule_and_only_one():
    """A key added to the schema must be sorted into one of the four groups (and the docs' table)."""
    groups = (ckpt.MUST_MATCH, ckpt.BY_SYSTEM, ckpt.CHECKED_APART, ckpt.NO_BITS)
    named = [key for group in groups for key in group]
    assert sorted(named) == sorted(f.name for f in dataclasses.fields(Config))
    docs = (Path(__file__).parent.parent / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert all(f"`{key}" in docs for key in named), [key for key in named if f"`{key}" not in docs]
