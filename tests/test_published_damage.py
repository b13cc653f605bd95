"""``naspipe published`` against hostile input (issue 41, items 1, 2 and 5).

A damaged run is refused in one line by the one run verifier (:func:`naspipe.rundigest.verify_run`), as
``compare`` refuses it, instead of being vouched for from its own ``outputs.sha256``; a run trained with another
setting that changes the bits says which, before the bits; and every malformed record, config, output path or
results file is one line and exit 2 with nothing written. Runs here are small hand-made trees with consistent
digests (the verifier's checks are what matter, not the training), so the file runs in seconds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from naspipe import published
from naspipe.cli import main
from naspipe.config.schema import Config
from naspipe.rundigest import hash_of_hashes, write_digests

RUN = "runs/toy/csp/D2-seed0"
TABLE = "tables/table3_reproducibility.csv"
LAYER = "a3" * 32  # a layer digest: 64 hex digits
SETTINGS = {"seed": 0, "system": "csp", "stages": 2, "threads": 1, "precision": "fp32",
            "optimizer": {"name": "sgd", "lr": 0.05}, "space": {"name": "toy", "data": "results/data/x"},
            "cache": {"enabled": False}, "timeout_s": 300.0, "device": "auto", "priority": "critical",
            "partition_file": "results/partitions/toy-D2.json", "steps": 40}


def make_run(run: Path, losses: list[str], settings: dict[str, Any] | None = None,
             losses_bytes: bytes | None = None) -> Path:
    """A finished run as the runtime writes one: results, metrics.json with its config, outputs.sha256."""
    run.mkdir(parents=True)
    body = "subnet,choices,loss_hex,loss\n" + "".join(f"{i},0,{x},0\n" for i, x in enumerate(losses))
    (run / "losses.csv").write_bytes(body.encode() if losses_bytes is None else losses_bytes)
    (run / "layer_hashes.csv").write_text(f"layer,sha256\n0,{LAYER}\n")
    (run / "weights.sha256").write_text(hash_of_hashes({0: LAYER}) + "\n")
    (run / "access_order.csv").write_text("timing-dependent\n")
    metrics = {"subnets": len(losses), "device": "cpu", "partition": "2|3", "config": {**SETTINGS, **(settings or {})}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    write_digests(run)
    return run


def make_tree(root: Path, losses: list[str] | None = None, settings: dict[str, Any] | None = None) -> Path:
    make_run(root / RUN, losses or ["0x1p+0"] * 40, settings)
    (root / "tables").mkdir()
    (root / TABLE).write_text("a,b\n1,2\n")
    return root


def cli(*args: object, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["published", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def publish(tmp: Path, results: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Record ``results`` and publish that record (``--json`` copied over ``--expected``)."""
    expected = tmp / "published.json"
    expected.write_text(json.dumps({"config": {}, "runs": {}, "tables": {}}))
    status, _, err = cli("--results", results, "--expected", expected, "--out", tmp / "first.md", "--json",
                         tmp / "first.json", capsys=capsys)
    assert status == 0, err
    shutil.copyfile(tmp / "first.json", expected)
    return expected


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def assert_one_line_error(status: int, err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert status == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("naspipe: error: "), lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])


# -- item 1: a damaged run is refused, not vouched for ------------------------------------------------------------

def _flip_hex(data: bytes) -> bytes:
    at = data.index(LAYER.encode()) + 5
    return data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:]


