"""``fsutil.replace_path``: the one way outputs are swapped into place (runs, searches, data,
the workflow's memo), so a crash between the steps never loses the previous result."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from naspipe import fsutil
from naspipe.fsutil import replace_path
from naspipe.plan import memo


def _tree(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def _contents(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.iterdir())}


def _leftovers(parent: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name not in keep)


def test_directory_replaces_directory_and_leaves_nothing_beside(tmp_path: Path) -> None:
    out = _tree(tmp_path / "out", {"a": "old", "stale": "x"})
    new = _tree(tmp_path / ".new", {"a": "new"})
    replace_path(new, out)
    assert _contents(out) == {"a": "new"}
    assert _leftovers(tmp_path, {"out"}) == []


def test_file_replaces_file_and_missing_target_is_a_plain_rename(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("old")
    (tmp_path / ".f.new").write_text("new")
    replace_path(tmp_path / ".f.new", tmp_path / "f")
    assert (tmp_path / "f").read_text() == "new"
    new = _tree(tmp_path / ".d.new", {"x": "1"})
    replace_path(new, tmp_path / "d")
    assert _contents(tmp_path / "d") == {"x": "1"}
    assert _leftovers(tmp_path, {"f", "d"}) == []


def test_a_failed_rename_puts_the_old_result_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _tree(tmp_path / "out", {"a": "old"})
    new = _tree(tmp_path / ".new", {"a": "new"})
    real_rename = os.rename

    def failing(src: str | Path, dst: str | Path) -> None:
        if Path(src) == new:
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(fsutil.os, "rename", failing)
    with pytest.raises(OSError, match="No space"):
        replace_path(new, out)
    assert _contents(out) == {"a": "old"}  # never deleted first
    assert _leftovers(tmp_path, {"out", ".new"}) == []


def test_memo_copy_out_keeps_the_old_output_when_the_swap_fails(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    entry = tmp_path / "store" / "entry"
    entry.mkdir(parents=True)
    (entry / memo.DONE).write_text("run\n")  # a complete entry: its marker names the result kept
    _tree(memo.stored(entry), {"metrics.json": "{}"})
    out = _tree(tmp_path / "results" / "run", {"metrics.json": "previous"})

    def failing(new: Path, target: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(memo, "replace_path", failing)
    with pytest.raises(OSError):
        memo.copy_out(entry, out)
    assert _contents(out) == {"metrics.json": "previous"}
    monkeypatch.undo()
    memo.copy_out(entry, out)
    assert _contents(out) == {"metrics.json": "{}"}
