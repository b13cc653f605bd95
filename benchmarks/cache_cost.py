"""The context cache's cost per task in the simulator (docs/performance.md, "The context cache"), as figures.

Four measurements, each for the tree on ``PYTHONPATH`` (run once per tree to compare)::

    python benchmarks/cache_cost.py window --subnets 10000        # the whole run, CPU us per task
    python benchmarks/cache_cost.py record --subnets 300 --log FILE
    python benchmarks/cache_cost.py replay --log FILE --repeats 6  # the DeviceCache alone
    python benchmarks/cache_cost.py residency --subnets 300        # the cache path without the predictor
    python benchmarks/cache_cost.py residency --subnets 300 --split  # ... and where its time goes
    python benchmarks/cache_cost.py levels --subnets 2000 --repeats 3  # the whole command, layer by layer
    python benchmarks/cache_cost.py opcodes --subnets 100             # bytecodes per task in the cache's modules
    python benchmarks/cache_cost.py pairs --trees A B --subnets 2000 --repeats 3  # two trees' commands, alternately

``window`` runs ``naspipe simulate`` (toy, 126 blocks x 24 candidates, csp, uniform costs,
``cache.enabled=true``) in this process and takes the process's CPU clock every 192,000
tasks (``ContextCache.acquire`` calls): the median over those windows is the steady cost per
task, free of start-up and of the run's length. ``record`` keeps every ``DeviceCache`` call
of such a run with its answer; ``replay`` makes the same calls on fresh caches of the tree
it runs in, checks every answer equal to the recorded one and reports the CPU seconds of the
calls alone (median over repeats): the cache's own cost, without the predictor or the engine.
``residency`` records one run's ``ContextCache`` calls and predictions and replays the calls on fresh
residencies, ``predict`` answering what it answered: the residency and the DeviceCache without the
predictor (the cache's share of a task's cost). ``levels`` runs the whole command in
fresh processes with ``ContextCache.acquire`` cut down to each of :data:`LEVELS` in turn (alternating, the
median CPU seconds of each): what the engine costs with a residency that does nothing, and what the
prediction, the upcoming tasks' layer lists and the cache each add on top. Only ``full`` is the real run
(the others never wait for a copy, so their schedules differ a little). ``opcodes`` counts the bytecodes run in
``sim/residency.py`` and ``context/cache.py`` per task, by function (``sys.settrace`` opcode events: the same on a
loaded machine as on a quiet one; the run is slow under it). ``pairs`` runs the issue's command (``python -m naspipe
simulate ...``, a fresh process) from each tree's directory with ``PYTHONPATH`` set to it, the trees alternating,
and reports wall and user seconds, peak memory and the outputs' sha256 (equal outputs: the same decisions).
Timings vary with the machine's load: compare trees alternately, in one sitting.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH, when set, picks the tree

from naspipe.cli import main as naspipe_main  # noqa: E402
from naspipe.context import cache as cache_module  # noqa: E402
from naspipe.sim import residency  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parent))
from machine_speed import reference_s  # noqa: E402

WINDOW = 192_000  # tasks per window: about 1,000 subnets at 64 stages
CALLS = ("acquire_and_prefetch", "acquire", "prefetch", "release", "arrived", "discard")


def command(subnets: int, stages: int, out: Path, cache: bool = True) -> list[str]:
    """The issue's command with the cache on (``cache``; off: item 1's command): ``naspipe``'s arguments."""
    return ["simulate", "--space", "toy", "--set", "space.blocks=126", "--set", "space.candidates=24",
            "--system", "csp", "--stages", str(stages), "--steps", str(subnets), "--costs", "uniform",
            *(["--set", "cache.enabled=true"] if cache else []), "--out", str(out), "--overwrite"]


def simulate(subnets: int, stages: int, out: Path) -> None:
    """The issue's command with the cache on, in this process."""
    naspipe_main(command(subnets, stages, out))


