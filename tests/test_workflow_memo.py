"""``naspipe memo``: a command runs once per key of the content it reads; other outputs get a copy.

The search phase's retrains and scores are wrapped in it (naspipe.plan.memo): the key must follow the
files' bytes and the chosen JSON fields, never the paths, and bad input stops before anything runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from naspipe.cli import main

# the command counts its runs in a file and writes its output from the key file's content
WRITER = ("import pathlib, sys; c = pathlib.Path(sys.argv[1]); c.write_text(str(int(c.read_text() or 0) + 1)); "
          "pathlib.Path(sys.argv[3]).write_text(pathlib.Path(sys.argv[2]).read_text().upper())")


def memo(tmp: Path, source: Path, best: Path, out: Path, *key: str) -> int:
    counter = tmp / "count"
    counter.touch()
    return main(["memo", "--store", str(tmp / "store"), "--key-file", str(source), "--key-json",
                 f"{best}:choices", *key, "--out", str(out), "--",
                 sys.executable, "-c", WRITER, str(counter), str(source), str(out)])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_equal_content_at_other_paths_runs_once_and_copies(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.txt", "weights"), write(tmp_path / "b.txt", "weights")
    best_a = write(tmp_path / "best_a.json", json.dumps({"choices": [1, 2], "run": "a"}))
    best_b = write(tmp_path / "best_b.json", json.dumps({"choices": [1, 2], "run": "b"}))
    assert memo(tmp_path, a, best_a, tmp_path / "out_a", "--key", "args=x") == 0
    assert memo(tmp_path, b, best_b, tmp_path / "out_b", "--key", "args=x") == 0  # other paths, other run name
    assert (tmp_path / "count").read_text() == "1"
    assert (tmp_path / "out_b").read_text() == (tmp_path / "out_a").read_text() == "WEIGHTS"


@pytest.mark.parametrize("change", ["bytes", "choices", "key"])
def test_other_content_runs_again(tmp_path: Path, change: str) -> None:
    a = write(tmp_path / "a.txt", "weights")
    best = write(tmp_path / "best.json", json.dumps({"choices": [1, 2]}))
    assert memo(tmp_path, a, best, tmp_path / "out1", "--key", "args=x") == 0
    if change == "bytes":
        write(a, "other weights")
    if change == "choices":
        write(best, json.dumps({"choices": [2, 1]}))
    key = "args=y" if change == "key" else "args=x"
    assert memo(tmp_path, a, best, tmp_path / "out2", "--key", key) == 0
    assert (tmp_path / "count").read_text() == "2"


def test_a_failed_command_stores_nothing_and_keeps_its_status(tmp_path: Path) -> None:
    source = write(tmp_path / "a.txt", "w")
    status = main(["memo", "--store", str(tmp_path / "store"), "--key-file", str(source), "--out",
                   str(tmp_path / "out"), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert status == 3
    assert not [p for p in (tmp_path / "store").iterdir() if not p.name.endswith(".lock")]


@pytest.mark.parametrize("args, message", [
    (["--key-file", "missing.txt"], "--key-file missing.txt: cannot read"),
    (["--key-json", "best.json:nope"], "no field 'nope'"),
    (["--key-json", "best.json"], "expected FILE:FIELD"),
    (["--key", "novalue"], "expected NAME=TEXT"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], args: list[str],
                                                       message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "best.json", json.dumps({"choices": [1]}))
    status = main(["memo", "--store", "store", *args, "--out", "out", "--", sys.executable, "-c",
                   "open('ran', 'w')"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ran").exists() and not (tmp_path / "store").exists()
