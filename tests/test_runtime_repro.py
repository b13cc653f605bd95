"""The contract: csp over D stages is bitwise the sequential reference (losses and weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

SMALL = ["--set", "space.blocks=6", "--set", "space.candidates=3", "--set", "space.dim=16", "--set", "space.seq_len=8"]


def train(out: Path, system: str, stages: int, seed: int, *extra: str, steps: int = 10) -> Path:
    given = {extra[i + 1].partition("=")[0] for i in range(len(extra) - 1) if extra[i] == "--set"}
    small = [a for flag, item in zip(SMALL[::2], SMALL[1::2], strict=True) if item.partition("=")[0] not in given
             for a in (flag, item)]  # a key of extra replaces SMALL's: the command line refuses a key given twice
    result = run_cli("train", "--system", system, "--stages", str(stages), "--steps", str(steps),
                     "--seed", str(seed), "--out", str(out), *small, *extra)
    assert result.returncode == 0, result.stderr
    return out


def assert_identical(*runs: Path) -> None:
    result = run_cli("compare", *map(str, runs))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("IDENTICAL") == len(runs) - 1


# Adam with csp is bitwise in the default suite through test_shared_windowed and test_runtime_micro
@pytest.mark.parametrize(("seed", "optimizer"), [(0, "sgd"), pytest.param(1, "adam", marks=pytest.mark.slow)])
def test_csp_equals_sequential_for_d_1_to_4(tmp_path, seed, optimizer):
    opt = ["--set", f"optimizer.name={optimizer}"] + (["--set", "optimizer.lr=0.01"] if optimizer == "adam" else [])
    reference = train(tmp_path / "seq", "sequential", 1, seed, *opt)
    runs = [train(tmp_path / f"csp{d}", "csp", d, seed, *opt) for d in (1, 2, 3, 4)]
    assert_identical(reference, *runs)
    losses = (reference / "losses.csv").read_text().splitlines()
    assert len(losses) == 11 and len({line.split(",")[2] for line in losses[1:]}) > 1


def test_causal_shared_layers_and_no_recompute_keep_the_contract(tmp_path):
    causal = ["--set", "shared_policy=causal"]
    assert_identical(train(tmp_path / "seq", "sequential", 1, 3, *causal),
                     train(tmp_path / "csp3", "csp", 3, 3, *causal))
    plain = ["--set", "recompute=false"]
    assert_identical(train(tmp_path / "seq2", "sequential", 1, 4, *plain),
                     train(tmp_path / "csp2", "csp", 2, 4, *plain))


def test_sequential_over_stages_equals_one_stage(tmp_path):
    assert_identical(train(tmp_path / "a", "sequential", 1, 5), train(tmp_path / "b", "sequential", 2, 5))


def test_different_seeds_differ(tmp_path):
    a, b = train(tmp_path / "a", "csp", 1, 0), train(tmp_path / "b", "csp", 1, 1)
    result = run_cli("compare", str(a), str(b))
    assert result.returncode == 1
    assert "first diverging step: subnet 0" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("stages", [8, 16])
def test_csp_equals_sequential_for_d_8_and_16(tmp_path, stages):
    deep = ["--set", "space.blocks=16"]
    reference = train(tmp_path / "seq", "sequential", 1, 7, *deep, steps=24)
    assert_identical(reference, train(tmp_path / "csp", "csp", stages, 7, *deep, steps=24))


def test_torchrun_launch_is_bitwise_the_local_one(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:  # a free port for torchrun's rendezvous
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    reference = train(tmp_path / "seq", "sequential", 1, 2)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", port,
                "-m", "naspipe", "train", "--system", "csp", "--stages", "2", "--steps", "10", "--seed", "2",
                "--out", str(tmp_path / "torchrun"), *SMALL]
    result = subprocess.run(torchrun, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert_identical(reference, tmp_path / "torchrun")