def window(subnets: int, stages: int) -> dict[str, Any]:
    """CPU microseconds per task in each window of :data:`WINDOW` tasks, and their median."""
    marks: list[float] = []
    count = [0]
    original = residency.ContextCache.acquire

    def counted(self: residency.ContextCache, *args: Any) -> float:
        count[0] += 1
        if count[0] % WINDOW == 0:
            marks.append(time.process_time())
        return original(self, *args)

    residency.ContextCache.acquire = counted  # type: ignore[method-assign]
    start = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        simulate(subnets, stages, Path(tmp) / "run")
    per_task = [(b - a) / WINDOW * 1e6 for a, b in zip(marks, marks[1:], strict=False)]
    return {"tasks": count[0], "cpu_s": round(time.process_time() - start, 2),
            "windows_us": [round(x, 1) for x in per_task],
            "median_us": round(statistics.median(per_task), 2) if per_task else None}


def residency_replay(subnets: int, stages: int, repeats: int, split: bool = False) -> dict[str, Any]:
    """The simulator's residency calls without the predictor: one run records every ``ContextCache`` call with
    its answer and every prediction; each repeat makes the same calls on fresh ``ContextCache`` objects (same
    constructor arguments) with ``predict`` answering the recorded tasks, checks every answer and reports the
    CPU seconds of the calls: the cache path's own cost (layer lists, DeviceCache, copies), in this process.
    ``split`` adds where it goes (:func:`_split`)."""
    made, calls, predictions = _record_residency(subnets, stages)
    seconds = [_replay_residency(made, calls, predictions) for _ in range(repeats)]
    tasks = sum(1 for call in calls if call[1] == "acquire")
    result = {"tasks": tasks, "cpu_s": [round(x, 3) for x in seconds], "median_s": round(statistics.median(seconds), 3),
              "us_per_task": round(statistics.median(seconds) / max(tasks, 1) * 1e6, 2)}
    if split:
        result |= _split(made, calls, predictions, repeats, tasks)
    return result


Calls = list[tuple[int, str, tuple[Any, ...], Any]]  # (ContextCache index, method, arguments, answer)


def _record_residency(subnets: int, stages: int) -> tuple[list[tuple[Any, ...]], Calls, list[list[Any]]]:
    """One run's ``ContextCache`` constructions, calls (with answers) and predictions, in this process."""
    made: list[tuple[Any, ...]] = []
    calls: Calls = []
    predictions: list[list[Any]] = []
    cls, predict = residency.ContextCache, residency.predict
    init, methods = cls.__init__, {name: getattr(cls, name) for name in ("acquire", "release", "replaced")}

    def constructed(self: Any, *args: Any) -> None:
        init(self, *args)
        self._bench_index = len(made)
        made.append(args)

    def wrap(name: str) -> Callable[..., Any]:
        def called(self: Any, *args: Any) -> Any:
            answer = methods[name](self, *args)
            calls.append((self._bench_index, name, args, answer))
            return answer
        return called

    def recorded(*args: Any, **kwargs: Any) -> list[Any]:
        tasks = predict(*args, **kwargs)
        predictions.append(tasks)
        return tasks

    patches = {"__init__": constructed} | {name: wrap(name) for name in methods}
    originals = {name: getattr(cls, name) for name in patches}
    for name, method in patches.items():
        setattr(cls, name, method)
    residency.predict = recorded  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            simulate(subnets, stages, Path(tmp) / "run")
    finally:
        for name, method in originals.items():
            setattr(cls, name, method)
        residency.predict = predict  # type: ignore[assignment]
    return made, calls, predictions


