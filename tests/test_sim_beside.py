"""The memory model and the bound computed in a forked child beside the engine: same values, failures raised."""

from __future__ import annotations

import json
import os

import pytest

from naspipe.cli import main
from naspipe.sim import run as sim_run
from naspipe.sim.beside import Beside

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_the_child_returns_what_the_function_returns() -> None:
    parent = os.getpid()
    aside = Beside(lambda: (os.getpid() != parent, [1.5, 2.5]))
    assert aside.result() == (True, [1.5, 2.5])
    assert aside.result() == (True, [1.5, 2.5])  # kept: a second call does not wait again


def test_a_failure_in_the_child_is_raised_in_the_parent_with_its_traceback() -> None:
    def boom() -> int:
        raise ValueError("bad layer 7")

    with pytest.raises(RuntimeError, match="ValueError: bad layer 7"):
        Beside(boom).result()


def test_cancel_stops_the_child_and_reaps_it() -> None:
    import time

    aside = Beside(lambda: time.sleep(60))
    pid = aside._pid
    aside.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left


def run_metrics(tmp_path, name: str) -> dict:
    out = tmp_path / name
    assert main(["simulate", "--system", "csp", "--stages", "4", "--steps", "60", "--set", "space.blocks=6",
                 "--out", str(out)]) == 0
    return json.loads((out / "metrics.json").read_text())


def test_a_run_beside_the_engine_reports_exactly_what_one_in_process_reports(tmp_path, monkeypatch) -> None:
    in_process = run_metrics(tmp_path, "in")
    monkeypatch.setattr(sim_run, "BESIDE_TASKS", 0)  # every run forks
    beside = run_metrics(tmp_path, "beside")
    drop = ("wall_s", "created")  # the command's own clock, if it records one
    assert {k: v for k, v in beside.items() if k not in drop} == {k: v for k, v in in_process.items() if k not in drop}
    assert beside["lower_bound_s"] > 0 and beside["device_bytes"] > 0
