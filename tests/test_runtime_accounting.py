"""The stages' CPU time reaches the launcher's ``RUSAGE_CHILDREN``, which is what ``time(1)`` reports.

Locally spawned stages are children of multiprocessing's forkserver, not of the launcher. Until the
launcher stopped the forkserver and waited for it, their CPU never reached the launcher's account,
so ``/usr/bin/time naspipe train --stages 4`` (and the workflow's CPU% under it) saw about a quarter
of what the run burned. No timing is asserted here: two accountings of the same CPU are compared.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from naspipe.config import load_config
from naspipe.runtime import faults, launch, lifecycle

SMALL = ["space.blocks=4", "space.candidates=3", "space.dim=16", "space.seq_len=8", "progress=off", "device=cpu"]


def _forkserver_pid() -> int | None:
    """The pid of multiprocessing's forkserver while one runs (a private field: not in the type stubs)."""
    return cast(Any, launch.mp_forkserver._forkserver)._forkserver_pid


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_the_launcher_is_charged_with_every_stage_s_cpu(tmp_path: Path) -> None:
    """In this process (the launcher), so its own CPU is not in the children's account: every stage's
    own CPU (its ``getrusage(RUSAGE_SELF)`` at the end of the run, in ``metrics.json``) is covered by
    the growth of ``RUSAGE_CHILDREN`` over the run, and no forkserver is left running."""
    config = load_config(None, SMALL, {"system": "csp", "stages": 2, "steps": 16})
    before = _children_cpu_s()
    launch.train(config, tmp_path / "run")
    grown = _children_cpu_s() - before
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    stages = [extra["process_cpu_s"] for extra in metrics["stage_extra"]]
    assert len(stages) == 2 and all(cpu > 0 for cpu in stages)
    assert grown >= sum(stages), (grown, stages)
    assert _forkserver_pid() is None


def test_a_failed_run_also_stops_its_forkserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    """A stage that crashes still brings the run down with its traceback, and the forkserver is stopped
    and reaped on that path too: the forkserver that served the run is gone, not left as an orphan."""
    monkeypatch.setenv(faults.FAIL_ENV, "1:3")
    config = load_config(None, SMALL, {"system": "csp", "stages": 2, "steps": 16})
    served: list[int | None] = []
    start = launch._start_forkserver

    def start_and_note() -> None:
        start()
        served.append(_forkserver_pid())

    monkeypatch.setattr(launch, "_start_forkserver", start_and_note)
    with pytest.raises(launch.StageFailed, match="stage 1 failed"):
        launch.train(config, tmp_path / "run")
    assert "injected failure" in capfd.readouterr().err
    assert _forkserver_pid() is None
    assert len(served) == 1 and served[0] is not None and not lifecycle.alive(served[0])
    with pytest.raises(ChildProcessError):  # reaped by this process, so its children's CPU was counted here
        os.waitpid(served[0], os.WNOHANG)


def _imported_by_stage_set_up(tmp_path: Path, preload: bool) -> list[str]:
    """The modules a stage's set-up imports (``make_deterministic``, then an optimizer as
    ``naspipe.runtime.optim`` makes one) in a fresh interpreter that has imported this runtime, and with
    ``preload`` the forkserver's other preloads too."""
    script = (
        "import json, sys, torch\n"
        "from naspipe.runtime.launch import FORKSERVER_PRELOAD\n"
        "from naspipe.determinism import make_deterministic\n"
        f"for name in FORKSERVER_PRELOAD if {preload} else ():\n"
        "    __import__(name)\n"
        "base = set(sys.modules)\n"
        "make_deterministic(1, torch.device('cpu'))\n"
        "torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, foreach=False)\n"
        "print(json.dumps(sorted(set(sys.modules) - base)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return list(json.loads(done.stdout))


def test_the_forkserver_preloads_what_a_stage_would_import(tmp_path: Path) -> None:
    """Each stage is a fork of the forkserver: a module the stage imports after the fork is imported once
    per stage (torch._dynamo with sympy: ~800 modules, ~1.2 CPU s each time). Every extra preload is one a
    stage's set-up would import (else it is dead weight in the forkserver), and after the preloads the
    set-up imports none of the heavy modules."""
    bare = _imported_by_stage_set_up(tmp_path, preload=False)
    assert set(launch.FORKSERVER_PRELOAD[1:]) <= set(bare)
    preloaded = _imported_by_stage_set_up(tmp_path, preload=True)
    assert not [m for m in preloaded if m.startswith(("torch._dynamo", "torch._inductor", "sympy"))], preloaded