def _split(made: list[tuple[Any, ...]], calls: Calls, predictions: list[list[Any]], repeats: int,
           tasks: int) -> dict[str, Any]:
    """Where the replay's time goes: the residency around the DeviceCache (its one call per task answering the
    recorded moves: layer lists, landing, copies, and this harness), and the DeviceCache's calls timed one by
    one (``perf_counter_ns`` around each: about 0.1-0.3 us of it is the timer), apart for those with moves."""
    cls = cache_module.DeviceCache
    method = cls.acquire_prefetch_release
    answers: list[Any] = []
    timed: dict[str, list[int]] = {"moves": [0, 0], "none": [0, 0]}
    clock = time.perf_counter_ns

    def recording(self: Any, *args: Any) -> Any:
        moves = method(self, *args)
        answers.append(moves)
        return moves

    def timing(self: Any, *args: Any) -> Any:
        start = clock()
        moves = method(self, *args)
        bucket = timed["moves" if moves else "none"]
        bucket[0] += 1
        bucket[1] += clock() - start
        return moves

    told: list[Any] = []

    def told_moves(self: Any, *args: Any) -> Any:
        return next(told[0])

    try:
        cls.acquire_prefetch_release = recording  # type: ignore[method-assign]
        _replay_residency(made, calls, predictions)
        cls.acquire_prefetch_release = told_moves  # type: ignore[method-assign]
        glue = []
        for _ in range(repeats):
            told[:] = [iter(answers)]
            glue.append(_replay_residency(made, calls, predictions))
        cls.acquire_prefetch_release = timing  # type: ignore[method-assign]
        for _ in range(repeats):
            _replay_residency(made, calls, predictions)
    finally:
        cls.acquire_prefetch_release = method  # type: ignore[method-assign]
    glue_us = round(statistics.median(glue) / tasks * 1e6, 2)
    split: dict[str, Any] = {"residency_without_devicecache_us_per_task": glue_us}
    for kind, (count, ns) in timed.items():
        split[f"devicecache_{kind}"] = {"share_of_tasks": round(count / repeats / tasks, 3),
                                        "us_per_call": round(ns / max(count, 1) / 1e3, 2),
                                        "us_per_task": round(ns / repeats / tasks / 1e3, 2)}
    return split


def _replay_residency(made: list[tuple[Any, ...]], calls: Calls,
                      predictions: list[list[Any]]) -> float:
    """One replay of the recorded residency calls; raises if an answer differs."""
    caches = [residency.ContextCache(*args) for args in made]
    bound = [(getattr(caches[index], name), args) for index, name, args, _ in calls]
    answers: list[Any] = []
    told = iter(predictions)
    predict = residency.predict
    residency.predict = lambda *args, **kwargs: next(told)  # type: ignore[assignment]
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        answers = [method(*args) for method, args in bound]
        elapsed = time.process_time() - start
    finally:
        gc.enable()
        residency.predict = predict  # type: ignore[assignment]
    for n, (got, call) in enumerate(zip(answers, calls, strict=True)):
        if got != call[3]:
            raise AssertionError(f"call {n} ({call[1]}): the residency answered {got!r}, recorded {call[3]!r}")
    return elapsed


def _answer(result: Any) -> Any:
    return [(m.layer, m.nbytes, m.direction) for m in result] if isinstance(result, list) else result