DAMAGE: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "a hex digit of layer_hashes.csv flipped": ("layer_hashes.csv", _flip_hex),
    "weights.sha256 zeroed": ("weights.sha256", lambda data: b"0" * 64 + b"\n"),
    "metrics.json broken": ("metrics.json", lambda data: b"{broken"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_run_is_refused_in_one_line_naming_the_run_and_file(
        damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = make_tree(tmp_path / "results")
    expected = publish(tmp_path, results, capsys)
    name, edit = DAMAGE[damage]
    path = results / RUN / name
    path.write_bytes(edit(path.read_bytes()))
    before = snapshot(tmp_path)
    status, out, err = cli("--results", results, "--expected", expected, "--out", tmp_path / "p.md", "--json",
                           tmp_path / "p.json", capsys=capsys)
    assert "reproduces" not in out
    assert_one_line_error(status, err, str(results / RUN / name))
    assert snapshot(tmp_path) == before  # no verdict and no record of a damaged tree


# -- item 2: a differing setting is named before the bits ---------------------------------------------------------

def test_a_differing_setting_is_named_as_the_reason_before_the_bits(tmp_path: Path) -> None:
    expected = published.collect(make_tree(tmp_path / "a"), {})
    found = published.collect(make_tree(tmp_path / "b", ["0x1.8p+0"] * 40, {"threads": 2}), {})
    [run, table] = published.compare(expected, found)
    assert not run.same and table.same
    assert run.where.startswith("trained with threads = 2 (published 1), a setting that changes the bits; "), run.where
    assert run.where.endswith("losses.csv differ; the losses first differ in subnets 0-31"), run.where
    nested = published.collect(make_tree(tmp_path / "c", ["0x1.8p+0"] * 40,
                                         {"optimizer": {"name": "sgd", "lr": 0.1}}), {})
    assert published.compare(expected, nested)[0].where.startswith("trained with optimizer.lr = 0.1 (published 0.05)")


def test_the_same_bits_under_another_setting_reproduce_and_say_so(tmp_path: Path) -> None:
    expected = published.collect(make_tree(tmp_path / "a"), {})
    found = published.collect(make_tree(tmp_path / "b", settings={"precision": "tf32"}), {})
    outcomes = published.compare(expected, found)
    assert [o.same for o in outcomes] == [True, True]
    text = published.summary(outcomes, [], "P")
    assert text.splitlines()[2].startswith("Your run reproduces the published results bit for bit: 1 of 1 runs")
    assert f"- run `{RUN}`: the same bits, though trained with precision = \"tf32\" (published \"fp32\")" in text


def test_settings_that_cannot_change_the_bits_are_not_recorded(tmp_path: Path) -> None:
    """Paths (the dataset's, the partition file's), the cache, timeouts: what a setting names, not what it trains."""
    found = published.collect(make_tree(tmp_path / "a"), {})
    settings = found["runs"][RUN]["settings"]
    assert settings["space"] == {"name": "toy"} and settings["threads"] == 1 and settings["device"] == "cpu"
    assert settings["partition"] == "2|3"  # metrics.json's, as the run trained
    assert not {"priority", "timeout_s", "partition_file", "steps"} & set(settings)


def test_a_record_without_settings_still_reproduces(tmp_path: Path) -> None:
    """Records made before settings were recorded (the repository's own) compare by their bits."""
    found = published.collect(make_tree(tmp_path / "a"), {})
    old = json.loads(json.dumps(found))
    del old["runs"][RUN]["settings"]
    published.check_record(old, "old")
    published.check_record(found, "new")
    assert [o.same for o in published.compare(old, found)] == [True, True]
    repository = json.loads((Path(__file__).parent.parent / "workflow/published/config.json").read_text())
    published.check_record(repository, "workflow/published/config.json")


def test_every_setting_a_resume_must_keep_is_recorded() -> None:
    """The published check names what resume refuses to change (naspipe.runtime.checkpoint), paths excepted."""
    from naspipe.runtime import checkpoint
    from naspipe.scheduling.policies import POLICIES

    names = set(checkpoint.MUST_MATCH)
    for system in POLICIES:
        names |= {key.split()[0] for key in checkpoint.numerics_settings({"system": system, "stages": 2})}
    assert names - set(published.BIT_SETTINGS) == {"partition_file"}


def test_every_config_key_is_recorded_or_left_out_for_a_reason() -> None:
    """A new config key fails here until it is sorted: recorded, or one of these (order, bookkeeping, output, the
    subnets trained, a path)."""
    left_out = {"priority", "keep_checkpoints", "final_checkpoint", "trace_max_events", "timeout_s", "progress",
                "steps", "partition_file", "replicas"}
    keys = {field.name for field in dataclasses.fields(Config)}
    assert keys - left_out == set(published.BIT_SETTINGS)


# -- item 5: every bad input is one line, exit 2, nothing written -------------------------------------------------

@dataclass(frozen=True)
class Bad:
    """A bad input: ``record`` edits the good published record, ``tree`` the results tree, ``args`` the flags."""

    name: str
    expect: str
    record: Callable[[dict[str, Any]], object] | None = None
    tree: Callable[[Path], object] | None = None
    args: Callable[[Path], dict[str, str]] | None = None
    text: Callable[[str], str] | None = None  # edits the record's JSON text (what JSON data cannot hold)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(record: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = record
        for key in parents:
            node = node[RUN if key == "RUN" else TABLE if key == "TABLE" else key]
        last = RUN if last == "RUN" else TABLE if last == "TABLE" else last
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


_DELETE = object()


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"a": value}
    return value


def _binary_losses(results: Path) -> None:
    shutil.rmtree(results / RUN)
    make_run(results / RUN, ["0x1p+0"], losses_bytes=b"subnet,choices\n\xff\xfe\x00\x9c\n")


def _unrecorded_missing_losses(results: Path) -> None:
    (results / RUN / "losses.csv").unlink()
    write_digests(results / RUN)


def _metrics_config(config: Any) -> Callable[[Path], None]:
    def edit(results: Path) -> None:
        path = results / RUN / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "config": config}))
    return edit


