"""Does the search find better subnets than random sampling, and does the winner retrain better?

1. Train one supernet (csp, D = 1; the weights are the same at any D) on the space's
   generated data (the embedded synthetic task the default workflow's tiny spaces use).
2. For each seed, evolution and random search with the same number of evaluations score
   candidates with the supernet's weights on the valid split; report the median over seeds
   of the best score found, and by how much evolution's median exceeds random's.
3. Retrain the winner (the best subnet over every evolution seed) and ``--random-retrains``
   uniformly drawn subnets the same way (``naspipe train --subnet``, same steps and seed) and
   score each on the test split with its own retrained weights (the paper's "search
   accuracy"); report how many of the random ones the winner beats.

    .venv/bin/python benchmarks/bench_search.py [--space cv.tiny] [--steps 64] [--seeds 5]
        [--population 8] [--generations 4] [--retrain-steps 64] [--batches 4] [--metric M]
        [--set space.data=results/data/synthetic-images ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
from pathlib import Path

from naspipe.cli import main

METRIC = {"cv.tiny": "top1", "nlp.tiny": "loss"}


def check(status: int) -> None:
    if status != 0:
        raise SystemExit(f"bench_search: a naspipe command failed (exit {status})")


def score_of(csv_file: Path, metric: str) -> float:
    with open(csv_file, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return float(rows[0][metric])


def main_bench() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--space", default="cv.tiny")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--retrain-steps", type=int, default=64)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--final-split", default="test",
                   help="split of the retrained scores (prepared image shards have only val: use valid)")
    p.add_argument("--random-retrains", type=int, default=5, help="random subnets retrained for the comparison")
    p.add_argument("--metric", help="score to maximise (default: top1 for cv.tiny, loss for nlp.tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="training config override, e.g. space.data=results/data/synthetic-images (the prepared set)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    metric = args.metric or METRIC.get(args.space, "loss")
    common = ["--set", "progress=off", "--seed", "0", *(a for kv in args.overrides for a in ("--set", kv))]
    root = Path(tempfile.mkdtemp(prefix="bench-search-"))
    check(main(["train", "--space", args.space, "--system", "csp", "--stages", "1", "--steps", str(args.steps),
                *common, "--out", str(root / "supernet")]))
    found: dict[str, list[float]] = {"evolution": [], "random": []}
    for seed in range(args.seeds):
        for method in found:
            out = root / f"{method}-{seed}"
            check(main(["search", "--run", str(root / "supernet"), "--method", method, "--population",
                        str(args.population), "--generations", str(args.generations), "--metric", metric,
                        "--batches", str(args.batches), "--seed", str(seed), "--out", str(out)]))
            found[method].append(json.loads((out / "best.json").read_text())["score"])
    medians = {m: statistics.median(v) for m, v in found.items()}
    # The winner: the best subnet over every evolution seed (ties: the lowest seed).
    winner_seed = max(range(args.seeds), key=lambda i: (found["evolution"][i], -i))
    winner = root / f"evolution-{winner_seed}" / "best.json"
    check(main(["evaluate", "--run", str(root / "supernet"), "--sample", str(args.random_retrains), "--seed", "7",
                "--batches", "1", "--out", str(root / "drawn.csv")]))
    with open(root / "drawn.csv", encoding="utf-8") as f:
        drawn = [json.loads(row["choices"]) for row in csv.DictReader(f)]
    subnets = {"winner": winner}
    for i, choices in enumerate(drawn):
        subnets[f"drawn{i}"] = root / f"drawn{i}.json"
        subnets[f"drawn{i}"].write_text(json.dumps({"choices": choices}))
    retrained = {}
    for name, subnet in subnets.items():
        run = root / f"retrain-{name}"
        check(main(["train", "--space", args.space, "--system", "csp", "--stages", "1", "--steps",
                    str(args.retrain_steps), *common, "--subnet", str(subnet), "--out", str(run)]))
        check(main(["evaluate", "--run", str(run), "--subnets", str(subnet), "--split", args.final_split, "--batches",
                    str(args.batches), "--out", str(run / "score.csv")]))
        retrained[name] = score_of(run / "score.csv", metric)
    sign = -1.0 if metric == "loss" else 1.0
    randoms = [retrained[f"drawn{i}"] for i in range(len(drawn))]
    beaten = sum(sign * retrained["winner"] > sign * r for r in randoms)
    result = {"space": args.space, "metric": metric + (" (negated: higher is better)" if metric == "loss" else ""),
              "evaluations_per_search": args.population * args.generations, "best_per_seed": found,
              "median_best": medians, "evolution_minus_random": medians["evolution"] - medians["random"],
              "winner": json.loads(winner.read_text())["choices"], "retrained_test_" + metric: retrained,
              "retrained_random_median": statistics.median(randoms),
              "winner_beats_random_retrains": f"{beaten} of {len(randoms)}", "workdir": str(root)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main_bench()
