"""The precision setting: csp at any D is bitwise sequential at the same precision; precisions differ.

bf16 autocast runs on the CPU too, so the default suite checks it there (on a GPU, with
``device=auto``, the same tests run on CUDA). tf32 changes nothing on the CPU (no TF32 kernels:
it computes as fp32), so its grid runs in the default suite only where CUDA is, and with ``-m slow``.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import torch

from naspipe import precision
from naspipe.config.schema import Config
from naspipe.determinism import layer_precision
from tests.conftest import run_cli

SPACES = ("nlp.tiny", "cv.tiny")
ADAM = ("--set", "optimizer.name=adam", "--set", "optimizer.lr=0.01")
TF32 = pytest.param("tf32", marks=() if torch.cuda.is_available() else pytest.mark.slow)


def train(out: Path, space: str, system: str, stages: int, prec: str, *extra: str, steps: int = 8) -> Path:
    result = run_cli("train", "--space", space, "--system", system, "--stages", str(stages), "--steps", str(steps),
                     "--seed", "3", "--set", f"precision={prec}", "--set", "progress=off", "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return out


def compare(*runs: Path) -> tuple[int, str]:
    result = run_cli("compare", *map(str, runs))
    return result.returncode, result.stdout + result.stderr


def assert_identical(*runs: Path) -> None:
    code, text = compare(*runs)
    assert code == 0, text
    assert text.count("IDENTICAL") == len(runs) - 1


def csp_grid(tmp_path: Path, space: str, prec: str, stages: tuple[int, ...], *extra: str, steps: int = 8) -> None:
    """sequential, then csp with the cache at each of ``stages``: all bitwise one run."""
    reference = train(tmp_path / "seq", space, "sequential", 1, prec, *extra, steps=steps)
    runs = [train(tmp_path / f"csp{d}", space, "csp", d, prec, "--set", "cache.enabled=true", *extra, steps=steps)
            for d in stages]
    assert_identical(reference, *runs)


@pytest.mark.parametrize("prec", ["bf16", TF32])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("space", SPACES)
def test_csp_with_the_cache_is_bitwise_sequential_at_the_same_precision(tmp_path, space, optimizer, prec):
    csp_grid(tmp_path, space, prec, (1, 2, 3), *(ADAM if optimizer == "adam" else ()))


@pytest.mark.slow
@pytest.mark.parametrize("prec", ["bf16", "tf32"])
@pytest.mark.parametrize("space", SPACES)
def test_csp_at_4_and_8_stages_is_bitwise_sequential_at_the_same_precision(tmp_path, space, prec):
    csp_grid(tmp_path, space, prec, (4, 8), *ADAM, steps=16)


@pytest.mark.parametrize("space", SPACES)
def test_bf16_really_changes_the_bits_and_stays_close(tmp_path, space):
    fp32 = train(tmp_path / "fp32", space, "sequential", 1, "fp32")
    bf16 = train(tmp_path / "bf16", space, "sequential", 1, "bf16")
    code, text = compare(fp32, bf16)
    assert code == 1 and "first diverging step: subnet 0" in text, text
    losses = [[float(line.split(",")[3]) for line in (run / "losses.csv").read_text().splitlines()[1:]]
              for run in (fp32, bf16)]
    assert all(abs(a - b) <= 0.05 * abs(a) for a, b in zip(*losses, strict=True)), losses  # the same training
    metrics = (bf16 / "metrics.json").read_text()
    assert '"precision": "bf16"' in metrics


def test_tf32_on_the_cpu_computes_as_fp32(tmp_path):
    cpu = ("--set", "device=cpu")
    assert_identical(train(tmp_path / "fp32", "nlp.tiny", "csp", 2, "fp32", *cpu),
                     train(tmp_path / "tf32", "nlp.tiny", "csp", 2, "tf32", *cpu))


def test_bf16_autocasts_matrix_products_and_keeps_parameters_fp32():
    layer = torch.nn.Linear(4, 4)
    with layer_precision("bf16", torch.device("cpu"))():
        out = layer(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16 and layer.weight.dtype == torch.float32
    with layer_precision("fp32", torch.device("cpu"))():
        assert layer(torch.ones(2, 4)).dtype == torch.float32


def test_the_config_schema_offers_the_precisions_the_module_defines():
    assert typing.get_args(typing.get_type_hints(Config)["precision"]) == precision.NAMES
    assert Config().precision == precision.DEFAULT


def test_an_unknown_precision_is_one_line_exit_2(tmp_path):
    result = run_cli("train", "--space", "toy", "--steps", "2", "--set", "precision=fp16", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "precision" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_resume_at_another_precision_is_refused(tmp_path):
    run = train(tmp_path / "run", "toy", "csp", 1, "fp32", "--set", "checkpoint_every=2", steps=4)
    result = run_cli("train", "--space", "toy", "--system", "csp", "--stages", "1", "--seed", "3", "--steps", "6",
                     "--resume", str(run), "--set", "precision=bf16", "--out", str(tmp_path / "more"))
    assert result.returncode == 2 and "'precision'" in result.stderr, result.stderr
