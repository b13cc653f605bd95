"""The workflow's datasets: which family each kind feeds, and the ``naspipe prepare`` command of each.

A synthetic dataset is generated raw (``naspipe prepare synthetic-*``) and then prepared through the
real-data path (``wmt`` or ``imagenet``), so the synthetic default run exercises the same loader a
user's WMT or ImageNet files go through; :func:`prepare_args` holds that translation.
"""

from __future__ import annotations

import shlex
from typing import Any

from naspipe.data.download import stamp_path
from naspipe.plan import paths

PATH_KEYS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "path", "root")
SYNTHETIC = {"synthetic-translation": "translation", "synthetic-images": "images"}
DATA_FAMILY = {**SYNTHETIC, "wmt": "translation", "fairseq": "translation", "imagenet": "images"}
SPACE_FAMILY = {"nlp": "translation", "cv": "images", "toy": None}
IMAGE_KINDS = ("imagenet", "synthetic-images")
PREPARE_FLAGS = {  # the `naspipe prepare KIND` flags read from a dataset's config keys
    "wmt": ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "vocab_size", "seed"),
    "fairseq": ("path",),
    "imagenet": ("root", "resize", "crop", "limit_per_class"),
}


def synthetic_args(dataset: dict[str, Any]) -> str:
    """``naspipe prepare`` arguments generating a synthetic dataset's raw files."""
    if dataset["kind"] == "synthetic-translation":
        flags = {"pairs": dataset["pairs"], "valid-pairs": dataset.get("valid_pairs"),
                 "test-pairs": dataset.get("test_pairs")}
    else:
        flags = {"per-class": dataset["per_class"], "val-per-class": dataset.get("val_per_class"),
                 "size": dataset.get("size")}
    flags["seed"] = dataset.get("seed", 0)
    args = " ".join(f"--{k} {v}" for k, v in flags.items() if v is not None)
    return f"{dataset['kind']} {args}"


def prepare_input(name: str, dataset: dict[str, Any]) -> list[str]:
    """What preparing a dataset reads: its generated raw directory, or the user's files."""
    if dataset["kind"] in SYNTHETIC:
        return [paths.path("raw", dataset=name)]
    if "source" in dataset:  # the fetch rule's stamp (workflow/rules/download.smk)
        return [stamp_path(name)]
    return [dataset[k] for k in PATH_KEYS if k in dataset]


def prepare_workers(dataset: dict[str, Any], cpus: int) -> int:
    """Processes ``naspipe prepare`` runs: the reserved CPUs for an image set (its only parallel step)."""
    return cpus if dataset["kind"] in IMAGE_KINDS else 1


def as_real(name: str, dataset: dict[str, Any]) -> dict[str, Any]:
    """A synthetic dataset's config restated as the real kind its raw files are prepared as."""
    d, raw = dict(dataset), paths.path("raw", dataset=name)
    if d["kind"] == "synthetic-translation":
        d.update(kind="wmt", src=f"{raw}/train.src", tgt=f"{raw}/train.tgt")
        d.update(valid_src=f"{raw}/valid.src", valid_tgt=f"{raw}/valid.tgt")
    elif d["kind"] == "synthetic-images":
        d.update(kind="imagenet", root=raw, resize=d.get("size", 32), crop=d.get("size", 32))
    return d


def prepare_args(name: str, dataset: dict[str, Any], workers: int) -> str:
    """The ``naspipe prepare`` arguments for a dataset; synthetic sets go through the real-data path."""
    d = as_real(name, dataset)
    flags = {("data" if k == "path" else k).replace("_", "-"): d[k] for k in PREPARE_FLAGS[d["kind"]] if k in d}
    if d["kind"] == "imagenet" and workers > 1:
        flags["workers"] = workers  # the CPUs the job reserves decode images
    return f"{d['kind']} " + " ".join(f"--{k} {shlex.quote(str(v))}" for k, v in flags.items())
