"""The command table: lazy imports, the one error handler, real errors from broken commands."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types

import pytest

from naspipe import cli
from naspipe.data.errors import DataError
from naspipe.errors import UsageError


def _modules_after(code: str) -> set[str]:
    """Run ``code`` in a fresh interpreter; the ``naspipe``/``torch`` modules it left loaded."""
    probe = code + "\nimport sys\nprint(' '.join(m for m in sys.modules if m.startswith(('naspipe', 'torch'))))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_top_level_help_imports_no_command() -> None:
    loaded = _modules_after(
        "from naspipe.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert {entry.module for entry in cli.COMMANDS.values()}.isdisjoint(loaded)
    assert "naspipe.cli" in loaded and "torch" not in loaded


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    for name, entry in cli.COMMANDS.items():
        assert name in out and entry.help.split()[0] in out


def test_compare_imports_no_torch(tmp_path: pytest.TempPathFactory) -> None:
    loaded = _modules_after(f"from naspipe.cli import main\nmain(['compare', {str(tmp_path)!r}, {str(tmp_path)!r}])")
    assert "naspipe.commands.compare" in loaded and "torch" not in loaded


def test_every_command_builds_its_parser() -> None:
    for name in cli.COMMANDS:
        parser = cli.build_parser(name)
        with pytest.raises(SystemExit):  # each has a required argument
            parser.parse_args([name])


def _fake_command(monkeypatch: pytest.MonkeyPatch, run: object) -> None:
    module = types.ModuleType("naspipe_fake_command")

    def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
        return sub.add_parser("fake")

    module.add_parser = add_parser  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, "fake", cli.Command(module.__name__, "a fake command"))


@pytest.mark.parametrize("error", [UsageError("bad value 'x' in key 'k'"), DataError("f.idx: bad magic")])
def test_user_errors_are_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         error: UsageError) -> None:
    def run(args: argparse.Namespace) -> int:
        raise error

    _fake_command(monkeypatch, run)
    assert cli.main(["fake"]) == 2
    assert capsys.readouterr().err == f"naspipe: error: {error}\n"


def test_other_value_errors_keep_their_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args: argparse.Namespace) -> int:
        raise ValueError("a bug, not bad input")

    _fake_command(monkeypatch, run)
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["fake"])


def test_missing_command_module_raises_its_real_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "ghost", cli.Command("naspipe.no_such_module", "gone"))
    with pytest.raises(ModuleNotFoundError, match="naspipe.no_such_module"):
        cli.main(["ghost", "--x"])


def test_unknown_command_is_a_usage_exit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["trian"])
    assert info.value.code == 2 and "invalid choice: 'trian'" in capsys.readouterr().err
