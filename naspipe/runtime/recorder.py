"""What a stage records while it runs: busy time by kind in memory; trace events, layer
accesses and losses streamed to append-only log files, so a long run's memory stays flat.

Logs live under the run's working directory (``RUN/logs/``), on the shared filesystem that
checkpoints already need:

- ``access/layer-<id>.log``: the layer's accesses in order, each ``<subnet><F|B>-``. Keyed
  by layer, not stage, so a resume at another stage count continues the same files.
- ``losses.log``: ``<subnet>,<loss as float.hex()>`` per line, written by the last stage.
- ``trace/stage-<k>.jsonl``: one Chrome trace event per line; at most ``trace_max_events``
  per stage (later events are counted, not written). A resumed run traces only itself.

At a checkpoint a stage flushes and fsyncs its logs and records their lengths; a resume
truncates (or copies) each log to that length, so the final files are byte-identical to an
uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from naspipe.runplan.rundir import check_still_there

CATEGORIES = ("forward", "recompute", "backward", "optimizer", "waiting")
LOSSES = "losses.log"


def access_log(layer: int) -> str:
    return f"access/layer-{layer}.log"


def trace_log(stage: int) -> str:
    return f"trace/stage-{stage}.jsonl"


@dataclass
class StageReport:
    """A stage's share of the run's outputs, sent to rank 0 at the end (small: the logs stay on disk)."""

    stage: int
    layer_hashes: dict[int, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    span_s: float = 0.0
    tasks: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def busy_s(self) -> float:
        """Forward + recompute + backward + optimizer: everything but waiting."""
        return sum(v for k, v in self.seconds.items() if k != "waiting")

    def to_bytes(self) -> bytes:
        """JSON, not a pickle: rank 0 must not unpickle what arrives over the network."""
        return json.dumps({"stage": self.stage, "layer_hashes": {str(k): v for k, v in self.layer_hashes.items()},
                           "seconds": self.seconds, "span_s": self.span_s, "tasks": self.tasks,
                           "extra": self.extra}, sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> StageReport:
        """The report :meth:`to_bytes` wrote (floats round-trip exactly through JSON)."""
        raw = json.loads(data.decode("utf-8"))
        return cls(int(raw["stage"]), {int(k): str(v) for k, v in raw["layer_hashes"].items()},
                   {str(k): float(v) for k, v in raw["seconds"].items()}, float(raw["span_s"]), int(raw["tasks"]),
                   {str(k): float(v) for k, v in raw["extra"].items()})


class StageLogs:
    """The stage's append-only log files (see the module docstring).

    Accesses are buffered per task (the layers and their token) and appended in batches (at most
    ``ACCESS_BUFFER`` tokens held), each layer file opened only for the append: a paper-scale space has
    thousands of layers per stage, more than the usual limit of open files. Trace events are kept as
    tuples and written as JSON lines ``EVENT_BUFFER`` at a time. Both are bookkeeping of every task,
    paid between two tasks' computations, when the interpreter's caches are cold: done per task it cost
    4-5% of a one-stage cv.tiny step (``benchmarks/bench_overhead.py``), done in batches a fraction of that.
    """

    ACCESS_BUFFER = 65536
    EVENT_BUFFER = 4096

    def __init__(self, logs_dir: Path, stage: int, layers: list[int], is_last: bool, trace_max_events: int) -> None:
        self.dir, self.stage = logs_dir, stage
        (logs_dir / "access").mkdir(parents=True, exist_ok=True)
        (logs_dir / "trace").mkdir(parents=True, exist_ok=True)
        for layer in layers:
            (logs_dir / access_log(layer)).touch()
        self._layers = layers
        self._pending: dict[int, list[str]] = defaultdict(list)  # layer -> its tokens not yet written
        self._tasks: list[tuple[tuple[int, ...], str]] = []  # (layers, token) per task, not yet in _pending
        self._buffered = 0
        self._events: list[tuple[str, str, float, float, int | None]] = []
        self._losses = self._open(LOSSES, "a") if is_last else None
        self._trace = self._open(trace_log(stage), "w")
        self.trace_left, self.trace_dropped = trace_max_events, 0

    def _open(self, name: str, mode: str) -> IO[str]:
        check_still_there(self.dir.parent)  # a removed or renamed DIR.partial: stop with one line, create nothing
        return open(self.dir / name, mode, encoding="utf-8", newline="")

    def accesses(self, layers: tuple[int, ...], token: str) -> None:
        """One task's access (``token``, e.g. ``12F``) of each of ``layers``, in order."""
        self._tasks.append((layers, token))
        self._buffered += len(layers)
        if self._buffered >= self.ACCESS_BUFFER:
            self._write_accesses(fsync=False)

    def _by_layer(self) -> None:
        """Move the tasks' accesses into the per-layer lists, in task order."""
        pending = self._pending
        for layers, token in self._tasks:
            for layer in layers:
                pending[layer].append(token)
        self._tasks.clear()

    def flush_layer(self, layer: int) -> None:
        """Append the layer's buffered accesses now (before its state moves to another stage, whose
        accesses must follow these in the same file)."""
        self._by_layer()
        tokens = self._pending.pop(layer, None)
        if tokens:
            with self._open(access_log(layer), "a") as f:
                f.write("".join(t + "-" for t in tokens))
            self._buffered -= len(tokens)

    def _write_accesses(self, fsync: bool) -> None:
        self._by_layer()
        for layer, tokens in self._pending.items():
            with self._open(access_log(layer), "a") as f:
                f.write("".join(t + "-" for t in tokens))
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
        self._pending.clear()
        self._buffered = 0

    def loss(self, subnet: int, value: float) -> None:
        if self._losses is None:
            raise RuntimeError("only the last stage logs losses")
        self._losses.write(f"{subnet},{float.hex(value)}\n")

    def event(self, name: str, category: str, start: float, end: float, subnet: int | None) -> None:
        """A Chrome trace event (complete, ``ph: X``) of ``end - start`` seconds from the run's origin."""
        if self.trace_left <= 0:
            self.trace_dropped += 1
            return
        self.trace_left -= 1
        self._events.append((name, category, start, end, subnet))
        if len(self._events) >= self.EVENT_BUFFER:
            self._write_events()

    def _write_events(self) -> None:
        """The kept events as JSON lines (microseconds, rounded to 0.1)."""
        lines = []
        for name, category, start, end, subnet in self._events:
            event: dict[str, object] = {"name": name, "cat": category, "ph": "X", "pid": 0, "tid": self.stage,
                                        "ts": round(start * 1e6, 1), "dur": round((end - start) * 1e6, 1)}
            if subnet is not None:
                event["args"] = {"subnet": subnet}
            lines.append(json.dumps(event) + "\n")
        self._events.clear()
        self._trace.write("".join(lines))

    def sync(self) -> dict[str, int]:
        """Write out and fsync every log (the trace too); the valid length of each resumable one."""
        check_still_there(self.dir.parent)
        self._write_accesses(fsync=True)
        self._write_events()
        for f in (self._losses, self._trace):
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
        lengths = {access_log(lid): (self.dir / access_log(lid)).stat().st_size for lid in self._layers}
        if self._losses is not None:
            lengths[LOSSES] = self._losses.tell()
        return lengths

    def close(self) -> None:
        self.sync()
        self._close_files()

    def abort(self) -> None:
        """The stage failed: close the open files now (their buffered lines go out with the close).

        Left open, they would be flushed whenever the dead worker is collected: in a process that
        resumes the run (tests, notebooks: one-stage runs train in the caller's process), that can be
        after the resume truncated the logs to its checkpoint's lengths, appending the failed run's
        last lines to the resumed run's (a duplicated loss row). No fsync: a resume truncates them.
        The kept trace events go out first, as they would have been written already (the accesses
        are not written: a resume rewrites them from its checkpoint).
        """
        if not self._trace.closed:
            self._write_events()
        self._close_files()

    def _close_files(self) -> None:
        for f in (self._losses, self._trace):
            if f is not None and not f.closed:
                f.close()


