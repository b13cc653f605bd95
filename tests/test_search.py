"""The search phase: evaluation and search are bitwise reproducible, and only CSP makes them stage-count free.

Supernets are trained at tiny size on both spaces by csp at D = 1, 2, 4 and by gpipe at
D = 2 and pipedream at D = 4 (at D = 2 this tiny pipedream happens to match sequential);
the same evolutionary search run on each must give byte-identical outputs for the csp runs
(their weights are bitwise the same) and different scores for the baselines. Plus: metric
hand cases, the pure evolution's invariants, retraining a fixed subnet, and extending a
finished run at another stage count. The NLP half trains its five supernets in spawned
stage processes (~40 s on a busy 2-core machine), so it is marked slow.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sacrebleu
import torch

from naspipe.cli import main
from naspipe.data.metrics import bleu, topk_accuracy
from naspipe.search.evolution import SearchSettings, best, run_search
from naspipe.subnet import Subnet

SPACES = {
    "nlp.tiny": ["--set", "space.blocks=4", "--set", "space.candidates=3", "--set", "space.dim=16",
                 "--set", "space.seq_len=8"],
    "cv.tiny": ["--set", "space.blocks=4", "--set", "space.candidates=3", "--set", "space.channels=4",
                "--set", "space.image_size=8"],
}
SEARCH = ["--method", "evolution", "--population", "4", "--generations", "2", "--batches", "2",
          "--calib-batches", "2", "--seed", "3"]


def train(out: Path, space: str, system: str, stages: int, *extra: str, steps: int = 8) -> Path:
    status = main(["train", "--space", space, "--system", system, "--stages", str(stages), "--steps", str(steps),
                   "--seed", "0", "--set", "progress=off", *SPACES[space], *extra, "--out", str(out)])
    assert status == 0
    return out


def search(run: Path, out: Path, *extra: str) -> Path:
    assert main(["search", "--run", str(run), *SEARCH, *extra, "--out", str(out)]) == 0
    return out


def same_search(a: Path, b: Path) -> bool:
    """Equal best.json files but for where the searched run lives and its stage count."""
    def strip(path: Path) -> dict[str, object]:
        return {k: v for k, v in json.loads(path.read_text()).items() if k not in ("run", "stages")}
    return strip(a) == strip(b)


@pytest.fixture(scope="module", params=[pytest.param("nlp.tiny", marks=pytest.mark.slow), "cv.tiny"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    space = request.param
    root = tmp_path_factory.mktemp(space)
    systems = {f"csp{d}": ("csp", d) for d in (1, 2, 4)} | {"gpipe2": ("gpipe", 2), "pipedream4": ("pipedream", 4)}
    return {name: train(root / name, space, system, d) for name, (system, d) in systems.items()}


def test_search_is_bitwise_reproducible_and_stage_count_free_only_under_csp(runs, tmp_path):
    outs = {name: search(run, tmp_path / name) for name, run in runs.items()}
    again = search(runs["csp1"], tmp_path / "again")
    reference = (outs["csp1"] / "candidates.csv").read_bytes()
    for name in ("csp2", "csp4"):
        assert (outs[name] / "candidates.csv").read_bytes() == reference, name
        assert same_search(outs[name] / "best.json", outs["csp1"] / "best.json"), name
    assert (again / "candidates.csv").read_bytes() == reference
    assert (again / "convergence.png").read_bytes() == (outs["csp1"] / "convergence.png").read_bytes()
    for name in ("gpipe2", "pipedream4"):
        assert (outs[name] / "candidates.csv").read_bytes() != reference, name
    rows = reference.decode().splitlines()
    assert len(rows) == 1 + 8 and len({r.split('"')[1] for r in rows[1:]}) == 8  # 8 distinct candidates


def test_a_memoised_search_is_the_search_of_equal_weights_and_names_its_own_run(runs, tmp_path):
    memo = ["--memo", str(tmp_path / "memo")]
    first = search(runs["csp1"], tmp_path / "first", *memo)
    copied = search(runs["csp4"], tmp_path / "copied", *memo)  # bitwise equal weights: copied, not searched
    computed = search(runs["csp4"], tmp_path / "computed")
    for name in ("candidates.csv", "best.json", "convergence.png", "random-0.json"):
        if (computed / name).exists():
            assert (copied / name).read_bytes() == (computed / name).read_bytes(), name
    best_copied = json.loads((copied / "best.json").read_text())
    assert (best_copied["run"], best_copied["stages"]) == (str(runs["csp4"]), 4)
    assert json.loads((first / "best.json").read_text())["stages"] == 1
    other = search(runs["gpipe2"], tmp_path / "other", *memo)  # other weights: searched
    assert (other / "candidates.csv").read_bytes() != (first / "candidates.csv").read_bytes()
    assert len(list((tmp_path / "memo").glob("*.lock"))) == 2


def test_evaluate_is_bitwise_reproducible_and_scores_the_checkpoints_over_time(runs, tmp_path):
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    for out, run in ((first, runs["csp1"]), (second, runs["csp4"])):
        assert main(["evaluate", "--run", str(run), "--sample", "3", "--batches", "2", "--out", str(out)]) == 0
    assert first.read_bytes() == second.read_bytes()
    header, *rows = first.read_text().splitlines()
    assert len(rows) == 3 and header.startswith("step,subnet,choices,")
    other = tmp_path / "pipedream.csv"
    assert main(["evaluate", "--run", str(runs["pipedream4"]), "--sample", "3", "--batches", "2",
                 "--out", str(other)]) == 0
    assert other.read_bytes() != first.read_bytes()


def test_every_checkpoint_gives_score_against_wall_time(tmp_path):
    run = train(tmp_path / "run", "cv.tiny", "csp", 1, "--checkpoint-every", "2", "--set", "keep_checkpoints=4")
    out = tmp_path / "curve.csv"
    assert main(["evaluate", "--run", str(run), "--sample", "2", "--batches", "1", "--every-checkpoint",
                 "--out", str(out)]) == 0
    header, *rows = out.read_text().splitlines()
    assert header == "space,system,stages,seed,step,wall_s,subnet,choices,top1,top5,loss"
    assert {tuple(r.split(",")[:4]) for r in rows} == {("cv.tiny", "csp", "1", "0")}
    steps = [int(r.split(",")[4]) for r in rows]
    walls = [float(r.split(",")[5]) for r in rows]
    assert steps == [2, 2, 4, 4, 6, 6, 8, 8]
    assert walls == sorted(walls) and walls[-1] > 0


def test_a_resumed_runs_checkpoint_wall_time_leaves_out_the_pause(tmp_path, monkeypatch):
    """The pause between an interrupted run and its resume is not training time: each manifest
    records the training time so far (the resumed checkpoint's plus the new segment's)."""
    every = ["--checkpoint-every", "2", "--set", "keep_checkpoints=4"]
    run, work = tmp_path / "run", tmp_path / "run.partial"
    monkeypatch.setenv("NASPIPE_FAIL_AT", "0:5")  # stage 0 fails in subnet 5's forward
    with pytest.raises(RuntimeError, match="injected failure"):
        train(run, "cv.tiny", "csp", 1, *every, steps=8)
    monkeypatch.delenv("NASPIPE_FAIL_AT")
    before = json.loads((work / "checkpoints" / "step-00000004" / "manifest.json").read_text())
    time.sleep(1.0)  # the pause
    train(run, "cv.tiny", "csp", 1, *every, "--resume", str(work), steps=8)  # continues in place
    manifests = {s: json.loads((run / "checkpoints" / f"step-{s:08d}" / "manifest.json").read_text())
                 for s in (2, 4, 6, 8)}
    assert manifests[4] == before
    assert [manifests[s]["wall_s"] for s in (2, 4, 6, 8)] == sorted(m["wall_s"] for m in manifests.values())
    written = manifests[6]["written_at"] - manifests[4]["written_at"]
    assert manifests[6]["wall_s"] - manifests[4]["wall_s"] < written - 0.5
    out = tmp_path / "curve.csv"
    assert main(["evaluate", "--run", str(run), "--sample", "1", "--batches", "1", "--every-checkpoint",
                 "--out", str(out)]) == 0
    walls = [float(r.split(",")[5]) for r in out.read_text().splitlines()[1:]]
    assert walls == [manifests[s]["wall_s"] for s in (2, 4, 6, 8)]


def test_retraining_the_best_subnet_trains_it_every_step(runs, tmp_path):
    best_file = search(runs["csp1"], tmp_path / "s") / "best.json"
    choices = json.loads(best_file.read_text())["choices"]
    space = json.loads((runs["csp1"] / "checkpoints" / "step-00000008" / "manifest.json").read_text())[
        "config"]["space"]["name"]
    one = train(tmp_path / "r1", space, "csp", 1, "--subnet", str(best_file), steps=4)
    two = train(tmp_path / "r2", space, "csp", 2, "--subnet", str(best_file), steps=4)
    rows = (one / "losses.csv").read_text().splitlines()[1:]
    assert {r.split(",")[1] for r in rows} == {"-".join(map(str, choices))}
    assert (one / "losses.csv").read_bytes() == (two / "losses.csv").read_bytes()
    for run in (one, two):
        assert main(["evaluate", "--run", str(run), "--subnets", str(best_file), "--batches", "1",
                     "--out", str(run / "score.csv")]) == 0
    assert (one / "score.csv").read_bytes() == (two / "score.csv").read_bytes()


def test_a_finished_run_extends_to_twice_its_steps_at_another_stage_count(tmp_path):
    straight = train(tmp_path / "straight", "nlp.tiny", "csp", 1, steps=8)
    short = train(tmp_path / "short", "nlp.tiny", "csp", 1, steps=4)
    extended = train(tmp_path / "extended", "nlp.tiny", "csp", 2, "--resume", str(short), steps=8)
    for name in ("losses.csv", "weights.sha256"):
        assert (extended / name).read_bytes() == (straight / name).read_bytes(), name


def test_bleu_matches_sacrebleu_on_a_known_pair():
    hyp, ref = "the cat sat on the mat today", "the cat sat on the red mat today"
    # n-gram precisions 7/7, 5/6, 3/5, 2/4 and a brevity penalty exp(1 - 8/7)
    assert bleu([hyp], [ref]) == sacrebleu.corpus_bleu([hyp], [[ref]]).score
    assert bleu([hyp], [ref]) == pytest.approx(100 * (7 / 7 * 5 / 6 * 3 / 5 * 2 / 4) ** 0.25
                                               * min(1.0, 2.718281828459045 ** (1 - 8 / 7)), rel=1e-9)
    assert bleu(["a b c d"], ["a b c d"]) == pytest.approx(100.0)


def test_topk_on_a_hand_case():
    logits = torch.tensor([[0.1, 0.9, 0.0, 0.3, 0.2, 0.5],   # label 1 ranks first
                           [0.9, 0.1, 0.8, 0.7, 0.6, 0.5],   # label 5 ranks fifth
                           [0.9, 0.8, 0.7, 0.6, 0.5, 0.0]])  # label 5 ranks last
    assert topk_accuracy(logits, torch.tensor([1, 5, 5]), ks=(1, 5)) == {1: 1 / 3, 5: 2 / 3}


def test_evolution_is_seeded_never_repeats_and_beats_random_on_a_toy_objective():
    choices = (4,) * 6

    def score(subnet: Subnet) -> float:
        return float(sum(subnet.choices))  # best: all 3s

    def found(method: str, seed: int) -> float:
        return best(run_search(SearchSettings(method, seed, population=8, generations=6), choices, score)).score

    runs = [run_search(SearchSettings("evolution", 1, population=8, generations=6), choices, score) for _ in (0, 1)]
    assert runs[0] == runs[1]
    assert len({c.subnet for c in runs[0]}) == len(runs[0]) == 48
    assert {c.origin for c in runs[0][8:]} <= {"mutation", "crossover", "random"}
    evolution = sorted(found("evolution", s) for s in range(9))[4]
    random_ = sorted(found("random", s) for s in range(9))[4]
    assert evolution > random_


def test_a_search_larger_than_the_space_stops_when_every_subnet_is_scored():
    candidates = run_search(SearchSettings("evolution", 0, population=4, generations=10), (2, 2), lambda s: 0.0)
    assert sorted(c.subnet.choices for c in candidates) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_report_completes_table3_and_draws_the_search_figures(runs, tmp_path):
    import pandas as pd

    specs, curves = [], []
    for name in ("csp1", "gpipe2"):
        found = search(runs[name], tmp_path / f"search-{name}")
        space = json.loads((found / "best.json").read_text())["space"]
        retrained = train(tmp_path / f"retrain-{name}", space, "csp", 1, "--subnet", str(found / "best.json"), steps=2)
        accuracy = tmp_path / f"{name}.accuracy.csv"
        assert main(["evaluate", "--run", str(retrained), "--subnets", str(found / "best.json"), "--batches", "1",
                     "--calib-batches", "1", "--out", str(accuracy)]) == 0
        specs += ["--search", f"{found}={accuracy}"]
        curve = tmp_path / f"{name}.curve.csv"
        assert main(["evaluate", "--run", str(runs[name]), "--sample", "2", "--batches", "1", "--every-checkpoint",
                     "--out", str(curve)]) == 0
        curves += ["--curve", str(curve)]
    out = tmp_path / "results"
    assert main(["report", "--runs", str(runs["csp1"]), str(runs["gpipe2"]), *specs, *curves, "--out", str(out)]) == 0
    table3 = pd.read_csv(out / "tables" / "table3_reproducibility.csv")
    assert {"search_metric", "search_best", "search_accuracy"} <= set(table3.columns)
    assert sorted(table3["system"]) == ["csp", "gpipe"] and table3["search_accuracy"].notna().all()
    for figure in ("fig4_search_score", "fig_search_convergence"):
        assert (out / "figures" / f"{figure}.png").read_bytes().startswith(b"\x89PNG")
    assert "search accuracy" in (out / "report.md").read_text()
