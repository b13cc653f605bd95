"""The default config (config/config.yaml) keeps the invariants its numbers were chosen for (config/README.md,
"The default config"): every training job it plans is a valid run, the shared-layer window covers every
system's subnets in flight, checkpoints fall on bulk boundaries, and the search scores every held-out
sample once. No training: these are checks of the numbers against each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from naspipe.config import load_config
from naspipe.plan.jobs import train_jobs
from naspipe.space.registry import make_space

CONFIG = Path(__file__).resolve().parent.parent / "config" / "config.yaml"
IMAGE_CLASSES = 10  # the generated image dataset's classes (naspipe.data.synthetic.SHAPES)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load(CONFIG.read_text(encoding="utf-8"))


def test_every_planned_training_job_is_a_valid_run(config):
    jobs = train_jobs(config)
    assert len(jobs) >= len(config["systems"]) * len(config["stages"]) * len(config["spaces"])
    for job in jobs:
        run = load_config(None, [*job.sets, f"space.name={job.space}"],
                          {"system": job.system, "stages": job.stages, "steps": config["steps"], "seed": job.seed})
        assert run.shared_policy == config["train_options"]["shared_policy"]


def test_the_window_covers_every_systems_subnets_in_flight(config):
    """CSP keeps up to 2D subnets in flight (max_inflight 0): a window at least that long never stalls it."""
    assert config["train_options"]["shared_policy"] == "windowed"
    assert config["train_options"]["shared_window"] >= 2 * max(config["stages"])


def test_checkpoints_fall_on_every_bulk_boundary_and_give_figure4_several_points(config):
    every = config["search"]["checkpoint_every"]
    assert all(every % d == 0 for d in config["stages"])
    assert config["steps"] % every == 0 and config["steps"] // every >= 4


def test_the_search_scores_every_held_out_sample_at_most_once(config):
    for name, space in config["spaces"].items():
        dataset = config["datasets"][space["dataset"]]
        batch = make_space(name, space.get("options") or {}).options["batch_size"]
        batches = {**config["search"], **(space.get("search") or {})}["batches"]
        held_out = (dataset["val_per_class"] * IMAGE_CLASSES if dataset["kind"] == "synthetic-images"
                    else dataset["valid_pairs"])
        assert batches * batch <= held_out, name


def test_training_sees_each_sample_a_few_times_not_hundreds(config):
    """Enough data that the loss measures learning the task, not memorising a few hundred samples."""
    for name, space in config["spaces"].items():
        dataset = config["datasets"][space["dataset"]]
        batch = make_space(name, space.get("options") or {}).options["batch_size"]
        train = (dataset["per_class"] * IMAGE_CLASSES if dataset["kind"] == "synthetic-images"
                 else dataset["pairs"])
        assert 1 <= config["steps"] * batch / train <= 20, name
