"""Checkpoints you can trust and runs published whole.

A damaged checkpoint is refused in the launcher (one line, exit 2, nothing written) and never
resumed; ``--out`` never mixes two runs; incomplete checkpoints are cleaned up and never
counted; a checkpoint's size does not grow with the step count. One-stage runs train in this
process (``naspipe.cli.main``), so each case costs a fraction of a second.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from naspipe.cli import main
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime.faults import FAIL_ENV

TOY = ["--set", "space.blocks=3", "--set", "space.candidates=2", "--set", "space.dim=8", "--set", "space.seq_len=4",
       "--set", "progress=off"]
OUTPUTS = ("losses.csv", "access_order.csv", "layer_hashes.csv", "weights.sha256")


def train(out: Path, *extra: str, steps: int = 6, seed: int = 0) -> int:
    return main(["train", "--system", "csp", "--stages", "1", "--steps", str(steps), "--seed", str(seed),
                 "--out", str(out), *TOY, *extra])


def one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("naspipe: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def assert_same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight steps straight through: what every resume of the same config must reproduce."""
    out = tmp_path_factory.mktemp("ref") / "run"
    assert train(out, steps=8) == 0
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step run with a checkpoint at step 2."""
    out = tmp_path_factory.mktemp("base") / "run"
    assert train(out, "--checkpoint-every", "2", steps=4) == 0
    return out


@pytest.fixture
def damaged(base: Path, tmp_path: Path) -> Path:
    run = tmp_path / "damaged"
    shutil.copytree(base, run)
    return run


def step2(run: Path) -> Path:
    return run / "checkpoints" / "step-00000002"


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _manifest(edit):  # type: ignore[no-untyped-def]
    def apply(path: Path) -> None:
        manifest = json.loads((path.parent / ckpt.MANIFEST).read_text())
        (path.parent / ckpt.MANIFEST).write_text(json.dumps(edit(manifest)))
    return apply


def _without(key: str):  # type: ignore[no-untyped-def]
    return _manifest(lambda m: {k: v for k, v in m.items() if k != key})


DAMAGE = {
    "flipped byte": ("layer-3.pt", _flip, "SHA-256"),
    "truncated": ("layer-3.pt", lambda p: p.write_bytes(p.read_bytes()[:100]), "SHA-256"),
    "empty": ("layer-0.pt", lambda p: p.write_bytes(b""), "SHA-256"),
    "random bytes": ("layer-5.pt", lambda p: p.write_bytes(os.urandom(p.stat().st_size)), "SHA-256"),
    "missing shard": ("layer-4.pt", lambda p: p.unlink(), "missing"),
    "missing stage file": ("stage-0.json", lambda p: p.unlink(), "missing"),
    "manifest is a list": (ckpt.MANIFEST, lambda p: p.write_text("[1, 2]"), "JSON object"),
    "manifest not json": (ckpt.MANIFEST, lambda p: p.write_bytes(b"\xff\xfe{"), "unreadable"),
    "manifest without step": (ckpt.MANIFEST, _without("step"), "'step' is missing"),
    "manifest without stages": (ckpt.MANIFEST, _without("stages"), "'stages' is missing"),
    "manifest without config": (ckpt.MANIFEST, _without("config"), "'config' is missing"),
    "manifest without files": (ckpt.MANIFEST, _without("files"), "'files' is missing"),
    "step is a string": (ckpt.MANIFEST, _manifest(lambda m: {**m, "step": "2"}), "'step' has an invalid value"),
    "hash is not hex": (ckpt.MANIFEST, _manifest(lambda m: {**m, "files": {**m["files"], "layer-1.pt": "x"}}),
                        "'files'"),
    "layer left out": (ckpt.MANIFEST,
                       _manifest(lambda m: {**m, "files": {k: v for k, v in m["files"].items() if k != "layer-2.pt"}}),
                       "no entry for layer-2.pt"),
    "loss log cut": ("../../logs/losses.log", lambda p: p.write_text(""), "shorter"),
    # issue 41.3: the manifest's own fields are digested (fields_sha256); files are checked shard by shard above
    "config edited": (ckpt.MANIFEST, _manifest(lambda m: {**m, "config": {**m["config"], "seed": 1}}), "edited"),
    "step edited": (ckpt.MANIFEST, _manifest(lambda m: {**m, "step": 3}), "fields_sha256"),
    "stages edited": (ckpt.MANIFEST, _manifest(lambda m: {**m, "stages": 2}), "fields_sha256"),
    "partition edited": (ckpt.MANIFEST, _manifest(lambda m: {**m, "settings": {**m["settings"], "partition": [0, 4]}}),
                         "fields_sha256"),
    "log length edited": (ckpt.MANIFEST, _manifest(lambda m: {**m, "logs": {k: 0 for k in m["logs"]}}),
                          "fields_sha256"),
    "digest removed": (ckpt.MANIFEST, _without(ckpt.DIGEST), "'fields_sha256' is missing"),
    "settings removed": (ckpt.MANIFEST, _without("settings"), "'settings' is missing"),
    "written before the digest": (ckpt.MANIFEST, _manifest(lambda m: {k: v for k, v in {**m, "format": 2}.items()
                                                                      if k not in (ckpt.DIGEST, "settings")}),
                                  "format 2 predates the manifest's digest"),
    "integer past the digit limit": (ckpt.MANIFEST, lambda p: p.write_text('{"format": ' + "9" * 5000 + "}"),
                                     "unreadable"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_checkpoint_is_refused_before_any_stage_starts(damaged, tmp_path, capsys, case):
    name, damage, message = DAMAGE[case]
    damage(step2(damaged) / name)
    new = tmp_path / "resumed"
    assert main(["train", "--system", "csp", "--stages", "1", "--steps", "8", "--seed", "0", "--resume",
                 str(step2(damaged)), "--out", str(new), *TOY]) == 2
    one_line_error(capsys, message)
    assert not new.exists() and not Path(f"{new}.partial").exists()  # nothing written, no stage ran


def test_an_intact_copy_resumes_bitwise(damaged, reference, tmp_path):
    new = tmp_path / "resumed"
    assert train(new, "--resume", str(damaged), steps=8) == 0
    assert_same_outputs(reference, new)


def test_an_edited_manifest_is_refused_even_when_the_run_asks_for_what_it_says(tmp_path, capsys):
    """Issue 41.3: ``"micro_batches": 4`` edited to 2 in the newest manifest and resumed with micro_batches=2
    trained on from m = 4 shards and published a run whose losses were the m = 4 run's. A re-indented, intact
    manifest still resumes (the digest is of the values, not of the bytes)."""
    m4 = ["--set", "micro_batches=4"]
    run = tmp_path / "run"
    assert train(run, *m4, "--checkpoint-every", "2", steps=4) == 0
    manifest = run / "checkpoints" / "step-00000004" / ckpt.MANIFEST
    text = manifest.read_text()
    assert text.count('"micro_batches": 4') == 1
    manifest.write_text(text.replace('"micro_batches": 4', '"micro_batches": 2'))
    capsys.readouterr()
    assert train(tmp_path / "resumed", "--set", "micro_batches=2", "--resume", str(run), steps=8) == 2
    one_line_error(capsys, f"checkpoint {manifest}: its fields do not match their SHA-256 (fields_sha256)", "edited")
    assert not (tmp_path / "resumed").exists() and not (tmp_path / "resumed.partial").exists()
    manifest.write_text(json.dumps(json.loads(text)))  # the original values, on one line
    assert train(tmp_path / "resumed", *m4, "--resume", str(run), steps=8) == 0
    assert train(tmp_path / "straight", *m4, steps=8) == 0
    assert_same_outputs(tmp_path / "straight", tmp_path / "resumed")


def test_a_second_run_into_the_same_out_is_refused_or_replaces_it_whole(base, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--checkpoint-every", "1", "--set", "keep_checkpoints=5", steps=5, seed=1) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert train(out, steps=4) == 2
    one_line_error(capsys, "not empty", "--overwrite")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert train(out, "--overwrite", "--checkpoint-every", "2", steps=4) == 0
    assert_same_outputs(base, out)  # the second run alone: no file of the first is left
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]
    assert not Path(f"{out}.partial").exists()


def test_a_users_own_files_are_never_overwritten_without_asking(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert train(out, steps=2) == 2
    one_line_error(capsys, "not empty")
    assert (out / "notes.txt").read_text() == "mine" and not Path(f"{out}.partial").exists()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory (as a workflow may create) is fine
    assert train(empty, steps=2) == 0 and (empty / "losses.csv").is_file()


@pytest.mark.parametrize("where", ["file", "under a file", "/proc", "partial name"])
def test_a_bad_out_location_is_refused_before_any_work(tmp_path, capsys, where):
    (tmp_path / "f").write_text("x")
    out = {"file": tmp_path / "f", "under a file": tmp_path / "f" / "run", "/proc": Path("/proc/naspipe-x/run"),
           "partial name": tmp_path / "run.partial"}[where]
    assert train(out, steps=2) == 2
    one_line_error(capsys, f"--out {out}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_killed_run_resumes_in_place_and_publishes_once(reference, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    work = Path(f"{out}.partial")
    monkeypatch.setenv(FAIL_ENV, "0:5")
    with pytest.raises(RuntimeError, match="injected failure"):
        train(out, "--checkpoint-every", "2", steps=8)
    monkeypatch.delenv(FAIL_ENV)
    assert not out.exists()
    assert [p.name for p in (work / "checkpoints").glob("step-*/manifest.json")] == [ckpt.MANIFEST] * 2
    stray = work / "checkpoints" / "step-00000006"  # a checkpoint cut short: shards, no manifest
    stray.mkdir()
    (stray / ".layer-0.pt.abc.tmp").write_bytes(b"half")
    assert train(out, steps=8) == 2
    one_line_error(capsys, "interrupted run", f"--resume {work}")
    assert train(out, "--resume", str(out), steps=8) == 2
    one_line_error(capsys, "no complete checkpoint", f"--resume {work}")
    assert train(out, "--resume", str(work), steps=8) == 0
    assert not work.exists()
    assert_same_outputs(reference, out)
    assert not (out / "checkpoints" / "step-00000006").exists()


def test_overwrite_discards_an_interrupted_run(reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv(FAIL_ENV, "0:3")
    with pytest.raises(RuntimeError):
        train(out, "--checkpoint-every", "2", steps=8)
    monkeypatch.delenv(FAIL_ENV)
    assert train(out, "--overwrite", steps=8) == 0
    assert_same_outputs(reference, out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000008"]  # the final one only


def test_a_finished_run_extends_from_its_final_checkpoint(reference, tmp_path):
    out = tmp_path / "run"
    assert train(out, steps=3) == 0  # no periodic checkpoint: the final one is enough
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000003"]
    assert train(out, "--resume", str(out), steps=8) == 0
    assert_same_outputs(reference, out)


def test_final_checkpoint_can_be_turned_off(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--set", "final_checkpoint=false", steps=2) == 0
    assert not (out / "checkpoints").exists()


def test_retention_counts_only_complete_checkpoints(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        (checkpoints / f"step-{step:08d}").mkdir(parents=True)
        (checkpoints / f"step-{step:08d}" / "layer-0.pt").write_bytes(b"x")
    for step in (1, 2, 4):
        (checkpoints / f"step-{step:08d}" / ckpt.MANIFEST).write_text("{}")
    (checkpoints / "step-00000004" / ".layer-1.pt.xyz.tmp").write_bytes(b"half")
    (checkpoints / "step-00000005").mkdir()  # newest, but incomplete
    ckpt.prune(checkpoints, keep=2)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000004"]
    assert sorted(p.name for p in (checkpoints / "step-00000004").iterdir()) == ["layer-0.pt", ckpt.MANIFEST]


def test_shards_invisible_to_stage_0_fail_the_first_checkpoint(tmp_path):
    directory = tmp_path / "step-00000002"
    ckpt.save_stage(directory, 0, {}, {}, {})
    with pytest.raises(RuntimeError, match="shared filesystem"):
        ckpt.write_manifest(directory, 2, 2, [0], {}, keep=2, wall_s=0.0, settings={})


def test_checkpoint_size_does_not_grow_with_the_step_count(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--checkpoint-every", "4", "--set", "keep_checkpoints=10", steps=24) == 0

    def shard_bytes(step: int) -> int:
        return sum(p.stat().st_size for p in (out / "checkpoints" / f"step-{step:08d}").glob("*.pt"))

    assert shard_bytes(8) == shard_bytes(20)  # every layer has been trained by step 8
    manifests = [len((out / "checkpoints" / f"step-{s:08d}" / ckpt.MANIFEST).read_bytes()) for s in (8, 20)]
    assert abs(manifests[0] - manifests[1]) < 64  # only the recorded numbers' digits differ


def test_trace_is_chrome_json_and_capped(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--set", "trace_max_events=7", steps=6) == 0
    trace = json.loads((out / "trace.json").read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == 7
    assert {"name", "cat", "ph", "pid", "tid", "ts", "dur"} <= set(events[0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stage_extra"][0]["trace_dropped"] > 0
    assert not (out / "logs" / "trace").exists()


def test_access_logs_written_in_small_batches_give_the_same_outputs(reference, tmp_path, monkeypatch):
    from naspipe.runtime.recorder import StageLogs

    monkeypatch.setattr(StageLogs, "ACCESS_BUFFER", 3)  # append to the layer files every third access
    out = tmp_path / "run"
    assert train(out, "--checkpoint-every", "3", steps=5) == 0
    assert train(out, "--resume", str(out), steps=8) == 0
    assert_same_outputs(reference, out)


def test_losses_logged_out_of_order_come_out_sorted(tmp_path):
    from naspipe.runtime.outputs import _losses_in_order

    log = tmp_path / "losses.log"
    log.write_text("".join(f"{y},{float.hex(y / 4)}\n" for y in (0, 2, 1, 3, 6, 4, 5)))
    assert [y for y, _ in _losses_in_order(log)] == list(range(7))


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 300 KiB tmpfs (needs root: skipped elsewhere), grown to 64 MiB by calling the fixture's value."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(disk)],
                                           capture_output=True, check=False).returncode:
        pytest.skip("needs root to mount a small tmpfs")

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)

    yield disk, grow
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_is_one_line_and_the_run_resumes_bitwise(small_disk, tmp_path: Path) -> None:
    """ENOSPC in a stage: one line "no space left on ...", exit 1; the run resumes from DIR.partial (issue 18.8)."""
    from tests.conftest import run_cli

    disk, grow = small_disk
    args = ["train", "--stages", "2", "--steps", "200", "--checkpoint-every", "4", "--set", "keep_checkpoints=100",
            *TOY]
    full = run_cli(*args, "--out", str(disk / "run"))
    lines = full.stderr.strip().splitlines()
    assert full.returncode == 1 and len(lines) == 1, full.stderr
    assert lines[0].startswith("naspipe: error: stage ") and "no space left on device" in lines[0], lines[0]
    assert not (disk / "run").exists() and ckpt.find_checkpoint(disk / "run.partial")
    grow()
    resumed = run_cli(*args, "--resume", str(disk / "run.partial"), "--out", str(disk / "run"))
    assert resumed.returncode == 0, resumed.stderr
    reference = run_cli(*args, "--out", str(tmp_path / "reference"))
    assert reference.returncode == 0, reference.stderr
    for name in ("losses.csv", "weights.sha256", "layer_hashes.csv"):  # a shared layer's access order may interleave
        assert (tmp_path / "reference" / name).read_bytes() == (disk / "run" / name).read_bytes(), name


class _FillingDisk(io.RawIOBase):
    """A file on a disk with 100 bytes left: the write that would pass them fails with ENOSPC."""

    def __init__(self) -> None:
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.written + len(data) > 100:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return len(data)


def test_a_full_disk_while_a_shard_is_written_is_one_line_and_resumes_bitwise(reference, tmp_path, monkeypatch,
                                                                              capsys):
    """Issue 34.4: the disk fills while a layer of the step-4 checkpoint is written (its temp file takes 100
    bytes, then ENOSPC). One line, exit 1; the step-2 checkpoint resumes to the uninterrupted run bit for bit.
    Before: ``torch.save`` wrapped the ENOSPC as ``RuntimeError ... unexpected pos``, a 45-line traceback."""
    real_fdopen = os.fdopen

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if "step-00000004" in name and ".layer-" in name:  # the temp file of a shard of the second checkpoint
            os.close(fd)
            return _FillingDisk()
        return real_fdopen(fd, *args, **kwargs)

    out = tmp_path / "run"
    monkeypatch.setattr(os, "fdopen", fdopen)
    capsys.readouterr()
    assert train(out, "--checkpoint-every", "2", steps=8) == 1
    monkeypatch.undo()
    one_line_error(capsys, "no space left on device", f"{out}.partial")
    assert not out.exists() and ckpt.find_checkpoint(out.with_name("run.partial")).name == "step-00000002"
    assert train(out, "--resume", f"{out}.partial", "--checkpoint-every", "2", steps=8) == 0
    assert_same_outputs(reference, out)
