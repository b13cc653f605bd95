"""Command-line contract: output files, bad input, compare, wire format."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from naspipe.rundigest import RECORDED, write_digests
from naspipe.runtime.wire import Message, pack, unpack
from tests.conftest import run_cli
from tests.test_runtime_repro import SMALL, train


def test_outputs_have_the_documented_shape(tmp_path):
    out = train(tmp_path / "run", "csp", 2, 0, steps=6)
    losses = list(csv.DictReader((out / "losses.csv").open()))
    assert [int(r["subnet"]) for r in losses] == list(range(6))
    assert all(float.fromhex(r["loss_hex"]) == float(r["loss"]) for r in losses)
    assert len((out / "weights.sha256").read_text().strip()) == 64
    hashes = list(csv.DictReader((out / "layer_hashes.csv").open()))
    assert {r["stage"] for r in hashes} == {"0", "1"} and len(hashes) == 1 + 6 * 3 + 1
    access = {int(r["layer"]): r["accesses"] for r in csv.DictReader((out / "access_order.csv").open())}
    assert access[0] == "-".join(f"{y}{k}" for y in range(6) for k in "FB")  # the shared embedding
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("throughput_samples_s", "subnets_per_hour", "bubble_ratio", "bubble_ratio_per_stage", "wall_s",
                "exec_s", "config"):
        assert key in metrics
    assert 0.0 <= metrics["bubble_ratio"] < 1.0 and len(metrics["bubble_ratio_per_stage"]) == 2
    assert metrics["config"]["stages"] == 2 and metrics["subnets"] == 6
    trace = json.loads((out / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1}
    assert {e["cat"] for e in spans} >= {"forward", "recompute", "backward", "optimizer"}
    assert not list(out.glob(".staging-*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stages", "0"], "config key 'stages': 0 must be >= 1"),
        (["--stages", "9"], "--stages 9 exceeds the 8 layers"),
        (["--system", "magic"], "unknown system 'magic'"),
        (["--space", "nope"], "unknown space 'nope'"),
        (["--config", "/nonexistent/config.yaml"], "config file /nonexistent/config.yaml"),
        (["--set", "optimizer.lr=fast"], "config key 'optimizer.lr'"),
        (["--set", "space.colour=red"], "space 'toy' has no option 'colour'"),
        (["--system", "gpipe", "--checkpoint-every", "3"], "must be a multiple of the bulk size 2"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    base = ["train", "--system", "csp", "--stages", "2", "--steps", "4", "--out", str(out), *SMALL]
    result = run_cli(*base, *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not out.exists()


def test_malformed_config_file_names_file_and_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("steps: 4\nspace: [unclosed\n")
    result = run_cli("train", "--config", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and str(config) in result.stderr and "line" in result.stderr
    config.write_text("stages: two\n")
    result = run_cli("train", "--config", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "config key 'stages'" in result.stderr


def test_help_documents_every_config_key():
    result = run_cli("train", "--help")
    assert result.returncode == 0
    for key in ("optimizer.name", "max_inflight", "checkpoint_every", "shared_policy", "recompute", "--resume",
                "--set"):
        assert key in result.stdout


def test_compare_reports_the_first_diverging_step(tmp_path):
    a = train(tmp_path / "a", "csp", 1, 0, steps=5)
    b = tmp_path / "b"
    b.mkdir()
    for name in ("layer_hashes.csv", "weights.sha256", "metrics.json"):
        (b / name).write_text((a / name).read_text())
    rows = (a / "losses.csv").read_text().splitlines()
    subnet, choices, _, _ = rows[3].split(",")
    rows[3] = f"{subnet},{choices},{float.hex(1.5)},1.5"
    (b / "losses.csv").write_text("\n".join(rows) + "\n")
    write_digests(b, [n for n in RECORDED if (b / n).is_file()])  # a sound run that trained differently
    result = run_cli("compare", str(a), str(b))
    assert result.returncode == 1 and "first diverging step: subnet 2" in result.stdout
    missing = run_cli("compare", str(a), str(tmp_path / "missing"))
    assert missing.returncode == 2 and "losses.csv" in missing.stderr


def test_wire_round_trip_is_exact():
    tensors = (torch.randn(3, 4), None, torch.arange(6).reshape(2, 3), torch.randn(5, dtype=torch.float64),
               torch.randn(2, 2).to(torch.bfloat16), torch.tensor([True, False]))
    back = unpack(pack(Message("F", 7, tensors), torch.device("cpu")))
    assert back.kind == "F" and back.subnet == 7 and back.tensors[1] is None
    for sent, got in zip(tensors, back.tensors, strict=True):
        if sent is not None:
            assert got.dtype == sent.dtype and got.shape == sent.shape
            def raw(t: torch.Tensor) -> torch.Tensor:
                return t if t.dtype == torch.bool else t.view(torch.uint8)

            assert torch.equal(raw(got), raw(sent))
