"""The predictor's cost per call in the simulator (docs/performance.md, "The context cache"), as figures.

Two measurements, each for the tree on ``PYTHONPATH`` (run once per tree, alternately, to compare)::

    python benchmarks/predictor_cost.py calls --subnets 1000   # every predict call of a run, timed
    python benchmarks/predictor_cost.py states --subnets 150 --horizon 8 --repeats 5

``calls`` runs the issue's command (toy, 126 blocks x 24 candidates, csp, uniform costs, the
cache on; :func:`cache_cost.simulate`) in this process with each of ``ContextCache``'s
``predict`` calls wrapped in ``perf_counter_ns`` (about 0.05 us of overhead per call), split by
the running task's kind and by whether the answer was a fresh run-ahead, the last one shifted, or the
last one resumed after an unforeseen gradient ("continued"; trees without the shift report every call
as fresh), with the resumes tried and given up. Every call goes through ``itertools.starmap``,
so under ``valgrind --tool=callgrind --collect-atstart=no --toggle-collect=starmap_next`` the
instructions counted are the predictor's alone (the slope between two sizes: its cost per task).
``states`` keeps clones of the live CSP policies at about 200 calls of the run's last two thirds and
times a fresh prediction on each (the same running task every time, so never a shift): the fixed cost
of a call. Run under
``valgrind --tool=callgrind --collect-atstart=no --toggle-collect=starmap_next`` it counts the
instructions of those calls alone (repeatable under load).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from itertools import starmap
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent))  # cache_cost, beside this file
sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH, when set, picks the tree

from cache_cost import simulate  # noqa: E402

from naspipe.scheduling import predictor  # noqa: E402
from naspipe.scheduling.policies.base import StagePolicy  # noqa: E402
from naspipe.scheduling.task import Task  # noqa: E402
from naspipe.sim import residency  # noqa: E402


def _continue_counter() -> dict[str, int]:
    """Counts the resumes tried (``CSPLookahead._continue``) and those that gave up, where the tree has them."""
    tried = {"tried": 0, "gave up": 0}
    original = getattr(predictor.CSPLookahead, "_continue", None)
    if original is not None:
        def counted(self: Any, *args: Any) -> Any:
            got = original(self, *args)
            tried["tried"] += 1
            tried["gave up"] += got is None
            return got
        predictor.CSPLookahead._continue = counted  # type: ignore[method-assign]
    return tried


def _how(look: Any, before: tuple[int, int]) -> str:
    """How ``look`` (a stage's lookahead, or None) answered since its counts were ``before``."""
    if look is None or not hasattr(look, "reused"):
        return "fresh"
    if look.reused > before[0]:
        return "shifted"
    return "continued" if getattr(look, "continued", 0) > before[1] else "fresh"


def calls(subnets: int, stages: int) -> dict[str, Any]:
    """Microseconds per predict call (mean, median, total seconds), by how it was answered (fresh, the last
    answer shifted, or resumed: continued) and the running task's kind."""
    times: dict[str, list[int]] = defaultdict(list)
    resumes, original, clock = _continue_counter(), residency.predict, time.perf_counter_ns

    def timed(policy: StagePolicy, horizon: int, end: int, running: Task | None = None) -> list[Task]:
        look = predictor._fast_lookahead(policy)
        before = (getattr(look, "reused", 0), getattr(look, "continued", 0))
        start = clock()
        # through starmap: under callgrind --toggle-collect=starmap_next only the predictor is counted
        answer = next(starmap(original, ((policy, horizon, end, running),)))
        elapsed = clock() - start
        times[_how(look, before) + " " + (running[0].value if running else "-")].append(elapsed)
        return answer

    residency.predict = timed  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        simulate(subnets, stages, Path(tmp) / "run")
    every = [t for ts in times.values() for t in ts]
    rows = {key: {"calls": len(ts), "mean_us": round(statistics.mean(ts) / 1e3, 2),
                  "median_us": round(statistics.median(ts) / 1e3, 2), "total_s": round(sum(ts) / 1e9, 3)}
            for key, ts in sorted(times.items())}
    return {"tree": str(Path(predictor.__file__).parents[2]), "calls": len(every),
            "mean_us": round(statistics.mean(every) / 1e3, 2), "total_s": round(sum(every) / 1e9, 3),
            "resumes": resumes, "by": rows}


def states(subnets: int, stages: int, horizon: int, repeats: int) -> dict[str, Any]:
    """A fresh prediction's cost at captured mid-run states: median microseconds per call over repeats."""
    kept: list[tuple[StagePolicy, int, Task | None]] = []
    seen, original = [0], residency.predict

    def capture(policy: StagePolicy, h: int, end: int, running: Task | None = None) -> list[Task]:
        seen[0] += 1
        if seen[0] % 97 == 0 and seen[0] > stages * subnets:
            clone = policy.clone()
            clone.speculative = False
            kept.append((clone, end, running))
        return original(policy, h, end, running=running)

    residency.predict = capture  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        simulate(subnets, stages, Path(tmp) / "run")
    residency.predict = original
    predict = predictor.predict

    def one(policy: StagePolicy, end: int, running: Task | None) -> list[Task]:
        return predict(policy, horizon, end, running)  # the same running task each time: never a shift

    for _ in starmap(one, kept):  # warm: each clone's lookahead built and registered
        pass
    gc.collect()
    gc.disable()  # as the engine runs: no collection inside the measured calls
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in starmap(one, kept):  # callgrind --toggle-collect=starmap_next counts these calls only
            pass
        per_call.append((time.perf_counter() - start) / len(kept) * 1e6)
    gc.enable()
    return {"tree": str(Path(predictor.__file__).parents[2]), "states": len(kept), "horizon": horizon,
            "calls": len(kept) * (repeats + 1), "median_us": round(statistics.median(per_call), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("calls", "states"):
        p = sub.add_parser(name)
        p.add_argument("--subnets", type=int, default=1000 if name == "calls" else 150)
        p.add_argument("--stages", type=int, default=64)
        if name == "states":
            p.add_argument("--horizon", type=int, default=8)
            p.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.what == "calls":
        result = calls(args.subnets, args.stages)
    else:
        result = states(args.subnets, args.stages, args.horizon, args.repeats)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
