"""``naspipe simulate``'s progress: the engine reports each admission, and the bar changes nothing else.

A long simulation (64 x 100,000 with the context cache runs for minutes) used to be silent until its
last line; the ``progress`` config key, documented for every run command, only drove ``train``."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.commands.simulate import admission_bar

ARGS = ["simulate", "--system", "csp", "--stages", "3", "--steps", "20", "--set", "space.blocks=4"]


def _metrics(run) -> dict:
    metrics = json.loads((run / "metrics.json").read_text())
    metrics.pop("config")  # names the progress setting itself
    return metrics


def test_the_engine_reports_every_admission_in_order(monkeypatch, tmp_path):
    import naspipe.commands.simulate as command

    seen: list[int] = []

    class Recording:
        def __init__(self, mode: str, subnets: int) -> None:
            assert (mode, subnets) == ("on", 20)

        def __enter__(self):
            return seen.append

        def __exit__(self, *exc) -> None:
            return None

    monkeypatch.setattr(command, "admission_bar", Recording)
    assert main([*ARGS, "--set", "progress=on", "--out", str(tmp_path / "run")]) == 0
    assert seen == list(range(1, 21))


@pytest.mark.parametrize("cache", ["false", "true"])
def test_the_bar_changes_no_output(capsys, tmp_path, cache):
    runs = {}
    for mode in ("on", "off"):
        run = tmp_path / mode
        assert main([*ARGS, "--set", f"cache.enabled={cache}", "--set", f"progress={mode}", "--out", str(run)]) == 0
        runs[mode] = _metrics(run), (run / "trace.json").read_bytes(), capsys.readouterr()
    (on, on_trace, on_io), (off, off_trace, off_io) = runs["on"], runs["off"]
    assert on == off and on_trace == off_trace
    assert "admitted" in on_io.err and "subnet" in on_io.err  # tqdm's bar, on stderr
    assert "admitted" not in off_io.err
    assert json.loads(on_io.out) == json.loads(off_io.out)  # stdout keeps its one JSON line


def test_auto_shows_no_bar_when_stderr_is_not_a_terminal(capsys, tmp_path):
    assert main([*ARGS, "--out", str(tmp_path / "run")]) == 0  # progress: auto (the default); pytest's stderr
    assert "admitted" not in capsys.readouterr().err


def test_the_bar_goes_when_the_run_fails(capsys):
    with pytest.raises(RuntimeError, match="engine failed"), admission_bar("on", 5) as on_admit:
        assert on_admit is not None
        on_admit(1)
        raise RuntimeError("engine failed")
    assert "admitted" in capsys.readouterr().err
