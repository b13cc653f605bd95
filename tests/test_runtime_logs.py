"""A stage's logs, written in batches, are the files that writing each record at once gave.

``StageLogs`` keeps a task's layer accesses and trace events in memory and writes them in batches
(writing each record at once cost about 2% of a tiny step, between its kernels). What
lands on disk must not depend on when the batches go out: the access order per layer (also across
``flush_layer``, before a layer moves to another stage), the trace lines, and the lengths ``sync``
reports for a checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from naspipe.runtime.recorder import LOSSES, Recorder, StageLogs, access_log, trace_log
from tests.conftest import load_benchmark

TASKS = [((1, 2, 3), "0F"), ((1, 2, 3), "0B"), ((2, 3), "0U"), ((1, 3), "1F"), ((1, 3), "1B"), ((3,), "1U")]


def write(root: Path, access_buffer: int, event_buffer: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The same records through a recorder with the given buffer sizes; ``sync``'s lengths at the end."""
    monkeypatch.setattr(StageLogs, "ACCESS_BUFFER", access_buffer)
    monkeypatch.setattr(StageLogs, "EVENT_BUFFER", event_buffer)
    recorder = Recorder(2, StageLogs(root, 2, [1, 2, 3], is_last=True, trace_max_events=5))
    for i, (layers, token) in enumerate(TASKS):
        recorder.touch(layers, int(token[:-1]), token[-1])
        recorder.span("forward", f"{token[-1]}{token[:-1]}", 0.25 * i, 0.25 * i + 0.125, i if i % 2 else None)
        if i == 2:
            recorder.logs.flush_layer(2)  # layer 2 moves away: its accesses so far go out now
    recorder.logs.loss(0, 1.5)
    lengths = recorder.logs.sync()
    recorder.logs.close()
    return lengths


@pytest.mark.parametrize("access_buffer, event_buffer", [(1, 1), (2, 3), (65536, 4096)])
def test_batched_logs_are_the_records_in_order(tmp_path, monkeypatch, access_buffer, event_buffer):
    lengths = write(tmp_path, access_buffer, event_buffer, monkeypatch)
    accesses = {layer: (tmp_path / access_log(layer)).read_text() for layer in (1, 2, 3)}
    assert accesses == {1: "0F-0B-1F-1B-", 2: "0F-0B-0U-", 3: "0F-0B-0U-1F-1B-1U-"}
    assert lengths == {access_log(1): 12, access_log(2): 9, access_log(3): 18, LOSSES: len("0,0x1.8000000000000p+0\n")}
    lines = (tmp_path / trace_log(2)).read_text().splitlines()
    assert len(lines) == 5  # trace_max_events: the sixth is dropped
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first == {"name": "F0", "cat": "forward", "ph": "X", "pid": 0, "tid": 2, "ts": 0.0, "dur": 125000.0}
    assert second == {"name": "B0", "cat": "forward", "ph": "X", "pid": 0, "tid": 2, "ts": 250000.0,
                      "dur": 125000.0, "args": {"subnet": 1}}


def test_batch_sizes_do_not_change_a_byte(tmp_path, monkeypatch):
    for name, sizes in {"each": (1, 1), "batched": (65536, 4096)}.items():
        write(tmp_path / name, *sizes, monkeypatch)
    files = [access_log(layer) for layer in (1, 2, 3)] + [trace_log(2), LOSSES]
    for f in files:
        assert (tmp_path / "each" / f).read_bytes() == (tmp_path / "batched" / f).read_bytes(), f


def test_abort_writes_the_kept_events_before_closing(tmp_path):
    logs = StageLogs(tmp_path, 0, [0], is_last=False, trace_max_events=10)
    logs.event("F0", "forward", 0.0, 0.5, 0)
    logs.abort()
    assert json.loads((tmp_path / trace_log(0)).read_text())["name"] == "F0"


def test_the_stage_loop_steps_beside_the_plain_loop(tmp_path):
    """``StageWorker.subnets`` pauses after each finished subnet: the benchmark's side-by-side run steps
    it in turn with the plain loop and checks that both give the same losses, bit for bit (it raises
    otherwise). Timings are the benchmark's business; here only what it timed."""
    run = load_benchmark("bench_overhead").lockstep("toy", 5, tmp_path)
    assert len(run.plain_cpu) == len(run.naspipe_cpu) == 5
    assert all(c >= 0 for c in run.plain_cpu + run.naspipe_cpu)
