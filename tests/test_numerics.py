"""``numerics``: native or portable CPU kernels, set before torch loads, checked where torch runs, recorded, and
kept across a resume (naspipe/numerics.py, docs/numerics.md)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe import numerics
from naspipe.errors import UsageError
from tests.conftest import run_cli

PORTABLE_CPU = platform.machine() in ("x86_64", "AMD64") and "avx2" in (numerics.cpu_field("flags") or "")
needs_avx2 = pytest.mark.skipif(not PORTABLE_CPU, reason="portable kernels need an x86-64 CPU with AVX2")


def test_portable_pins_the_three_libraries_and_native_unsets_them() -> None:
    assert numerics.environment("portable") == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                                "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert set(numerics.environment("native").values()) == {None}
    assert numerics.shell_prefix("portable").startswith("export ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE")
    assert numerics.shell_prefix("native") == "unset ATEN_CPU_CAPABILITY MKL_CBWR ONEDNN_MAX_CPU_ISA; "
    with pytest.raises(UsageError, match="'numerics': 'fast' is not one of native, portable"):
        numerics.environment("fast")


def test_a_partial_set_of_pins_is_neither_mode() -> None:
    assert numerics.mode_of({}) == "native"
    assert numerics.mode_of(dict(numerics.PORTABLE_ENV)) == "portable"
    with pytest.raises(UsageError, match="MKL_CBWR=AVX2: neither numerics mode"):
        numerics.mode_of({"MKL_CBWR": "AVX2"})


def test_apply_sets_the_environment_before_torch_and_refuses_after(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"MKL_CBWR": "AVX2", "HOME": "/h"}
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    numerics.apply("portable", env)
    assert env == {**numerics.PORTABLE_ENV, "HOME": "/h"}
    numerics.apply("native", env)
    assert env == {"HOME": "/h"}
    monkeypatch.setitem(sys.modules, "torch", object())  # type: ignore[arg-type]
    numerics.apply("native", env)  # already native's: nothing to change
    with pytest.raises(UsageError, match="portable must be set before torch loads"):
        numerics.apply("portable", env)


def test_a_process_that_loaded_torch_without_the_pins_is_not_portable() -> None:
    numerics.check_loaded("native")  # the test process: no pins
    with pytest.raises(UsageError, match="portable needs an x86-64 CPU with AVX2 and its pins set before torch"):
        numerics.check_loaded("portable")


def test_train_builds_its_config_before_torch_loads() -> None:
    """naspipe train applies the key after reading the config: nothing on that path may load torch first."""
    code = ("import sys, argparse; from naspipe.cli import build_parser; "
            "args = build_parser('train').parse_args(['train', '--space', 'cv.tiny', '--out', 'x']); "
            "from naspipe.config import config_from_args; config_from_args(args); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


@needs_avx2
def test_portable_runs_are_recorded_and_bitwise_across_stages(tmp_path: Path) -> None:
    common = ["--space", "toy", "--steps", "8", "--set", "numerics=portable", "--set", "progress=off"]
    ref = run_cli("train", *common, "--system", "sequential", "--out", str(tmp_path / "seq"), timeout=500)
    assert ref.returncode == 0, ref.stderr
    csp = run_cli("train", *common, "--system", "csp", "--stages", "2", "--out", str(tmp_path / "csp"), timeout=500)
    assert csp.returncode == 0, csp.stderr
    metrics = json.loads((tmp_path / "csp" / "metrics.json").read_text())
    assert metrics["numerics"]["mode"] == "portable" and metrics["numerics"]["cpu_capability"] == "AVX2"
    assert metrics["numerics"]["pins"] == numerics.PORTABLE_ENV and metrics["config"]["numerics"] == "portable"
    for name in ("weights.sha256", "losses.csv"):  # the contract holds under portable kernels too
        assert (tmp_path / "seq" / name).read_bytes() == (tmp_path / "csp" / name).read_bytes()


@needs_avx2
def test_a_resume_under_the_other_mode_is_refused_in_one_line(tmp_path: Path) -> None:
    first = run_cli("train", "--space", "toy", "--steps", "2", "--set", "numerics=portable", "--set", "progress=off",
                    "--out", str(tmp_path / "run"), timeout=500)
    assert first.returncode == 0, first.stderr
    native = run_cli("train", "--space", "toy", "--steps", "4", "--set", "progress=off", "--resume",
                     str(tmp_path / "run"), "--out", str(tmp_path / "more"), timeout=500)
    assert native.returncode == 2
    assert native.stderr.strip().splitlines() == [
        f"naspipe: error: --resume {tmp_path / 'run' / 'checkpoints' / 'step-00000002'}: the checkpoint was trained "
        "with numerics=portable, this run asks for numerics=native; resuming would mix two kernels' bits "
        "(set numerics=portable)"]
    assert not (tmp_path / "more").exists() and not (tmp_path / "more.partial").exists()


def test_native_is_the_train_default_and_recorded(tmp_path: Path) -> None:
    done = run_cli("train", "--space", "toy", "--steps", "2", "--set", "progress=off", "--out", str(tmp_path / "r"),
                   env={"MKL_CBWR": "AVX2"}, timeout=500)  # a stray pin is removed, not half-applied
    assert done.returncode == 0, done.stderr
    recorded = json.loads((tmp_path / "r" / "metrics.json").read_text())["numerics"]
    assert recorded["mode"] == "native" and recorded["pins"] == {}
