"""A failed stage, in a process that goes on to resume the run.

One-stage runs train in the caller's process, so a failed run's worker can outlive the failure
(its traceback holds it). Its log files must be closed when the failure leaves the worker: left
open, their buffered lines were flushed whenever the collector freed the worker, after a resume in
the same process had truncated the logs, and the resumed run published a duplicated loss row. That
is what made a per-subnet batch memo look guilty (the memo put the worker in a reference cycle, so
only the cyclic collector freed it, at a moment of its own choosing).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runtime.faults import FAIL_ENV

TOY = ["--set", "space.blocks=3", "--set", "space.candidates=2", "--set", "space.dim=8", "--set", "space.seq_len=4",
       "--set", "progress=off"]
OUTPUTS = ("losses.csv", "access_order.csv", "layer_hashes.csv", "weights.sha256")


def train(out: Path, *extra: str, steps: int = 8) -> int:
    return main(["train", "--system", "csp", "--stages", "1", "--steps", str(steps), "--seed", "0",
                 "--out", str(out), *TOY, *extra])


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("shared", ["frozen", "windowed"])
def test_a_failed_worker_collected_after_the_resume_changes_nothing(tmp_path, monkeypatch, shared):
    reference, out = tmp_path / "ref", tmp_path / "run"
    policy = ("--set", f"shared_policy={shared}", "--set", "shared_window=3")
    assert train(reference, *policy) == 0
    monkeypatch.setenv(FAIL_ENV, "0:5")  # subnet 4's forward (and its loss line) ran after the last checkpoint
    failure: BaseException | None = None
    try:
        train(out, "--checkpoint-every", "2", *policy)
    except RuntimeError as exc:
        failure = exc  # its traceback keeps the failed worker (and its log files) alive across the resume
    assert failure is not None and "injected failure" in str(failure)
    monkeypatch.delenv(FAIL_ENV)
    assert train(out, "--resume", f"{out}.partial", *policy) == 0
    published = files(out)
    del failure
    gc.collect()  # the failed worker goes now: nothing of it may land in the published run
    assert files(out) == published
    for name in OUTPUTS:
        assert (reference / name).read_bytes() == (out / name).read_bytes(), name
