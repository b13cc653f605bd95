"""config/real-small.yaml and config/datasets-public.yaml: consistent with the schema, the spaces and the fetch rule.

The run itself (about an hour on 2 cores) is not a test; its figures are in docs/data.md.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from naspipe.data.download import destination, parse_sources, source_problem
from tests.conftest import ROOT, SHARED_DATA

PATH_KEYS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "path", "root")
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def test_real_small_is_valid_and_its_spaces_fit_their_data() -> None:
    config = load("real-small.yaml")
    jsonschema.validate(config, SCHEMA)
    nlp, cv = config["spaces"]["nlp.tiny"], config["spaces"]["cv.tiny"]
    assert nlp["options"]["vocab"] == config["datasets"][nlp["dataset"]]["vocab_size"]
    images = config["datasets"][cv["dataset"]]
    assert cv["options"]["image_size"] == images["crop"] == images["resize"]
    assert config["search"]["checkpoint_every"] % max(config["stages"]) == 0


def test_public_fragment_blocks_are_valid_and_paths_lie_under_the_fetch() -> None:
    datasets = load("datasets-public.yaml")["datasets"]
    assert set(datasets) == {"multi30k", "cifar10", "wmt14-en-de-europarl"}
    for name, dataset in datasets.items():
        jsonschema.validate(dataset, {**SCHEMA["$defs"]["dataset"], "$defs": SCHEMA["$defs"]})
        assert source_problem(name, dataset, PATH_KEYS) is None
        assert all(f"{dataset[k]}/".startswith(destination(name) + "/") for k in PATH_KEYS if k in dataset)


@pytest.mark.skipif(not (SHARED_DATA / "multi30k").is_dir(), reason="../shared/data/multi30k is absent")
def test_multi30k_digests_are_the_shared_files_and_agree_with_the_public_fragment() -> None:
    local = parse_sources(load("real-small.yaml")["datasets"]["multi30k"]["source"], "s")
    public = parse_sources(load("datasets-public.yaml")["datasets"]["multi30k"]["source"], "s")
    for mine, theirs in zip(local, public, strict=True):
        path = Path(mine.url.removeprefix("file://"))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == mine.sha256 == theirs.sha256
        assert path.name == theirs.file_name


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent")
def test_dry_run_of_real_small_plans_fetch_prepare_and_the_csp_runs(tmp_path: Path) -> None:
    pytest.importorskip("snakemake")
    from tests.test_workflow import snakemake

    (tmp_path / "work").mkdir()
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # ../shared from the working directory
    done = snakemake("-n", "--configfile", str(ROOT / "config" / "real-small.yaml"), "--directory",
                     str(tmp_path / "work"))
    assert done.returncode == 0, done.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout, re.MULTILINE))
    assert counts["fetch"] == "1" and counts["prepare"] == "2"
    runs = set(re.findall(r"^\s*output: (results/runs/\S+)$", done.stdout, re.MULTILINE))
    assert runs == {f"results/runs/{s}/{y}" for s in ("nlp.tiny", "cv.tiny")
                    for y in ("sequential/D1-seed0", "csp/D2-seed0")}


def trivial_bleu_baselines(data: Path, split: str, batches: int) -> dict[str, float | str]:
    """BLEU of two outputs that know nothing of the source sentence's meaning, scored as ``naspipe evaluate``
    scores (same batches, BPE, 24-token truncation, sacrebleu): copying the source, and one constant
    "mode sentence" (the most frequent training target token at each position, as long as the median target).

    docs/data.md quotes them for real-small.yaml: ``python -c "from tests.test_real_small import *;
    print(trivial_bleu_baselines(Path('results/data/multi30k'), 'test', 32))"``.
    """
    from collections import Counter

    from naspipe.data.metrics import bleu
    from naspipe.search.decode import Detokenizer, strip
    from naspipe.space.registry import make_space

    options = {**load("real-small.yaml")["spaces"]["nlp.tiny"]["options"], "data": str(data)}
    detok = Detokenizer(str(data))
    train = make_space("nlp.tiny", {**options, "split": "train"}, "causal")
    targets = [strip(row.tolist()) for i in range(200) for row in train.batch(i, 0).targets[0]]
    columns = [Counter(t[p] for t in targets if len(t) > p) for p in range(options["seq_len"])]
    length = sorted(len(t) for t in targets)[len(targets) // 2]
    mode = detok([columns[p].most_common(1)[0][0] for p in range(length)])
    held = make_space("nlp.tiny", {**options, "split": split}, "causal")
    refs, copies = [], []
    for i in range(batches):
        batch = held.batch(i, 0)
        refs += [detok(strip(row.tolist())) for row in batch.targets[0]]
        copies += [detok(strip(row.tolist())) for row in batch.inputs[0]]
    return {"copy_source": bleu(copies, refs), "mode_sentence": bleu([mode] * len(refs), refs), "mode": mode}


@pytest.mark.skipif(not (SHARED_DATA / "multi30k").is_dir(), reason="../shared/data/multi30k is absent")
def test_trivial_baselines_on_multi30k_are_near_zero(tmp_path: Path) -> None:
    """The floor real-small's BLEU is compared with: copying English below 1, a constant German sentence below 2."""
    from naspipe.data.wmt import prepare_wmt

    raw = SHARED_DATA / "multi30k"
    data = tmp_path / "multi30k"
    prepare_wmt(raw / "train.en.gz", raw / "train.de.gz", data, load("real-small.yaml")["datasets"]["multi30k"]
                ["vocab_size"], test_src=raw / "test_2016_flickr.en.gz", test_tgt=raw / "test_2016_flickr.de.gz")
    scores = trivial_bleu_baselines(data, "test", 32)
    assert float(scores["copy_source"]) < 1.0 and float(scores["mode_sentence"]) < 2.0
    assert str(scores["mode"]).startswith("Ein Mann")