def _file_at(name: str) -> Callable[[Path], dict[str, str]]:
    def args(tmp: Path) -> dict[str, str]:
        (tmp / "file").write_text("x")
        return {name: str(tmp / "file" / "p.out")}
    return args


BAD = [
    Bad("run entry {}", "files", _set("runs/RUN", {})),
    Bad("run entry null", "got null", _set("runs/RUN", None)),
    Bad("run entry a string", "got a string", _set("runs/RUN", "x")),
    Bad("table entry {}", "sha256", _set("tables/TABLE", {})),
    Bad("table entry null", "got null", _set("tables/TABLE", None)),
    Bad("table entry a string", "got a string", _set("tables/TABLE", "x")),
    Bad("run without files", "'files'", _set("runs/RUN/files", _DELETE)),
    Bad("run without subnets", "'subnets'", _set("runs/RUN/subnets", _DELETE)),
    Bad("run without loss_prefixes", "'loss_prefixes'", _set("runs/RUN/loss_prefixes", _DELETE)),
    Bad("run files a list", "'files'", _set("runs/RUN/files", ["a"])),
    Bad("run file digest a number", "'files'", _set("runs/RUN/files/losses.csv", 3)),
    Bad("run subnets a string", "'subnets'", _set("runs/RUN/subnets", "40")),
    Bad("run subnets a boolean", "'subnets'", _set("runs/RUN/subnets", True)),
    Bad("run loss_prefixes a string", "'loss_prefixes'", _set("runs/RUN/loss_prefixes", "ab")),
    Bad("run loss_prefixes with null", "'loss_prefixes'", _set("runs/RUN/loss_prefixes", [None])),
    Bad("run settings a string", "'settings'", _set("runs/RUN/settings", "x")),
    Bad("table without sha256", "'sha256'", _set("tables/TABLE/sha256", _DELETE)),
    Bad("table sha256 a number", "'sha256'", _set("tables/TABLE/sha256", 1)),
    Bad("table lines an object", "'lines'", _set("tables/TABLE/lines", {})),
    Bad("table lines with a number", "'lines'", _set("tables/TABLE/lines", [1])),
    Bad("runs a list", "'runs'", _set("runs", [])),
    Bad("tables missing", "'tables'", _set("tables", _DELETE)),
    Bad("record config a list", "'config'", _set("config", [1])),
    Bad("record config a string", "'config'", _set("config", "x")),
    Bad("record config nested deep", "nested", _set("config", _deep(400))),
    Bad("record with a 5000-digit number", "--expected",
        text=lambda text: text.replace('"config": {', '"config": {"n": ' + "1" * 5000 + ", ", 1)),
    Bad("--config-json a list", "--config-json", args=lambda tmp: {"--config-json": "[1]"}),
    Bad("--config-json a string", "--config-json", args=lambda tmp: {"--config-json": '"x"'}),
    Bad("--config-json null", "--config-json", args=lambda tmp: {"--config-json": "null"}),
    Bad("--config-json not JSON", "--config-json", args=lambda tmp: {"--config-json": "{"}),
    Bad("--config-json nested 100000 deep", "--config-json",
        args=lambda tmp: {"--config-json": "[" * 100_000 + "]" * 100_000}),
    Bad("--config-json nested 400 deep", "--config-json", args=lambda tmp: {"--config-json": json.dumps(_deep(400))}),
    Bad("--config-json a 5000-digit number", "--config-json", args=lambda tmp: {"--config-json": "1" * 5000}),
    Bad("--out empty", "--out", args=lambda tmp: {"--out": ""}),
    Bad("--json empty", "--json", args=lambda tmp: {"--json": ""}),
    Bad("--out a directory", "--out", args=lambda tmp: {"--out": str(tmp)}),
    Bad("--json a directory", "--json", args=lambda tmp: {"--json": str(tmp)}),
    Bad("--out under a file", "--out", args=_file_at("--out")),
    Bad("--json under a file", "--json", args=_file_at("--json")),
    Bad("--out and --json the same file", "--json", args=lambda tmp: {"--json": str(tmp / "p.md")}),
    Bad("binary losses.csv", "losses.csv", tree=_binary_losses),
    Bad("binary table", TABLE, tree=lambda results: (results / TABLE).write_bytes(b"\xff\xfe\x00\x9c")),
    Bad("a table that is a directory", "x.csv", tree=lambda results: (results / "tables" / "x.csv").mkdir()),
    Bad("a run's metrics config a list", "metrics.json", tree=_metrics_config([1])),
    Bad("a run's metrics config nested deep", "metrics.json", tree=_metrics_config({"space": _deep(400)})),
    Bad("losses.csv missing and unrecorded", "losses.csv", tree=_unrecorded_missing_losses),
]


