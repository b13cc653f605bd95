"""Layer profiling: distinct ops measured once, CSV round trip, costs per position, CLI glue."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from naspipe.cli import main
from naspipe.commands.profile import space_options
from naspipe.errors import UsageError
from naspipe.profile import (
    FIELDS,
    layer_costs_from_profile,
    profile_space,
    read_profile_csv,
    render_table5,
    write_profile_csv,
)
from naspipe.space import make_space
from naspipe.space.ops.seq import SEQ_OPS

FAST = {"repeats": 1, "warmup": 0}


@pytest.fixture(scope="module")
def tiny_rows():
    return profile_space(make_space("nlp.tiny"), **FAST)


def test_rows_cover_every_layer_once(tiny_rows):
    space = make_space("nlp.tiny")
    s = space.structure
    assert sum(r.layers for r in tiny_rows) == s.num_layers
    assert len({(r.op, r.in_shape) for r in tiny_rows}) == len(tiny_rows)
    assert len(tiny_rows) == 2 + len(set(s.blocks[0])) + len(set(s.blocks[-1]))
    for r in tiny_rows:
        assert r.device == "cpu" and r.fwd_ms > 0 and r.copy_ms >= 0 and r.act_bytes > 0
        assert r.param_bytes > 0
    emb = next(r for r in tiny_rows if r.op == "embedding")
    assert emb.role == "prefix" and emb.positions == "0" and emb.bwd_ms == 0.0  # frozen, batch input
    head = next(r for r in tiny_rows if r.op == "output")
    assert head.role == "suffix" and head.bwd_ms > 0  # frozen, but its input needs a gradient
    o = space.options
    assert head.act_bytes == o["batch_size"] * o["seq_len"] * o["vocab"] * 4
    enc = next(r for r in tiny_rows if r.op == "enc.conv3")
    assert enc.positions == f"1-{space.encoder_blocks}" and enc.in_shape.startswith("8x12x32:float32;")


def test_csv_round_trip(tiny_rows, tmp_path):
    path = tmp_path / "sub" / "profile.csv"
    write_profile_csv(tiny_rows, path)
    assert read_profile_csv(path) == tiny_rows
    assert path.read_text().splitlines()[0] == ",".join(FIELDS)
    assert [p.name for p in path.parent.iterdir()] == ["profile.csv"]  # no temp file left
    odd = dataclasses.replace(tiny_rows[0], fwd_ms=0.1 + 0.2, bwd_ms=1e-12, copy_ms=12345.678901234567)
    write_profile_csv([odd], path)
    assert read_profile_csv(path) == [odd]


def test_read_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing column"):
        read_profile_csv(bad)
    with pytest.raises(ValueError, match="nope.csv"):
        read_profile_csv(tmp_path / "nope.csv")


def test_layer_costs_one_per_position(tiny_rows):
    space = make_space("nlp.tiny")
    costs = layer_costs_from_profile(space, tiny_rows)
    assert len(costs) == space.structure.num_positions
    by_op = {r.op: r.fwd_ms + r.bwd_ms for r in tiny_rows}
    assert costs[0] == by_op["embedding"] and costs[-1] == by_op["output"]
    block = space.structure.blocks[0]
    assert costs[1] == pytest.approx(sum(by_op[op] for op in block) / len(block))
    with pytest.raises(ValueError, match="enc.conv3"):
        layer_costs_from_profile(space, [r for r in tiny_rows if r.op != "enc.conv3"])


def test_nlp_c1_profiles_each_distinct_op_once(monkeypatch):
    # Full nlp.c1 structure (48 blocks x 72 candidates), small tensors so it runs in seconds.
    space = make_space("nlp.c1", {"dim": 32, "vocab": 64, "seq_len": 8, "batch_size": 2})
    built = []
    original = space.build_layer
    monkeypatch.setattr(space, "build_layer", lambda lid, seed: built.append(lid) or original(lid, seed))
    rows = profile_space(space, **FAST)
    assert len(rows) == 2 + 2 * len(SEQ_OPS) == 50
    assert len(built) == len(rows) == len({space.structure.op_name(lid) for lid in built})
    assert sum(r.layers for r in rows) == space.structure.num_layers == 2 + 48 * 72
    for r in rows:
        if r.role == "block":
            assert r.layers == 24 * 3  # 24 blocks of its half x 3 copies of the op per block
    assert len(layer_costs_from_profile(space, rows)) == 50
    # the same profile serves another preset with the same positions and ops
    assert len(layer_costs_from_profile(make_space("nlp.c3"), rows)) == 50


def test_cv_profile_distinct_shapes():
    space = make_space("cv.tiny", {"candidates": 10, "blocks": 6, "reductions": 1})
    rows = profile_space(space, **FAST)
    # normal blocks at two resolutions + reduction blocks: 3 x 10 ops + stem + classifier
    assert len(rows) == 32
    assert sum(r.layers for r in rows) == space.structure.num_layers
    identity = [r for r in rows if r.op == "identity"]
    assert len(identity) == 2 and all(r.param_bytes == 0 and r.copy_ms == 0.0 for r in identity)
    assert len(layer_costs_from_profile(space, rows)) == space.structure.num_positions
    table = render_table5(rows)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| op |") and "fwd ms" in lines[0] and "param MiB" in lines[0]
    assert len(lines) == 2 + len(rows)


def test_profile_without_recompute():
    rows = profile_space(make_space("cv.tiny"), recompute=False, **FAST)
    assert all(not r.recompute for r in rows)
    assert all(r.bwd_ms > 0 for r in rows if r.role != "prefix")


def test_cli_writes_csv_and_table(tmp_path, capsys):
    out, table = tmp_path / "p.csv", tmp_path / "t.md"
    argv = ["profile", "--space", "cv.tiny", "--set", "blocks=3", "--set", "space.candidates=2",
            "--set", "reductions=0"]
    argv += ["--repeats", "1", "--warmup", "0", "--out", str(out), "--table", str(table)]
    assert main(argv) == 0
    rows = read_profile_csv(out)
    assert len(rows) == 4 and rows[0].repeats == 1
    assert table.read_text() == render_table5(rows)
    assert "conv3x3" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, word",
    [
        (["--space", "nlp.nope"], "nlp.nope"),
        (["--space", "nlp.tiny", "--set", "dimm=3"], "dimm"),
        (["--space", "nlp.tiny", "--set", "novalue"], "novalue"),
        (["--space", "nlp.tiny", "--set", "dim=[64,"], "dim"),
        (["--space", "nlp.tiny", "--repeats", "0"], "repeats"),
        (["--space", "nlp.tiny", "--threads", "0"], "threads"),
    ],
)
def test_cli_errors_are_one_line_naming_the_thing(tmp_path, capsys, argv, word):
    out = tmp_path / "p.csv"
    assert main(["profile", *argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("naspipe: error: ") and word in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("where", ["unwritable", "proc", "under-a-file", "a-directory"])
def test_cli_out_unwritable_names_the_given_path(tmp_path, capsys, where):
    if where == "unwritable":
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that can write anywhere (root)")
        out = locked / "p.csv"
    elif where == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc")
        out = Path("/proc/naspipe-test/p.csv")
    elif where == "under-a-file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "p.csv"
    else:
        out = tmp_path
    assert main(["profile", "--space", "cv.tiny", "--repeats", "1", "--warmup", "0", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"naspipe: error: --out {out}: ") and err.count("\n") == 1 and ".tmp" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_unavailable_is_a_value_error():
    with pytest.raises(ValueError, match="cuda"):
        profile_space(make_space("cv.tiny"), device="cuda", **FAST)


def test_space_options_accept_the_space_prefix():
    assert space_options(["dim=64", "data=null", "dropout=0.2", "space.name=abc", "space.data2="]) == {
        "dim": 64,
        "data": None,
        "dropout": 0.2,
        "name": "abc",
        "data2": None,
    }


def test_first_layer_backward_only_when_trained():
    frozen = profile_space(make_space("cv.tiny", {"blocks": 2, "candidates": 1, "reductions": 0}), **FAST)
    causal = profile_space(
        make_space("cv.tiny", {"blocks": 2, "candidates": 1, "reductions": 0}, "causal"), **FAST
    )
    assert frozen[0].op == causal[0].op == "stem"
    assert frozen[0].bwd_ms == 0.0 and causal[0].bwd_ms > 0.0


# -- issue 18, item 4: every number read from a profile is finite and in range ----------------------
GOOD_ROW = {"space": "toy", "op": "mlp", "role": "block", "positions": "1-8", "layers": "16",
            "in_shape": "8x16x32:float32", "device": "cpu", "device_name": "cpu", "threads": "1",
            "recompute": "True", "repeats": "1", "warmup": "0", "fwd_ms": "1.5", "bwd_ms": "3.0",
            "copy_ms": "0.01", "param_bytes": "17024", "act_bytes": "16384"}


def profile_text(**changes: str) -> str:
    row = {**GOOD_ROW, **changes}
    return ",".join(FIELDS) + "\n" + ",".join(row[f] for f in FIELDS) + "\n"


def test_a_good_row_reads(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(profile_text(bwd_ms="0.0"))  # a layer without a backward (the embedding) measures 0
    [row] = read_profile_csv(path)
    assert (row.fwd_ms, row.bwd_ms, row.layers) == (1.5, 0.0, 16)


@pytest.mark.parametrize(("column", "value"), [
    ("fwd_ms", "-1.0"), ("fwd_ms", "nan"), ("bwd_ms", "inf"), ("copy_ms", "-0.5"), ("layers", "0"),
    ("threads", "0"), ("repeats", "0"), ("warmup", "-1"), ("param_bytes", "-8"), ("act_bytes", "-1"),
    ("positions", ""), ("positions", "5-2"),
])
def test_read_rejects_numbers_out_of_range_naming_file_line_column_value(tmp_path, column, value):
    path = tmp_path / "p.csv"
    path.write_text(profile_text(**{column: value}))
    with pytest.raises(UsageError) as info:
        read_profile_csv(path)
    message = str(info.value)
    assert f"p.csv:2: bad value {value!r} in column {column!r}" in message and "\n" not in message
