"""What an interrupted run leaves behind must never stand in the way of the next command (issue 34).

- A publish killed after the old ``DIR`` was renamed aside left ``.DIR.XXXXXXXX.old`` for good: the
  next run into ``DIR`` deletes it (item 9).
- After a killed ``--overwrite`` or extending run, the documented ``--resume DIR.partial --out DIR``
  was refused until ``--overwrite`` was added: it continues the run and replaces ``DIR`` (item 10).
- A ``DIR.partial`` with no complete checkpoint (killed before its first one) refused the plain
  rerun, and ``--resume`` on it found nothing: it no longer blocks anything (items 5 and 6).
- Ctrl-C while the command's module was still being imported gave a KeyboardInterrupt traceback:
  the parser is built inside the handler now (item 7).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe import cli
from naspipe.cli import main
from naspipe.runtime.faults import FAIL_ENV
from tests.conftest import ROOT
from tests.test_runtime_checkpoint import TOY, assert_same_outputs, train


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight steps straight through."""
    out = tmp_path_factory.mktemp("ref") / "run"
    assert train(out, steps=8) == 0
    return out


def killed_at_subnet(monkeypatch: pytest.MonkeyPatch, out: Path, *extra: str, subnet: int = 5) -> None:
    """Train 8 steps into ``out`` (checkpoints every 2); the forward of ``subnet`` fails, as a kill would stop it."""
    monkeypatch.setenv(FAIL_ENV, f"0:{subnet}")
    with pytest.raises(RuntimeError, match="injected failure"):
        train(out, "--checkpoint-every", "2", *extra, steps=8)
    monkeypatch.delenv(FAIL_ENV)


@pytest.mark.parametrize("first", ["overwrite", "extend"])
def test_resuming_dir_partial_after_a_killed_overwrite_or_extension_needs_no_overwrite(reference, tmp_path,
                                                                                       monkeypatch, first):
    """Item 10: ``--resume DIR.partial --out DIR`` continues the killed run and replaces the old DIR, bitwise."""
    out = tmp_path / "run"
    assert train(out, "--checkpoint-every", "2", steps=4) == 0  # the finished run the second one replaces
    extra = ("--overwrite",) if first == "overwrite" else ("--resume", str(out))
    killed_at_subnet(monkeypatch, out, *extra, subnet=7)  # after the checkpoint at step 6
    assert (out / "metrics.json").is_file() and (tmp_path / "run.partial").is_dir()
    assert train(out, "--resume", str(tmp_path / "run.partial"), "--checkpoint-every", "2", steps=8) == 0
    assert_same_outputs(reference, out)
    assert not (tmp_path / "run.partial").exists()


def test_a_dir_partial_without_a_checkpoint_does_not_block_the_rerun(reference, tmp_path, capsys):
    """Items 5 and 6: what a run killed before its first checkpoint leaves (logs, an incomplete step folder)."""
    out, work = tmp_path / "run", tmp_path / "run.partial"
    (work / "logs" / "access").mkdir(parents=True)
    (work / "logs" / "losses.log").write_text("0,0x1.0p+0\n")
    (work / "checkpoints" / "step-00000002").mkdir(parents=True)
    (work / "checkpoints" / "step-00000002" / "layer-0.pt").write_bytes(b"half a shard")
    assert train(out, steps=8) == 0
    assert_same_outputs(reference, out)
    assert not work.exists()


def test_a_dir_partial_with_a_checkpoint_still_blocks_the_plain_rerun(tmp_path, monkeypatch, capsys):
    """The other side of the rule: a resumable DIR.partial is refused, naming the way on."""
    out = tmp_path / "run"
    killed_at_subnet(monkeypatch, out)
    capsys.readouterr()
    assert train(out, steps=8) == 2
    err = capsys.readouterr().err
    assert f"holds an interrupted run; continue it with --resume {out}.partial" in err


