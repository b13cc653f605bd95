"""Commands that need no tensors never import torch: its import (with ``torch._dynamo``, ~2.5 s of CPU)
was most of a workflow simulation job's cost (docs/startup.md).

Each command runs whole, through :func:`naspipe.cli.main`, in a fresh interpreter, which then reports
which heavy modules it loaded. A probe that loads torch shows the check can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "pandas", "matplotlib", "seaborn", "scipy", "sacrebleu", "sentencepiece")


def loaded_after(argv: list[str], before: str = "") -> list[str]:
    """Run ``naspipe argv`` in a fresh interpreter (after ``before``); the heavy modules it loaded."""
    code = (f"import sys\n{before}\nfrom naspipe.cli import main\nrc = main({argv!r})\n"
            f"print('loaded:', rc, *sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    rc, *loaded = out.rpartition("loaded:")[2].split()
    assert rc == "0", out
    return loaded


def test_simulate_imports_no_torch(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    argv = ["simulate", "--space", "nlp.tiny", "--system", "csp", "--stages", "4", "--steps", "16", "--out", str(out)]
    assert loaded_after(argv) == []
    assert json.loads((out / "metrics.json").read_text())["subnets"] == 16


@pytest.mark.parametrize("space", ["toy", "nlp.c1", "cv.c1"])
def test_simulate_paper_spaces_import_no_torch(tmp_path: Path, space: str) -> None:
    argv = ["simulate", "--space", space, "--system", "gpipe", "--stages", "4", "--steps", "8",
            "--batch", "max", "--out", str(tmp_path / "sim")]
    assert loaded_after(argv) == []


def test_partition_imports_no_torch(tmp_path: Path) -> None:
    argv = ["partition", "--space", "cv.tiny", "--stages", "3", "--out", str(tmp_path / "p.json")]
    assert loaded_after(argv) == []
    assert json.loads((tmp_path / "p.json").read_text())["stages"] == 3


def test_plan_imports_no_torch() -> None:
    """The default workflow's cost (it simulates every training job's memory) without torch."""
    config = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
    assert loaded_after(["plan", "--configfile", str(config)]) == []


def test_probe_sees_torch(tmp_path: Path) -> None:
    """The check above can fail: a command run after torch was imported reports it."""
    argv = ["partition", "--space", "toy", "--stages", "2", "--out", str(tmp_path / "p.json")]
    assert loaded_after(argv, before="import torch") == ["torch"]


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_deterministic_algorithms_without_dynamo() -> None:
    """make_deterministic sets torch's deterministic switch (not warn-only) and loads no torch._dynamo."""
    out = _python("import sys, torch\nfrom naspipe.determinism import make_deterministic\n"
                  "assert not torch.are_deterministic_algorithms_enabled()\n"
                  "make_deterministic(1, torch.device('cpu'))\n"
                  "print(torch.are_deterministic_algorithms_enabled(),"
                  " torch.is_deterministic_algorithms_warn_only_enabled(), 'torch._dynamo' in sys.modules)")
    assert out == "True False False"


def test_deterministic_algorithms_set_inductor_when_loaded() -> None:
    """Where inductor is loaded anyway, its flag is set as torch.use_deterministic_algorithms sets it."""
    out = _python("import torch, torch._inductor.config as c\nfrom naspipe.determinism import make_deterministic\n"
                  "c.deterministic = False\nmake_deterministic(1, torch.device('cpu'))\n"
                  "print(c.deterministic, torch.are_deterministic_algorithms_enabled())")
    assert out == "True True"


def test_batches_load_no_metric_or_tokenizer_packages() -> None:
    """A training job reads batches through naspipe.data without sacrebleu, sentencepiece or Pillow."""
    out = _python("import sys\nfrom naspipe.data.batches import TranslationBatches\nimport naspipe.data\n"
                  "naspipe.data.DataError\nprint(*sorted(m for m in ('sacrebleu', 'sentencepiece', 'PIL')"
                  " if m in sys.modules))")
    assert out == ""
