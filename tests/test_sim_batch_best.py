"""``naspipe simulate --batch best`` (issue 40, item 5): the fastest batch and setting that fits, and says so.

Runs of 16 subnets: the search samples :data:`naspipe.sim.batch.SAMPLE` subnets, so here every candidate is
simulated whole and the choice is exact, which lets the tests compare it with ``--batch max`` bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from naspipe.cli import main
from naspipe.config import load_config
from naspipe.sim.batch import SAMPLE, Setting, candidate_batches, settings
from naspipe.sim.hardware import load_hardware

HARDWARE = "rtx2080ti-pcie3-40gbe"
MICRO = ["--set", "micro_batches=4", "--set", "split_backward=true", "--set", "priority=critical"]
CACHE = ["--set", "cache.enabled=true"]
SYSTEMS = {  # every system the workflow simulates, in the settings it simulates them with
    "csp-mb": ["--system", "csp", *MICRO, *CACHE],
    "csp": ["--system", "csp", *CACHE],
    "gpipe": ["--system", "gpipe"],
    "gpipe-mb": ["--system", "gpipe", *MICRO],
    "vpipe-mb": ["--system", "vpipe", *MICRO],
    "pipedream": ["--system", "pipedream"],
    "vpipe": ["--system", "vpipe"],
    "sequential": ["--system", "sequential"],
}


def simulate(out: Path, batch: str, *extra: str, hardware: str = HARDWARE) -> dict[str, Any]:
    """One simulated nlp.tiny run of 16 subnets on 3 stages; its metrics.json."""
    args = ["simulate", "--space", "nlp.tiny", "--stages", "3", "--steps", "16", "--hardware", hardware,
            "--partition-by", "costs", "--batch", batch, *extra, "--out", str(out)]
    assert main(args) == 0
    metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return metrics


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_best_fits_the_memory_model_and_is_at_least_as_fast_as_max(tmp_path, name):
    best = simulate(tmp_path / "best", "best", *SYSTEMS[name])
    at_max = simulate(tmp_path / "max", "max", *SYSTEMS[name])
    hw = load_hardware(HARDWARE)
    assert best["fits"] and best["device_bytes"] <= hw.usable_device_memory and best["host_bytes"] <= hw.host_memory
    assert best["micro_batches"] if name.endswith("-mb") else "micro_batches" not in best
    assert best.get("micro_batches", 1) <= best["batch_size"] <= best["max_batch"]
    assert best["throughput_samples_s"] >= at_max["throughput_samples_s"]
    # --batch max is one of the candidates: the config's own setting at its largest batch
    own = {"batch": at_max["batch_size"], "recompute": at_max["recompute_effective"],
           "cache": at_max["cache_enabled"]}
    assert own in [{k: c[k] for k in own} for c in best["batch_search"]["candidates"]]


def test_the_metrics_name_the_choice_and_every_candidate(tmp_path):
    metrics = simulate(tmp_path / "best", "best", *SYSTEMS["csp-mb"])
    search = metrics["batch_search"]
    assert metrics["batch_mode"] == "best" and metrics["config"]["batch"] == "best"
    assert (search["batch"], search["recompute"], search["cache"]) == (
        metrics["batch_size"], metrics["recompute_effective"], metrics["cache_enabled"])
    assert search["fits"] is True and search["sample_subnets"] == 16 <= SAMPLE
    assert [(s["recompute"], s["cache"]) for s in search["settings"]] == [(False, False), (True, False), (True, True)]
    speeds = [c["throughput_samples_s"] for c in search["candidates"]]
    chosen = speeds.index(max(speeds))  # the first of the fastest
    assert {k: search["candidates"][chosen][k] for k in ("batch", "recompute", "cache")} == {
        k: search[k] for k in ("batch", "recompute", "cache")}
    # the full run of the choice is the run the sample measured (16 subnets: the sample is the run)
    assert metrics["throughput_samples_s"] == speeds[chosen]
    assert simulate(tmp_path / "max", "max", *SYSTEMS["csp-mb"])["batch_mode"] == "max"


def test_the_choice_is_the_plain_run_of_its_settings(tmp_path):
    """The search applies its choice as config keys: the same run as asking for them."""
    best = simulate(tmp_path / "best", "best", *SYSTEMS["csp"])
    search = best["batch_search"]
    plain = simulate(tmp_path / "plain", str(search["batch"]), "--system", "csp",
                     "--set", f"recompute={str(search['recompute']).lower()}",
                     "--set", f"cache.enabled={str(search['cache']).lower()}")
    assert plain["batch_mode"] == "fixed"
    for key in ("throughput_samples_s", "makespan_s", "batch_size", "device_bytes", "partition", "max_batch"):
        assert plain[key] == best[key], key


def test_a_system_that_forces_its_recompute_only_searches_the_batch(tmp_path):
    search = simulate(tmp_path / "best", "best", *SYSTEMS["pipedream"])["batch_search"]
    assert [(s["recompute"], s["cache"]) for s in search["settings"]] == [(False, False)]
    batches = [c["batch"] for c in search["candidates"]]
    assert len(batches) > 1 and batches == sorted(batches, reverse=True)


def test_halving_a_setting_stops_at_the_first_slower_batch(tmp_path):
    search = simulate(tmp_path / "best", "best", *SYSTEMS["csp-mb"])["batch_search"]
    for setting in search["settings"]:
        mine = [c for c in search["candidates"] if (c["recompute"], c["cache"]) == (setting["recompute"],
                                                                                   setting["cache"])]
        speeds = [c["throughput_samples_s"] for c in mine]
        assert [c["batch"] for c in mine] == candidate_batches(setting["max_batch"], 4)[:len(mine)]
        assert all(later >= earlier for earlier, later in zip(speeds[:-2], speeds[1:-1], strict=True))
        assert len(mine) == len(candidate_batches(setting["max_batch"], 4)) or speeds[-1] < speeds[-2]


def test_the_settings_each_system_may_choose():
    def of(*sets: str) -> list[Setting]:
        return settings(load_config(None, list(sets), {"space.name": "nlp.tiny", "stages": 3}))

    off, on, cached = Setting(False, False), Setting(True, False), Setting(True, True)
    assert of("system=csp", "cache.enabled=true") == [off, on, cached]
    assert of("system=csp") == of("system=gpipe") == of("system=vpipe") == of("system=sequential") == [off, on]
    assert of("system=pipedream") == [on]  # as configured (recompute=true); the policy's force wins in the run


def test_candidate_batches_halve_and_keep_a_sample_per_micro_batch():
    assert candidate_batches(176, 16) == [176, 88, 44]
    assert candidate_batches(40, 16) == [40, 20]
    assert candidate_batches(1, 1) == [1]
    assert candidate_batches(15, 16) == []


def test_when_nothing_fits_best_runs_as_max_and_says_so(tmp_path):
    spec = yaml.safe_load((Path(__file__).parents[1] / "config" / "hardware" / f"{HARDWARE}.yaml").read_text())
    spec.update(name="tiny-device", device_memory=1.0e6, device_reserved=0.0)
    path = tmp_path / "tiny-device.yaml"
    path.write_text(yaml.safe_dump(spec))
    best = simulate(tmp_path / "best", "best", *SYSTEMS["gpipe"], hardware=str(path))
    at_max = simulate(tmp_path / "max", "max", *SYSTEMS["gpipe"], hardware=str(path))
    assert best["batch_search"]["fits"] is False and best["batch_search"]["candidates"] == []
    assert not any(s["fits"] for s in best["batch_search"]["settings"])
    assert best["fits"] is False and best["batch_size"] == at_max["batch_size"] == 1
    assert best["throughput_samples_s"] == at_max["throughput_samples_s"]


@pytest.mark.parametrize("batch", ["best", "max"])
def test_a_micro_batched_run_that_fits_no_part_says_so_at_a_sample_per_part(tmp_path, batch):
    """Not even one sample per part fits: the run still prices m parts of one sample (``fits`` false), as a run of
    one part prices one sample, instead of failing the workflow's simulate job."""
    spec = yaml.safe_load((Path(__file__).parents[1] / "config" / "hardware" / f"{HARDWARE}.yaml").read_text())
    spec.update(name="tiny-device", device_memory=1.0e6, device_reserved=0.0)
    path = tmp_path / "tiny-device.yaml"
    path.write_text(yaml.safe_dump(spec))
    metrics = simulate(tmp_path / batch, batch, *SYSTEMS["gpipe-mb"], hardware=str(path))
    assert metrics["fits"] is False and metrics["batch_size"] == 4 and metrics["micro_batches"] == 4


def test_a_bad_batch_is_one_line(tmp_path, capsys):
    args = ["simulate", "--space", "nlp.tiny", "--stages", "2", "--batch", "fastest", "--out", str(tmp_path / "x")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--batch 'fastest'" in err and "'best'" in err
    assert not (tmp_path / "x").exists()
