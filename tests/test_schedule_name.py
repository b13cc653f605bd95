"""``--system csp-mb`` (the fast NASPipe) and ``sequential-mb`` (its reference): the report's names for the
micro-batched schedule are names a user trains by; the run's own settings win over the name's defaults."""

from __future__ import annotations

import pytest

from naspipe import systems
from naspipe.config import load_config
from naspipe.errors import UsageError


def test_a_micro_batched_name_is_its_system_with_the_schedules_defaults() -> None:
    config = load_config(None, [], {"system": "csp-mb"})
    assert (config.system, config.micro_batches, config.split_backward, config.priority) == (
        "csp", systems.MICRO_SCHEDULE["micro_batches"], True, "critical")
    assert systems.schedule_name(config.system, config.to_dict()) == "csp-mb"
    reference = load_config(None, [], {"system": "sequential-mb"})
    assert (reference.system, reference.micro_batches) == ("sequential", config.micro_batches)


def test_the_runs_own_settings_win_over_the_names_defaults() -> None:
    config = load_config(None, ["micro_batches=2", "priority=fifo"], {"system": "csp-mb"})
    assert (config.micro_batches, config.split_backward, config.priority) == (2, True, "fifo")


def test_the_bulk_synchronous_baselines_have_micro_batched_forms_and_pipedream_none() -> None:
    config = load_config(None, [], {"system": "gpipe-mb"})
    assert (config.system, config.micro_batches) == ("gpipe", systems.MICRO_SCHEDULE["micro_batches"])
    assert systems.schedule_name(config.system, config.to_dict()) == "gpipe-mb"
    with pytest.raises(UsageError, match="needs system sequential or csp or gpipe or vpipe"):
        load_config(None, [], {"system": "pipedream-mb"})


def test_a_search_and_its_curve_name_the_runs_schedule() -> None:
    """best.json and Figure 4's rows of a csp-mb run say csp-mb (the report keys Table 3's search columns and the
    curves by it); they said csp, so csp-mb's search results landed on csp's rows."""
    import argparse
    from types import SimpleNamespace

    from naspipe.commands.evaluate import _where
    from naspipe.commands.search import _provenance

    config = load_config(None, ["micro_batches=2"], {"system": "csp-mb", "stages": 2})
    supernet = SimpleNamespace(config=config, step=8, wall_s=1.5, written_at=None)
    best = _provenance(argparse.Namespace(run="runs/x"), supernet)  # type: ignore[arg-type]
    assert (best["system"], best["stages"], best["step"]) == ("csp-mb", 2, 8)
    assert _where(supernet, None, True)[1] == "csp-mb"  # type: ignore[arg-type]
    plain = SimpleNamespace(config=load_config(None, [], {"system": "csp"}), step=8, wall_s=1.5, written_at=None)
    assert _provenance(argparse.Namespace(run="runs/y"), plain)["system"] == "csp"  # type: ignore[arg-type]


def test_the_workflows_micro_defaults_are_the_names_schedule() -> None:
    """The schema's default micro block is what ``--system csp-mb`` asks for: one default schedule, not two."""
    from pathlib import Path

    import yaml

    schema = yaml.safe_load((Path(__file__).parents[1] / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["micro"]["default"] == systems.MICRO_SCHEDULE
