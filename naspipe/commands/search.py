"""``naspipe search``: SPOS-style evolution (or random sampling) over a trained supernet.

Each candidate is scored by :mod:`naspipe.search.evaluate` with the run's weights; the
search maximises ``--metric`` (BLEU for NLP, top-1 for CV by default; ``loss`` is
minimised). Seeded and deterministic: the same run and options give the same candidates,
scores and best subnet.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.errors import UsageError
from naspipe.search.options import add_eval_options, check_eval_options, eval_device
from naspipe.subnet import Subnet

if TYPE_CHECKING:
    from naspipe.search.evolution import SearchSettings
    from naspipe.search.supernet import TrainedSupernet


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "search", help="evolutionary or random search over a trained supernet",
        description="Single-path one-shot search over a trained supernet: SPOS/NNI-style evolution (top-k parents, "
        "mutation, crossover, no duplicate candidates) or random sampling with the same number of evaluations. "
        "Writes candidates.csv, best.json and convergence.png to --out.")
    add_eval_options(p)
    p.add_argument("--method", required=True, help="evolution or random")
    p.add_argument("--population", type=int, default=16, help="candidates per generation (default 16)")
    p.add_argument("--generations", type=int, default=8, help="generations (default 8)")
    p.add_argument("--mutation-prob", type=float, default=0.1, help="per-block mutation probability (default 0.1)")
    p.add_argument("--crossover", type=int, help="crossover children per generation (default population/2)")
    p.add_argument("--parents", type=int, help="top-k parents (default population/2)")
    p.add_argument("--metric", help="score to maximise: bleu (NLP default), top1 (CV default), top5, token_acc, "
                   "or loss (minimised)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--random-subnets", type=int, default=0, metavar="K",
                   help="also write random-0.json .. random-(K-1).json: K distinct uniformly drawn subnets (seeded by "
                   "--seed, as 'naspipe evaluate --sample K') to retrain beside the winner as its baseline")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--memo", type=Path, metavar="DIR",
                   help="search once per content (the weights' digests, the space, these options): a search of "
                   "bitwise equal weights stored in DIR is copied, with this run's name (naspipe.plan.memo)")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.plan import memo
    from naspipe.search.evolution import SearchSettings
    from naspipe.search.outputs import check_out_dir, write_reused
    from naspipe.search.supernet import open_supernet, search_key

    settings = SearchSettings(args.method, args.seed, args.population, args.generations, args.mutation_prob,
                              args.crossover, args.parents).checked()
    check_eval_options(args)
    if args.random_subnets < 0:
        raise UsageError(f"--random-subnets {args.random_subnets} must be >= 0")
    check_out_dir(args.out)
    supernet = open_supernet(args.run)
    if args.memo is None:
        _search(args, settings, supernet)
        return 0
    options = {k: v for k, v in sorted(vars(args).items()) if k not in ("run", "out", "memo")}
    key = memo.key_of({"command": "search", "options": options, **search_key(supernet)})
    with memo.claimed(args.memo, key) as entry:
        if entry is not None:
            write_reused(args.out, memo.stored(entry), _provenance(args, supernet))
            return 0
        _search(args, settings, supernet)
        memo.put(args.memo, key, args.out)
    return 0


def _provenance(args: argparse.Namespace, supernet: TrainedSupernet) -> dict[str, Any]:
    """The fields of best.json naming the run searched (all else is a function of the key)."""
    from naspipe.systems import schedule_name  # the run's name in the report (csp-mb, not its csp)

    config = supernet.config
    return {"run": str(args.run), "system": schedule_name(config.system, config.to_dict()), "stages": config.stages,
            "train_seed": config.seed, "step": supernet.step}


def _search(args: argparse.Namespace, settings: SearchSettings, supernet: TrainedSupernet) -> None:
    """Search the supernet and write --out."""
    from naspipe.search.evaluate import EvalSettings, Evaluator, default_metric, higher_is_better, metric_names
    from naspipe.search.evolution import run_search
    from naspipe.search.options import sample_subnets
    from naspipe.search.outputs import write_search

    names = metric_names(supernet.space)
    metric = args.metric or default_metric(supernet.space)
    if metric not in names:
        raise UsageError(f"--metric {metric!r}: space {supernet.space.name!r} is scored by {', '.join(names)}")
    evaluator = Evaluator(supernet, EvalSettings(args.split, args.batches, args.beam, args.calib_batches),
                          eval_device(args.device, args.threads))
    sign = 1.0 if higher_is_better(metric) else -1.0
    scored: list[dict[str, float]] = []

    def score(subnet: Subnet) -> float:
        scored.append(evaluator.score(subnet))
        return sign * scored[-1][metric]

    candidates = run_search(settings, supernet.space.structure.choices_per_block, score)
    summary = {"metric": metric, "method": settings.method, "seed": settings.seed, "evaluations": len(candidates),
               "space": supernet.space.name, **_provenance(args, supernet)}
    randoms = sample_subnets(supernet.space.structure.choices_per_block, args.random_subnets, args.seed)
    write_search(args.out, candidates, dict(enumerate(scored)), names, summary, randoms)