def test_the_table_of_bad_inputs_is_large_and_unique() -> None:
    assert len(BAD) >= 40 and len({b.name for b in BAD}) == len(BAD)


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_a_bad_input_is_one_line_exit_2_and_writes_nothing(
        bad: Bad, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = make_tree(tmp_path / "results")
    record = published.collect(results, {})
    expected = tmp_path / "published.json"
    if bad.record is not None:
        bad.record(record)
    text = json.dumps(record)
    expected.write_text(text if bad.text is None else bad.text(text))
    if bad.tree is not None:
        bad.tree(results)
    flags = {"--results": str(results), "--expected": str(expected), "--config-json": "{}",
             "--out": str(tmp_path / "p.md"), "--json": str(tmp_path / "p.json")}
    if bad.args is not None:
        flags.update(bad.args(tmp_path))
    before = snapshot(tmp_path)
    status, _, err = cli(*[part for flag in flags.items() for part in flag], capsys=capsys)
    assert_one_line_error(status, err, bad.expect)
    assert snapshot(tmp_path) == before


def test_a_config_as_deep_as_allowed_makes_a_record_that_reads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = make_tree(tmp_path / "results")
    expected = publish(tmp_path, results, capsys)
    flags = ["--results", results, "--config-json", json.dumps(_deep(published.MAX_DEPTH - 1))]
    status, _, err = cli(*flags, "--expected", expected, "--out", tmp_path / "a.md", "--json", tmp_path / "a.json",
                         capsys=capsys)
    assert status == 0, err
    status, out, err = cli(*flags, "--expected", tmp_path / "a.json", "--out", tmp_path / "b.md", "--json",
                           tmp_path / "b.json", capsys=capsys)
    assert status == 0 and out.startswith("Your run reproduces the published results bit for bit"), err