class Recorder:
    def __init__(self, stage: int, logs: StageLogs) -> None:
        self.stage = stage
        self.logs = logs
        self.t0 = time.perf_counter()  # (re)set by the launcher when every stage is built
        self.seconds: dict[str, float] = defaultdict(float)
        self.tasks = 0

    @property
    def t0(self) -> float:
        """The run's clock origin; setting it also restarts the CPU clock of ``loop_cpu_s``."""
        return self._t0

    @t0.setter
    def t0(self, value: float) -> None:
        self._t0, self._cpu0 = value, time.process_time()
        self._end: tuple[float, float] | None = None

    def finish(self) -> None:
        """The stage's last task is done: its span (and ``loop_cpu_s``) ends here, so the run's
        makespan is training time, like the plain loop's, without the end-of-run drain (fsync of the
        logs, layer digests, the final checkpoint) that a run pays once whatever its length."""
        self._end = (self.now(), time.process_time() - self._cpu0)

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def span(self, category: str, name: str, start: float, end: float, subnet: int | None = None) -> None:
        self.seconds[category] += end - start
        self.logs.event(name, category, start, end, subnet)

    def touch(self, layers: tuple[int, ...], subnet: int, kind: str) -> None:
        self.logs.accesses(layers, f"{subnet}{kind}")

    def report(self, hashes: dict[int, str], extra: dict[str, float]) -> StageReport:
        self.logs.close()
        span, cpu = self._end if self._end is not None else (self.now(), time.process_time() - self._cpu0)
        # loop_cpu_s: this process's CPU time (all its threads) over the span, less sensitive to load
        # process_cpu_s: everything this process has spent so far (start-up, building, the loop): what a
        # stage costs the machine, which loop_cpu_s leaves out
        extra = {**extra, "trace_dropped": float(self.logs.trace_dropped), "loop_cpu_s": cpu,
                 "process_cpu_s": _process_cpu_s()}
        return StageReport(
            stage=self.stage, layer_hashes=hashes, seconds={c: self.seconds.get(c, 0.0) for c in CATEGORIES},
            span_s=span, tasks=self.tasks, extra=extra,
        )


def _process_cpu_s() -> float:
    """User + system CPU seconds of this process (all its threads) since it started."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
