"""Atomic file output: a reader sees the old file or the whole new one, never half of one."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from naspipe.errors import UsageError


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: the classic set-and-restore
    os.umask(mask)
    return mask


def temp_dir_beside(out: Path, suffix: str) -> Path:
    """A new hidden directory next to ``out`` with the permissions ``mkdir`` would give (the umask's).

    ``tempfile.mkdtemp`` creates 0700, which a rename then published as the output: collaborators
    on a cluster could not read results. Only the name is random here, not the mode.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=suffix, dir=out.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


ASIDE = ".old"  # the suffix of the hidden directory that holds the replaced ``out`` while replace_path runs


def aside_copies(out: Path) -> list[Path]:
    """The hidden ``.OUT.XXXXXXXX.old`` directories :func:`replace_path` made for ``out`` (left behind only
    when it was killed before deleting one); exactly its names, never those of another output's."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.[a-z0-9_]{{8}}{re.escape(ASIDE)}")
    if not out.parent.is_dir():
        return []
    return sorted(p for p in out.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


def replace_path(new: Path, out: Path) -> None:
    """Put ``new`` (a file or directory beside ``out``) in place of ``out``, whole.

    ``out`` is first renamed aside, then ``new`` renamed in, then the old copy deleted: at every
    moment ``out`` is the old result or the new one (between the two renames, missing only),
    and a crash never leaves it deleted with the new one not there (deleting first did).
    """
    if not os.path.lexists(out):
        os.rename(new, out)
        return
    old = temp_dir_beside(out, ASIDE)
    aside = old / "previous"
    os.rename(out, aside)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(aside, out)  # put the old result back: the caller's error, nothing lost
        raise
    finally:
        if os.path.lexists(out):
            shutil.rmtree(old, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[IO[Any]], object], binary: bool = False) -> None:
    """Write through ``write(fileobj)`` into a temp file beside ``path``, fsync, then rename.

    The file gets the mode a plain ``open`` would give (0666 less the umask), not ``mkstemp``'s 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        f: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    def write(f: IO[Any]) -> None:
        f.write(data)

    atomic_write(Path(path), write, binary=True)


def atomic_write_text(path: Path | str, text: str) -> None:
    """UTF-8 text with the line endings given (no platform translation).

    A lone surrogate is written backslash-escaped (``\\udcff``): it is how Python reads a byte that is not UTF-8
    in a path from the command line, and outputs name such paths (a profile's in a partition's JSON, the record's
    in the published verdict); strict UTF-8 raised a traceback after the work was done. In JSON the escape reads
    back as the same string; every other character is UTF-8 as before."""
    atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


def atomic_write_json(path: Path | str, data: Any) -> None:
    """Sorted, indented JSON, so equal data gives equal bytes."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_json_object(path: Path, label: str) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is a one-line :class:`UsageError` starting with ``label``.

    One reader for every small JSON input (partition files, reproducibility verdicts, a run's
    metrics), so each reports an unreadable file, bad JSON and a non-object the same way.
    """
    from naspipe.errors import UsageError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{label}: {exc.strerror or exc}") from None
    except RecursionError:
        raise UsageError(f"{label}: not valid JSON (nested too deeply)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = f"{exc.msg}, line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise UsageError(f"{label}: not valid JSON ({detail})") from None
    except ValueError as exc:  # an integer past Python's digit limit (int_max_str_digits)
        raise UsageError(f"{label}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{label}: expected a JSON object")
    return data


def check_creatable(path: Path, flag: str) -> None:
    """UsageError naming ``flag`` and ``path`` unless ``path`` can be created (or replaced) there: its
    nearest existing ancestor (the directories below it are created) is a directory this process can
    write in. Checked before any work, so a bad ``--out`` fails at once and not after the run."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is not a directory")
    try:  # a nameless probe file (O_TMPFILE on Linux): nothing is left behind
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {parent} ({exc.strerror or exc})") from None


def check_out_file(path: Path, flag: str = "--out") -> None:
    """UsageError unless ``path`` can become a file: it names one (``''`` and ``.`` do not), is not a
    directory, and its directory is writable. A rename onto ``.`` or a directory failed with a traceback."""
    if not path.name or path.is_dir():
        raise UsageError(f"{flag} {str(path)!r}: is a directory (a file path is expected)")
    check_creatable(path, flag)


def no_space(where: object) -> str:
    """The one line for a full disk (ENOSPC), naming the file or directory being written.

    Outputs are written atomically, so a run stopped by it keeps its last complete checkpoint.
    """
    place = f" writing {where}" if where else ""
    return f"no space left on device{place}; free some space and run the command again (an interrupted run " \
        "resumes with --resume DIR.partial)"