def record(subnets: int, stages: int, log: Path) -> int:
    """Every DeviceCache construction and call of one run, with its answer, pickled to ``log``."""
    entries: list[tuple[Any, ...]] = []
    ids: dict[int, int] = {}
    cls = cache_module.DeviceCache
    init = cls.__init__

    def constructed(self: Any, budget: int, sizes: Any, resident: Any = ()) -> None:
        init(self, budget, sizes, resident)
        ids[id(self)] = len(ids)
        entries.append(("init", ids[id(self)], budget, dict(sizes), tuple(resident)))

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def called(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = method(self, *args, **kwargs)
            entries.append((name, ids[id(self)], args, kwargs, _answer(result)))
            return result
        return called

    cls.__init__ = constructed  # type: ignore[method-assign]
    for name in CALLS:
        setattr(cls, name, wrap(name, getattr(cls, name)))
    with tempfile.TemporaryDirectory() as tmp:
        simulate(subnets, stages, Path(tmp) / "run")
    log.write_bytes(pickle.dumps(entries))
    return len(entries)


def replay(log: Path, repeats: int, apart: bool = False) -> dict[str, Any]:
    """The recorded calls on this tree's DeviceCache: CPU seconds per repeat; raises if an answer differs.

    A task's ``acquire_and_prefetch`` and its ``release`` (the simulator makes them back to back, with only
    ``arrived`` calls of that cache between) are replayed as one ``acquire_prefetch_release`` where the tree
    has it (as its simulator calls it), unless ``apart``."""
    entries = pickle.loads(log.read_bytes())
    fuse = not apart and hasattr(cache_module.DeviceCache, "acquire_prefetch_release")
    seconds = []
    for _ in range(repeats):
        caches: dict[int, Any] = {}
        calls: list[tuple[Callable[[], Any], Any]] = []
        fused = _fused(entries) if fuse else set()
        for n, entry in enumerate(entries):
            if entry[0] == "init":
                caches[entry[1]] = cache_module.DeviceCache(*entry[2:])
                continue
            name, index, args, kwargs, answer = entry
            if n in fused:
                if name == "release":
                    continue
                layers, upcoming = args
                dirty = fused[n]
                cache = caches[index]
                calls.append(((lambda c=cache, a=(layers, upcoming, dirty): c.acquire_prefetch_release(*a)),
                              answer))
                continue
            calls.append((_bound(caches[index], name, args, kwargs), answer))
        gc.collect()
        gc.disable()  # as the engine runs the cache (sim/engine.py): the recorded log is not the cache's cost
        try:
            start = time.process_time()
            answers = [call() for call, _ in calls]
            seconds.append(time.process_time() - start)
        finally:
            gc.enable()
        for n, (got, (_, want)) in enumerate(zip(answers, calls, strict=True)):
            if _answer(got) != want:
                raise AssertionError(f"call {n}: the cache answered {_answer(got)!r}, recorded {want!r}")
    tasks = sum(1 for e in entries if e[0] in ("acquire_and_prefetch", "acquire"))
    return {"calls": len(calls), "fused": fuse, "tasks": tasks,
            "cpu_s": [round(s, 3) for s in seconds], "median_s": round(statistics.median(seconds), 3),
            "us_per_task": round(statistics.median(seconds) / max(tasks, 1) * 1e6, 2)}


def _fused(entries: list[tuple[Any, ...]]) -> dict[int, bool]:
    """Indices of each ``acquire_and_prefetch`` (-> its release's ``dirty``) and of its ``release`` (-> the
    same) where the release of the same layers follows on that cache with only ``arrived`` calls between."""
    fused: dict[int, bool] = {}
    open_task: dict[int, int] = {}  # cache -> index of its acquire_and_prefetch still unreleased
    for n, entry in enumerate(entries):
        if entry[0] == "init":
            continue
        name, index, args, kwargs = entry[:4]
        start = open_task.pop(index, None)
        if name == "acquire_and_prefetch":
            open_task[index] = n
        elif name == "arrived" and start is not None:
            open_task[index] = start
        elif name == "release" and start is not None and tuple(args[0]) == tuple(entries[start][2][0]):
            dirty = bool(kwargs.get("dirty", args[1] if len(args) > 1 else False))
            fused[start] = fused[n] = dirty
    return fused


def _bound(cache: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """The recorded call on ``cache``; a tree without the fused call makes its two calls (the same moves)."""
    if name == "acquire_and_prefetch" and not hasattr(cache, name):
        layers, upcoming = args
        return lambda: cache.acquire(layers, upcoming) + cache.prefetch(upcoming)
    method = getattr(cache, name)
    return lambda: method(*args, **kwargs)


LEVELS = ("none", "predict", "layers", "full")
"""How much of ``ContextCache.acquire`` a ``levels`` run keeps: nothing (the task starts now), the prediction,
the prediction's layer lists (with the started task's entry dropped), or all of it (the cache's moves and waits)."""


def _cut_acquire(level: str) -> None:
    """Replace ``ContextCache.acquire`` by the part of it that ``level`` keeps (:data:`LEVELS`)."""
    from naspipe.scheduling.predictor import predict

    def cut(self: residency.ContextCache, task: Any, layers: Any, now: float) -> float:
        if level == "none":
            return now
        tasks = predict(self.policy, self.horizon, self.end, running=task)
        if level == "layers":
            list(map(self._layers_of, tasks))
            self._uses.pop(task, None)
        return now

    if level != "full":
        residency.ContextCache.acquire = cut  # type: ignore[method-assign]


def levels(subnets: int, stages: int, repeats: int) -> dict[str, Any]:
    """CPU seconds of the whole command at each of :data:`LEVELS`, each in a fresh process, levels alternating."""
    seconds: dict[str, list[float]] = {level: [] for level in LEVELS}
    for _ in range(repeats):
        for level in LEVELS:
            with tempfile.TemporaryDirectory() as tmp:
                out = subprocess.run([sys.executable, __file__, "_level", level, "--subnets", str(subnets),
                                      "--stages", str(stages), "--log", str(Path(tmp) / "run")],
                                     check=True, capture_output=True, text=True).stdout
            seconds[level].append(float(out.split()[-1]))
    median = {level: statistics.median(times) for level, times in seconds.items()}
    tasks = 3 * subnets * stages
    added = {f"{level} - {below}": round((median[level] - median[below]) / tasks * 1e6, 2)
             for below, level in zip(LEVELS, LEVELS[1:], strict=False)}
    return {"tree": str(Path(residency.__file__).parents[2]), "tasks": tasks, "cpu_s": seconds,
            "median_s": median, "added_us_per_task": added}


MODULES = ("sim/residency.py", "context/cache.py")


def opcodes(subnets: int, stages: int) -> dict[str, Any]:
    """Bytecodes run per task in :data:`MODULES`, by function name, over one run in this process."""
    counts: dict[str, int] = {}

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            name = frame.f_code.co_name
            counts[name] = counts.get(name, 0) + 1
        return local

    def called(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename.endswith(MODULES):
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(called)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            simulate(subnets, stages, Path(tmp) / "run")
    finally:
        sys.settrace(None)
    tasks = 3 * subnets * stages
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    return {"tasks": tasks, "per_task": round(sum(counts.values()) / tasks, 1),
            "by_function": {name: round(count / tasks, 1) for name, count in ranked}}


def pairs(trees: list[Path], subnets: int, stages: int, repeats: int, cache: bool = True) -> dict[str, Any]:
    """The issue's command from each tree in turn, ``repeats`` rounds: wall and user seconds, peak KB, sha256."""
    runs: dict[str, list[dict[str, Any]]] = {str(tree): [] for tree in trees}
    for _ in range(repeats):
        for tree in trees:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "run"
                argv = [sys.executable, "-m", "naspipe", *command(subnets, stages, out, cache)]
                env = {**os.environ, "PYTHONPATH": str(tree)}
                start = time.perf_counter()
                child = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL)
                _, status, usage = os.wait4(child.pid, 0)
                wall = time.perf_counter() - start
                if status:
                    raise RuntimeError(f"{tree}: the command failed ({status})")
                digests = {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                           for name in ("metrics.json", "trace.json")}
            runs[str(tree)].append({"wall_s": round(wall, 2), "user_s": round(usage.ru_utime, 2),
                                    "max_kb": usage.ru_maxrss, **digests})
    return {tree: {"runs": done, "median_wall_s": statistics.median(r["wall_s"] for r in done),
                   "median_user_s": statistics.median(r["user_s"] for r in done)} for tree, done in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("window", "record", "replay", "residency", "levels", "_level", "opcodes",
                                         "pairs"))
    parser.add_argument("level", nargs="?", choices=LEVELS, help="_level (internal: one run of levels)")
    parser.add_argument("--subnets", type=int, default=3000)
    parser.add_argument("--stages", type=int, default=64)
    parser.add_argument("--log", type=Path, help="record: where to write the calls; replay: the calls to make")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--apart", action="store_true", help="replay: each recorded call as it was made")
    parser.add_argument("--split", action="store_true", help="residency: also where the time goes (see _split)")
    parser.add_argument("--trees", type=Path, nargs="+", help="pairs: the checkouts to run, in turn")
    args = parser.parse_args(argv)
    if args.what == "window":
        print(json.dumps({**window(args.subnets, args.stages), "machine": reference_s()}))
    elif args.what == "opcodes":
        print(json.dumps(opcodes(args.subnets, args.stages)))
    elif args.what == "pairs":
        if not args.trees:
            parser.error("pairs needs --trees A [B ...]")
        result = pairs([tree.resolve() for tree in args.trees], args.subnets, args.stages, args.repeats)
        print(json.dumps({**result, "machine": reference_s()}))
    elif args.what == "levels":
        print(json.dumps({**levels(args.subnets, args.stages, args.repeats), "machine": reference_s()}))
    elif args.what == "_level":
        _cut_acquire(args.level)
        start = time.process_time()
        simulate(args.subnets, args.stages, args.log)
        print(time.process_time() - start)
    elif args.what == "residency":
        print(json.dumps(residency_replay(args.subnets, args.stages, args.repeats, args.split)))
    elif args.log is None:
        parser.error(f"{args.what} needs --log FILE")
    elif args.what == "record":
        print(f"{record(args.subnets, args.stages, args.log)} calls recorded in {args.log}")
    else:
        print(json.dumps(replay(args.log, args.repeats, args.apart)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
