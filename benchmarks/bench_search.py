"""Does the search find better subnets than random sampling, and does the winner retrain better?

1. Data: by default the default workflow's dataset of the space, built exactly as the
   workflow's ``synthesize`` and ``prepare`` rules build it from ``--config``
   (config/config.yaml: ``spaces.SPACE.dataset`` -> ``datasets.NAME``); ``--data generated``
   uses the space's embedded generated task, ``--data DIR`` a prepared directory. Training
   uses the config's ``train_options`` (the optimizer the workflow trains with).
2. Train one supernet (csp, D = 1; the weights are the same at any D).
3. For each seed, evolution and random search with the same number of evaluations score
   candidates with the supernet's weights on the valid split; report the median over seeds
   of the best score found, by how much evolution's median exceeds random's, and on how many
   seeds evolution's best beats random's best of the same seed.
4. Retrain (``naspipe train --subnet``, same steps, seeds and options) every distinct
   evolution winner and ``--random-retrains`` uniformly drawn subnets, and score each on
   ``--final-split`` with its own retrained weights (the paper's "search accuracy"). Report
   the overall winner (best one-shot score over seeds) against the random ones (how many it
   beats, the median), and the median over seeds of the per-seed winners.
5. Does the one-shot ranking predict the stand-alone ranking? Kendall's tau-b between the
   drawn subnets' one-shot scores and their retrained scores (the drawn subnets are a uniform
   sample, so the winners do not inflate it), for the search metric and for top-1.

    python benchmarks/bench_search.py [--space cv.tiny] [--steps 8192] [--seeds 5]
        [--population 8] [--generations 4] [--retrain-steps 1024] [--batches 25] [--metric top1|loss]
        [--retrain-seeds 1] [--data workflow|generated|DIR] [--final-split valid] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from naspipe.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOP1 = {"cv.tiny": "top1"}
METRIC = {"cv.tiny": "top1", "nlp.tiny": "loss"}  # top-1: what the workflow's cv.tiny search maximises


def check(status: int) -> None:
    if status != 0:
        raise SystemExit(f"bench_search: a naspipe command failed (exit {status})")


def read_rows(csv_file: Path) -> list[dict[str, str]]:
    with open(csv_file, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either ranking count as neither concordant nor discordant)."""
    concordant = discordant = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        x, y = (a[i] > a[j]) - (a[i] < a[j]), (b[i] > b[j]) - (b[i] < b[j])
        if x == 0 and y == 0:
            continue
        if x == 0:
            ties_a += 1
        elif y == 0:
            ties_b += 1
        elif x == y:
            concordant += 1
        else:
            discordant += 1
    n_a, n_b = concordant + discordant + ties_a, concordant + discordant + ties_b
    return (concordant - discordant) / (n_a * n_b) ** 0.5 if n_a and n_b else float("nan")


