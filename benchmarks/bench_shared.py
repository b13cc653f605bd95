"""Shared-layer policies side by side: what ``windowed`` costs in throughput and buys in learning.

1. Throughput: csp at D stages (default 4) with ``shared_policy`` frozen, windowed (W =
   ``--window``) and causal, on nlp.tiny and cv.tiny, interleaved in one run (``--repeats``
   rounds of the three), with the workflow config's ``train_options``. Reports the median
   ``throughput_samples_s`` of each and the ratios to frozen, measured side by side.
2. Learning at equal steps: for each seed, one supernet per policy (frozen, windowed) trained
   ``--steps`` steps (csp, D = 1: the weights are bitwise the same at any D) on the default
   workflow's data (built as the workflow builds it, :func:`bench_search.workflow_data`) or a
   prepared ``--data DIR``; ``--sample`` uniformly drawn subnets (the same for both) scored on
   the valid split with the supernet's weights. Reports, per policy, the median over seeds of
   the mean validation loss, BLEU (nlp) or top-1 (cv), and on how many seeds windowed beats
   frozen. Equal wall time follows from part 1's ratio (steps cost what the ratio says).

    python benchmarks/bench_shared.py [--spaces nlp.tiny cv.tiny] [--stages 4] [--window 8]
        [--repeats 3] [--throughput-steps 32] [--steps 64] [--seeds 3] [--sample 8]
        [--data workflow|generated|DIR] [--set KEY=VALUE] [--skip-throughput] [--skip-learning] [--json FILE]

Real samples (../shared/data): prepare them first, e.g. ``naspipe prepare imagenet --root
../shared/data/cifar10-imagefolder --resize 16 --crop 16 --out DIR`` for cv.tiny, and
``naspipe prepare wmt`` of multi30k with ``--vocab-size V`` plus ``--set space.vocab=V``.

Not asserted anywhere: the machine is shared; report the load (``uptime``) with the figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import check, workflow_data  # noqa: E402  (the workflow's data, built once, the same way)

from naspipe.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCORES = {"nlp.tiny": ("loss", "bleu"), "cv.tiny": ("loss", "top1")}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--spaces", nargs="+", default=["nlp.tiny", "cv.tiny"])
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    p.add_argument("--data", default="workflow", help="workflow (the config's dataset), generated, or a prepared DIR")
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--throughput-steps", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="training steps of the learning comparison")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--sample", type=int, default=8, help="subnets scored per supernet")
    p.add_argument("--batches", type=int, default=4, help="held-out batches per subnet score")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-learning", action="store_true")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="extra training override (after the config's train_options), e.g. space.vocab=1000")
    p.add_argument("--json", type=Path)
    return p.parse_args()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="bench-shared-"))
        self.config = yaml.safe_load(args.config.read_text(encoding="utf-8"))
        self._data: dict[str, Path | None] = {}

    def data(self, space: str) -> Path | None:
        if space not in self._data:
            a = self.args.data
            self._data[space] = (workflow_data(self.config, space, self.root / space) if a == "workflow"
                                 else None if a == "generated" else Path(a))
        return self._data[space]

    def train(self, out: Path, space: str, shared: str, stages: int, steps: int, seed: int) -> dict[str, Any]:
        data = self.data(space)
        sets = [f"{k}={v}" for k, v in sorted(self.config.get("train_options", {}).items())]
        sets += ["progress=off", "threads=1", f"shared_policy={shared}", f"shared_window={self.args.window}",
                 *self.args.overrides]
        sets += [f"space.data={data}"] if data is not None else []
        check(main(["train", "--space", space, "--system", "csp", "--stages", str(stages), "--steps", str(steps),
                    "--seed", str(seed), *(a for kv in sets for a in ("--set", kv)), "--out", str(out)]))
        metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
        return metrics

    def throughput(self, space: str) -> dict[str, Any]:
        a = self.args
        found: dict[str, list[float]] = {"frozen": [], "windowed": [], "causal": []}
        for r in range(a.repeats):
            for shared in found:
                out = self.root / f"tp-{space}-{shared}-{r}"
                found[shared].append(self.train(out, space, shared, a.stages, a.throughput_steps, 0)
                                     ["throughput_samples_s"])
        med = {k: statistics.median(v) for k, v in found.items()}
        return {"runs": found, "median": med, "windowed_vs_frozen": med["windowed"] / med["frozen"],
                "causal_vs_frozen": med["causal"] / med["frozen"]}

    def learning(self, space: str) -> dict[str, Any]:
        a = self.args
        per: dict[str, list[dict[str, float]]] = {"frozen": [], "windowed": []}
        for seed in range(a.seeds):
            for shared in per:
                run = self.root / f"learn-{space}-{shared}-{seed}"
                self.train(run, space, shared, 1, a.steps, seed)
                scores = run / "scores.csv"
                check(main(["evaluate", "--run", str(run), "--sample", str(a.sample), "--seed", "7",
                            "--batches", str(a.batches), "--threads", "1", "--out", str(scores)]))
                with open(scores, encoding="utf-8") as f:
                    rows = list(csv.DictReader(f))
                per[shared].append({m: statistics.fmean(float(r[m]) for r in rows) for m in SCORES[space]})
        loss, quality = SCORES[space]
        wins = sum(w[quality] > f[quality] for w, f in zip(per["windowed"], per["frozen"], strict=True))
        lower = sum(w[loss] < f[loss] for w, f in zip(per["windowed"], per["frozen"], strict=True))
        return {"per_seed": per, "median": {s: {m: statistics.median(x[m] for x in v) for m in SCORES[space]}
                                            for s, v in per.items()},
                f"windowed_higher_{quality}_seeds": wins, "windowed_lower_loss_seeds": lower, "seeds": a.seeds}


def table(result: dict[str, Any]) -> str:
    lines = [f"load: {result['load']}"]
    for space, r in result["spaces"].items():
        if "throughput" in r:
            t = r["throughput"]
            m = t["median"]
            lines.append(f"{space} csp D={result['stages']} samples/s (median of {result['repeats']}): "
                         f"frozen {m['frozen']:.1f}, windowed {m['windowed']:.1f} "
                         f"({t['windowed_vs_frozen']:.2f}x), causal {m['causal']:.1f} ({t['causal_vs_frozen']:.2f}x)")
        if "learning" in r:
            lr = r["learning"]
            for shared, scores in lr["median"].items():
                text = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
                lines.append(f"{space} {result['steps']} steps, median of {lr['seeds']} seeds, {shared}: {text}")
            lines.append(f"{space} windowed better than frozen: " + ", ".join(
                f"{k[len('windowed_'):-len('_seeds')]} on {v}/{lr['seeds']} seeds"
                for k, v in lr.items() if k.endswith("_seeds")))
    return "\n".join(lines)


def main_bench() -> None:
    args = parse_args()
    bench = Bench(args)
    result: dict[str, Any] = {"load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "stages": args.stages,
                              "repeats": args.repeats, "steps": args.steps, "window": args.window,
                              "data": args.data, "spaces": {}}
    for space in args.spaces:
        result["spaces"][space] = {}
        if not args.skip_throughput:
            result["spaces"][space]["throughput"] = bench.throughput(space)
        if not args.skip_learning:
            result["spaces"][space]["learning"] = bench.learning(space)
    result["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(table(result))
    print(f"load after: {result['load_after']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main_bench()