def test_a_publish_killed_after_renaming_the_old_run_aside_is_cleaned_up_by_the_next_run(tmp_path):
    """Item 9: SIGKILL in a real ``--overwrite`` publish, between its second rename and the deletion of the old
    run; the next run into DIR deletes the hidden ``.DIR.XXXXXXXX.old``, and only that one."""
    out = tmp_path / "run"
    assert train(out, steps=2) == 0
    kill_in_delete = (
        "import os, shutil, signal, sys\n"
        "from naspipe import fsutil\n"
        "real = shutil.rmtree\n"
        "def rmtree(path, *a, **k):\n"
        "    if str(path).endswith('.old'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(path, *a, **k)\n"
        "fsutil.shutil = type(sys)('shutil_with_a_kill')\n"
        "fsutil.shutil.rmtree = rmtree\n"
        "from naspipe.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    args = ["train", "--system", "csp", "--stages", "1", "--steps", "4", "--seed", "0", *TOY]
    killed = subprocess.run([sys.executable, "-c", kill_in_delete, *args, "--overwrite", "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]
    assert len(left) == 1 and (left[0] / "previous" / "metrics.json").is_file()  # the old run, aside
    decoy = tmp_path / ".run2.abcd1234.old"  # another output's: not ours to delete
    decoy.mkdir()
    assert train(out, "--overwrite", steps=4) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [decoy.name]


def test_ctrl_c_while_the_command_is_imported_is_one_line(monkeypatch, capsys):
    """Item 7: a KeyboardInterrupt while the parser is built (it imports the command's module)."""

    def interrupted(command: str | None = None) -> None:
        raise KeyboardInterrupt

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(cli, "build_parser", interrupted)
    try:
        status = main(["compare", "a", "b"])
    except KeyboardInterrupt:  # escaping it would also stop pytest itself
        pytest.fail("KeyboardInterrupt escaped naspipe.cli.main")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert status == 130
    assert capsys.readouterr().err == "naspipe: error: interrupted by SIGINT\n"


def test_a_real_sigint_while_the_command_is_imported_is_one_line(tmp_path):
    """Item 7 as a process: SIGINT arrives while the command's module is imported (a real signal, sent by the
    process to itself at that point, where a Ctrl-C in the first half second lands)."""
    code = ("import os, signal, sys\n"
            # Python's own SIGINT handler, as in a terminal: a process started in the background of a script
            # (nohup, &) inherits SIGINT ignored, and the signal below would then never arrive
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import naspipe.cli as cli\n"
            "real = cli.build_parser\n"
            "def build(command=None):\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(command)\n"
            "cli.build_parser = build\n"
            "sys.exit(cli.main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, "compare", str(tmp_path), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ})
    assert done.returncode == 130, done.stderr
    assert done.stderr == "naspipe: error: interrupted by SIGINT\n"


def test_python_dash_m_naspipe_still_runs(tmp_path):
    """``naspipe/__main__.py`` now guards its import; the command itself is unchanged."""
    done = subprocess.run([sys.executable, "-m", "naspipe", "compare", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("naspipe: error: compare needs at least two"), done.stderr


def test_the_aside_pattern_names_only_this_outputs_copies(tmp_path):
    from naspipe.fsutil import aside_copies

    for name in (".run.abcd1234.old", ".run.x.abcd1234.old", ".run2.abcd1234.old", ".run.abcd12345.old", "run.old"):
        (tmp_path / name).mkdir()
    shutil.copytree(tmp_path / ".run.abcd1234.old", tmp_path / ".run.zz_91234.old")
    assert [p.name for p in aside_copies(tmp_path / "run")] == [".run.abcd1234.old", ".run.zz_91234.old"]


def test_a_write_that_races_the_removal_of_dir_partial_stops_as_run_dir_gone(tmp_path: Path) -> None:
    """Between a stage's check that DIR.partial is there and its write by path, the directory can go: the
    write's FileNotFoundError is the same event (seen once as a stage traceback under a loaded machine)."""
    from naspipe.runplan.rundir import RunDirGone, stops_if_removed

    work = tmp_path / "run.partial"
    work.mkdir()
    with pytest.raises(RunDirGone, match="was removed or renamed while the run trained"), stops_if_removed(work):
        work.rename(tmp_path / "moved")
        (work / "logs" / "access-0.log").open("a")
    work.mkdir()
    with pytest.raises(FileNotFoundError), stops_if_removed(work):  # the directory is there: a plain error
        (work / "missing" / "file").open("a")
