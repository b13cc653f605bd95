"""What a compiled build of the simulator's hot modules would give: mypyc, the code untouched, timed beside it.

Issue 22's cached bar (64 x 100,000 with the context cache in 5 minutes) needs 2-3x less
time per task than the pure-Python scheduling core takes. The route left after eight passes
of exact, measured trimming is native code; this measures the cheapest form of it, the
project's own typed modules compiled by mypyc (shipped with the pinned mypy), so the
decision to add a C build step to every install rests on a figure:

1. ``git archive HEAD`` into ``--dir`` (the committed tree, nothing uncommitted);
2. one mechanical edit mypyc needs (``_Ranking.build`` makes its instance with
   ``cls.__new__(cls)``, which mypyc's native classes do not support: a constructor instead;
   the same fields, the same decisions);
3. ``mypyc`` of :data:`MODULES` in that copy (2-3 minutes on 2 cores);
4. the issue's commands from both trees, alternately (``cache_cost.pairs``): with the cache
   at ``--cached-subnets`` and without it at ``--uncached-subnets``; both trees' outputs must
   be byte-equal (the same decisions), else it exits non-zero.

The CSP policy (``scheduling/policies/csp.py``) is left out: mypyc refuses it as it stands
(its interpreted subclasses and ``__init_subclass__`` reading ``cls.__dict__``), and the
benchmarks' and tests' method patching fails on native classes.

    python benchmarks/compiled_build.py [--dir /tmp/naspipe-mypyc] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(Path(__file__).resolve().parent))
from cache_cost import pairs  # noqa: E402
from machine_speed import reference_s  # noqa: E402

MODULES = ("naspipe/context/cache.py", "naspipe/scheduling/predictor.py", "naspipe/sim/residency.py",
           "naspipe/sim/engine.py", "naspipe/scheduling/versions.py", "naspipe/sim/tables.py")
_NEW = re.compile(r"        ranking = cls\.__new__\(cls\).*\n"
                  r"        ranking\.sizes, ranking\.order, ranking\.head = cache\.sizes, order, 0\n"
                  r"        return ranking")
_CONSTRUCTED = """        return cls(cache.sizes, order)

    def __init__(self, sizes: Mapping[int, int], order: list[tuple[int, int, int]]) -> None:
        self.sizes, self.order, self.head = sizes, order, 0"""


def build(target: Path) -> None:
    """The committed tree in ``target``, its hot modules compiled in place."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    source = target / "naspipe/context/cache.py"
    text = source.read_text()
    edited, count = _NEW.subn(_CONSTRUCTED, text)
    if count != 1:
        raise SystemExit(f"{source}: _Ranking.build's construction changed; update compiled_build._NEW")
    source.write_text(edited)
    mypyc = Path(sys.executable).with_name("mypyc")
    done = subprocess.run([str(mypyc), *MODULES], cwd=target, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"mypyc failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "naspipe"], cwd=target, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "naspipe"], cwd=ROOT, check=True)


def compare(target: Path, subnets: int, repeats: int, cache: bool) -> dict[str, Any]:
    """Both trees' command alternately; the ratio of medians (interpreted / compiled: above 1, compiled is faster)."""
    runs = pairs([ROOT, target], subnets, 64, repeats, cache)
    plain, compiled = runs[str(ROOT)], runs[str(target)]
    digests = {(r["metrics.json"], r["trace.json"]) for side in (plain, compiled) for r in side["runs"]}
    if len(digests) != 1:
        raise SystemExit(f"the compiled build decided differently: {sorted(digests)}")
    return {"subnets": subnets, "cache": cache, "interpreted": plain, "compiled": compiled,
            "wall_ratio": plain["median_wall_s"] / compiled["median_wall_s"],
            "user_ratio": plain["median_user_s"] / compiled["median_user_s"],
            "max_kb": [statistics.median(r["max_kb"] for r in side["runs"]) for side in (plain, compiled)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/naspipe-mypyc"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cached-subnets", type=int, default=2000)
    parser.add_argument("--uncached-subnets", type=int, default=20000)
    parser.add_argument("--no-build", action="store_true", help="reuse the compiled tree in --dir")
    args = parser.parse_args()
    if not args.no_build:
        build(args.dir)
    result = {"cached": compare(args.dir, args.cached_subnets, args.repeats, True),
              "uncached": compare(args.dir, args.uncached_subnets, args.repeats, False),
              "modules": MODULES, "machine": reference_s()}
    print(json.dumps(result))
    for name in ("cached", "uncached"):
        r = result[name]
        print(f"{name} 64 x {r['subnets']}: compiled {r['wall_ratio']:.2f}x wall, {r['user_ratio']:.2f}x user "
              f"(medians of {args.repeats}); peak {r['max_kb'][0] / 1e3:.0f} MB -> {r['max_kb'][1] / 1e3:.0f} MB",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