def workflow_data(config: dict[str, Any], space: str, root: Path) -> Path | None:
    """The config's dataset for ``space``, built as the workflow's synthesize + prepare rules do (None: generated)."""
    name = config["spaces"][space].get("dataset")
    if name is None:
        return None
    d, raw, out = config["datasets"][name], root / "raw", root / "data"
    seed = str(d.get("seed", 0))
    if d["kind"] == "synthetic-images":
        size = str(d.get("size", 32))
        val = ["--val-per-class", str(d["val_per_class"])] if d.get("val_per_class") else []
        check(main(["prepare", "synthetic-images", "--per-class", str(d["per_class"]), *val, "--size", size,
                    "--seed", seed, "--out", str(raw)]))
        check(main(["prepare", "imagenet", "--root", str(raw), "--resize", size, "--crop", size, "--out", str(out)]))
    elif d["kind"] == "synthetic-translation":
        counts = [a for k in ("valid_pairs", "test_pairs") if d.get(k) for a in (f"--{k.replace('_', '-')}", str(d[k]))]
        check(main(["prepare", "synthetic-translation", "--pairs", str(d["pairs"]), *counts, "--seed", seed,
                    "--out", str(raw)]))
        check(main(["prepare", "wmt", "--src", str(raw / "train.src"), "--tgt", str(raw / "train.tgt"),
                    "--valid-src", str(raw / "valid.src"), "--valid-tgt", str(raw / "valid.tgt"),
                    "--vocab-size", str(d["vocab_size"]), "--seed", seed, "--out", str(out)]))
    else:
        raise SystemExit(f"bench_search: dataset {name!r} of kind {d['kind']!r} is not generated; pass --data DIR")
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--space", default="cv.tiny")
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml",
                   help="workflow config: the space's dataset and the train_options")
    p.add_argument("--data", default="workflow", help="workflow (the config's dataset), generated, or a prepared DIR")
    p.add_argument("--steps", type=int, default=8192, help="supernet training steps")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--retrain-steps", type=int, default=1024)
    p.add_argument("--batches", type=int, default=25, help="held-out batches per score (25 x 8 = 200 images)")
    p.add_argument("--calib-batches", type=int, default=8)
    p.add_argument("--final-split", default="valid",
                   help="split of the retrained scores (prepared image shards have only val: valid)")
    p.add_argument("--random-retrains", type=int, default=10, help="random subnets retrained for the comparison")
    p.add_argument("--retrain-seeds", type=int, default=1,
                   help="retrain every subnet with training seeds 0..N-1 and score it by the mean (init/order noise)")
    p.add_argument("--metric", help="score the search optimises (loss is minimised; default: top1 for cv.tiny, "
                   "loss for nlp.tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="extra training config override (after the config's train_options)")
    p.add_argument("--json", type=Path)
    return p.parse_args()


class Bench:
    """One benchmark: a work directory, the training flags, the scoring flags."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="bench-search-"))
        config = yaml.safe_load(args.config.read_text(encoding="utf-8"))
        data = workflow_data(config, args.space, self.root) if args.data == "workflow" else (
            None if args.data == "generated" else Path(args.data))
        self.data = str(data) if data is not None else "generated"
        sets = [f"{k}={v}" for k, v in sorted(config.get("train_options", {}).items())]
        sets += ["progress=off", "threads=1", *args.overrides] + ([f"space.data={data}"] if data else [])
        self.train_flags = ["--space", args.space, "--system", "csp", "--stages", "1",
                            *(a for kv in sets for a in ("--set", kv))]
        self.score_flags = ["--batches", str(args.batches), "--calib-batches", str(args.calib_batches),
                            "--threads", "1"]
        self.supernet = self.root / "supernet"
        self.sign = -1.0 if args.metric == "loss" else 1.0  # higher is better after the sign

    def train(self, out: Path, steps: int, subnet: Path | None = None, seed: int = 0) -> None:
        extra = ["--subnet", str(subnet)] if subnet else []
        check(main(["train", *self.train_flags, "--seed", str(seed), "--steps", str(steps), *extra, "--out", str(out)]))

    def search(self, method: str, seed: int) -> dict[str, Any]:
        out = self.root / f"{method}-{seed}"
        a = self.args
        check(main(["search", "--run", str(self.supernet), "--method", method, "--population", str(a.population),
                    "--generations", str(a.generations), "--metric", a.metric, "--seed", str(seed),
                    *self.score_flags, "--out", str(out)]))
        best: dict[str, Any] = json.loads((out / "best.json").read_text())
        return best

    def draw(self) -> list[dict[str, str]]:
        """``--random-retrains`` uniformly drawn subnets with their one-shot scores."""
        out = self.root / "drawn.csv"
        check(main(["evaluate", "--run", str(self.supernet), "--sample", str(self.args.random_retrains),
                    "--seed", "7", *self.score_flags, "--out", str(out)]))
        return read_rows(out)

    def retrain(self, choices: list[int]) -> dict[str, float]:
        """The subnet trained alone and scored on ``--final-split`` with its own weights (mean over seeds)."""
        name = "retrain-" + "-".join(map(str, choices))
        subnet = self.root / f"{name}.json"
        subnet.write_text(json.dumps({"choices": choices}))
        scores: list[dict[str, float]] = []
        for seed in range(self.args.retrain_seeds):
            run = self.root / f"{name}-seed{seed}"
            self.train(run, self.args.retrain_steps, subnet, seed)
            check(main(["evaluate", "--run", str(run), "--subnets", str(subnet), "--split", self.args.final_split,
                        *self.score_flags, "--out", str(run / "score.csv")]))
            row = read_rows(run / "score.csv")[0]
            scores.append({k: float(v) for k, v in row.items() if k not in ("step", "subnet", "choices")})
        return {k: statistics.fmean(s[k] for s in scores) for k in scores[0]}


def summarise(bench: Bench, found: dict[str, list[dict[str, Any]]], drawn: list[dict[str, str]],
              retrained: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The medians, margins, counts and rank correlations the benchmark reports."""
    a, sign, metric = bench.args, bench.sign, bench.args.metric
    best = {m: [sign * r["score"] if metric == "loss" else r["score"] for r in rows] for m, rows in found.items()}
    medians = {m: statistics.median(v) for m, v in best.items()}
    paired = sum(sign * e > sign * r for e, r in zip(best["evolution"], best["random"], strict=True))
    winners = [r["choices"] for r in found["evolution"]]
    top = min(range(a.seeds), key=lambda i: (-found["evolution"][i]["score"], i))  # ties: the lowest seed
    key = str
    drawn_choices = [json.loads(r["choices"]) for r in drawn]
    rand = [retrained[key(c)][metric] for c in drawn_choices]
    seed_winners = [retrained[key(c)][metric] for c in winners]
    overall = retrained[key(winners[top])][metric]
    tau = {m: kendall_tau([float(r[m]) for r in drawn], [retrained[key(c)][m] for c in drawn_choices])
           for m in dict.fromkeys([metric, TOP1.get(a.space, metric)])}
    return {
        "space": a.space, "data": bench.data, "supernet_steps": a.steps, "retrain_steps": a.retrain_steps,
        "retrain_seeds": a.retrain_seeds,
        "metric": metric + (" (lower is better)" if metric == "loss" else ""),
        "evaluations_per_search": a.population * a.generations, "seeds": a.seeds,
        "one_shot_best_per_seed": best, "one_shot_median_best": medians,
        "one_shot_evolution_minus_random": medians["evolution"] - medians["random"],
        "evolution_beats_random_same_seed": f"{paired} of {a.seeds}",
        "winner": winners[top], "winners_per_seed": winners,
        f"retrained_{a.final_split}": {key(c): s for c, s in retrained.items()},
        "retrained_winner": overall, "retrained_random": rand, "retrained_random_median": statistics.median(rand),
        "winner_beats_random_retrains": f"{sum(sign * overall > sign * r for r in rand)} of {len(rand)}",
        "retrained_seed_winners_median": statistics.median(seed_winners),
        "seed_winners_beat_random_median": f"{sum(sign * w > sign * statistics.median(rand) for w in seed_winners)}"
                                           f" of {len(seed_winners)}",
        "kendall_tau_one_shot_vs_retrained": tau, "workdir": str(bench.root),
    } | secondary(bench, retrained, winners[top], drawn_choices)


def secondary(bench: Bench, retrained: dict[str, dict[str, float]], winner: list[int],
              drawn: list[list[int]]) -> dict[str, Any]:
    """The retrained comparison in top-1 as well, when the search optimised another metric."""
    top1 = TOP1.get(bench.args.space)
    if top1 is None or top1 == bench.args.metric:
        return {}
    rand = [retrained[str(c)][top1] for c in drawn]
    won = retrained[str(winner)][top1]
    return {f"retrained_winner_{top1}": won, f"retrained_random_median_{top1}": statistics.median(rand),
            f"winner_beats_random_retrains_{top1}": f"{sum(won > r for r in rand)} of {len(rand)}"}


def table(result: dict[str, Any]) -> str:
    m = result["metric"]
    e, r = result["one_shot_median_best"]["evolution"], result["one_shot_median_best"]["random"]
    rows = [
        ("one-shot best, median over seeds", f"evolution {e:.4f} vs random {r:.4f} ({e - r:+.4f} {m}); "
         f"evolution better on {result['evolution_beats_random_same_seed']} seeds"),
        ("retrained overall winner vs random", f"{result['retrained_winner']:.4f} vs median "
         f"{result['retrained_random_median']:.4f}; beats {result['winner_beats_random_retrains']}"),
        *([("retrained winner vs random, top-1", f"{result['retrained_winner_top1']:.3f} vs median "
             f"{result['retrained_random_median_top1']:.3f}; beats {result['winner_beats_random_retrains_top1']}")]
          if "retrained_winner_top1" in result else []),
        ("retrained per-seed winners", f"median {result['retrained_seed_winners_median']:.4f}; "
         f"{result['seed_winners_beat_random_median']} beat the random median"),
        ("Kendall tau one-shot vs retrained", ", ".join(f"{k} {v:.3f}" for k, v in
                                                         result["kendall_tau_one_shot_vs_retrained"].items())),
    ]
    return "\n".join(f"{k:<38} {v}" for k, v in rows)


def main_bench() -> None:
    args = parse_args()
    args.metric = args.metric or METRIC.get(args.space, "loss")
    bench = Bench(args)
    bench.train(bench.supernet, args.steps)
    found: dict[str, list[dict[str, Any]]] = {"evolution": [], "random": []}
    for seed in range(args.seeds):
        for method, rows in found.items():
            rows.append(bench.search(method, seed))
    drawn = bench.draw()
    subnets = [r["choices"] for r in found["evolution"]] + [json.loads(r["choices"]) for r in drawn]
    retrained = {str(c): bench.retrain(c) for c in {str(c): c for c in subnets}.values()}
    result = summarise(bench, found, drawn, retrained)
    print(json.dumps(result, indent=2))
    print(table(result), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main_bench()
