"""Fetch a dataset named by URL and SHA-256: download, verify, unpack safely, publish atomically.

Why it exists: a workflow that only reads paths a user filled in by hand cannot be rerun from a
fresh clone. A dataset's ``source`` block (one or a list of ``{url, sha256, name, archive}``)
names where its files come from and what their bytes must hash to; ``naspipe fetch`` (and the
workflow rule ``workflow/rules/download.smk`` that calls it) brings them into a directory when
they are absent. The checksum is what makes the download part of the experiment: a mirror that
serves other bytes stops the run with one line naming both digests instead of silently changing
the data.

Guarantees: everything is streamed into a hidden staging directory beside the destination,
verified, unpacked there (``.tar.gz``/``.tgz``/``.tar``/``.zip``; a member that is absolute,
climbs out with ``..``, or is a link or device refuses the whole archive before anything is
unpacked), and only then moved into place; a stamp file listing the sources is written last.
Any failure removes the staging directory: nothing is left behind. No torch, no network
library beyond :mod:`urllib` (``http://``, ``https://`` and ``file://`` URLs).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from naspipe.data.errors import DataError
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_json, temp_dir_beside

STAMP = ".naspipe-fetched.json"  # written last in the destination: its presence means "fetched"
SCHEMES = ("http", "https", "file")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
CHUNK = 1 << 20
TIMEOUT_S = 60.0
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Source:
    """One downloadable file of a dataset.

    ``name``: the file name a plain (non-archive) download is saved as (default: the URL's last
    path component). ``unpack``: whether an archive is unpacked (default: when the URL ends in an
    archive suffix). ``member``: keep only this file or directory of the archive; ``strip``:
    leading path components removed from what is kept (``tar --strip-components``); ``into``: a
    directory of the destination the kept files go to (``test/`` of an archive can become ``val/``).
    """

    url: str
    sha256: str
    name: str = ""
    unpack: bool = False
    member: str = ""
    strip: int = 0
    into: str = ""

    @property
    def file_name(self) -> str:
        return self.name or PurePosixPath(urllib.parse.urlparse(self.url).path).name


def parse_source(data: Any, where: str) -> Source:
    """A :class:`Source` from a config block; :class:`UsageError` naming ``where.KEY`` otherwise.

    The block: ``url`` and ``sha256`` (required), ``name``, and ``archive``: ``false`` (keep the
    file packed), ``true`` or a mapping ``{member: PATH, strip: N}`` (unpack).
    """
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping with url and sha256, got {data!r}")
    unknown = sorted(set(data) - {"url", "sha256", "name", "archive"})
    if unknown:
        raise UsageError(f"{where}.{unknown[0]}: unknown key (allowed: url, sha256, name, archive)")
    url = _url(data.get("url"), f"{where}.url")
    digest = _sha256(data.get("sha256"), f"{where}.sha256")
    name = _name(data.get("name", ""), f"{where}.name")
    unpack, member, strip, into = _archive(data.get("archive"), url, f"{where}.archive")
    source = Source(url, digest, name, unpack, member, strip, into)
    if not source.unpack and not source.file_name:
        raise UsageError(f"{where}.name: required: the URL {url!r} ends without a file name")
    return source


def parse_sources(data: Any, where: str) -> list[Source]:
    """A dataset's ``source``: one block or a non-empty list of blocks."""
    blocks = data if isinstance(data, list) else [data]
    if not blocks:
        raise UsageError(f"{where}: empty list (give at least one url and sha256)")
    if isinstance(data, list):
        return [parse_source(block, f"{where}.{i}") for i, block in enumerate(blocks)]
    return [parse_source(data, where)]


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: required: an http://, https:// or file:// URL")
    scheme = urllib.parse.urlparse(value).scheme
    if scheme not in SCHEMES:
        raise UsageError(f"{where}: {value!r}: scheme {scheme or '(none)'!r} not supported (http, https, file)")
    return value


def _sha256(value: Any, where: str) -> str:
    text = str(value).lower() if isinstance(value, str) else ""
    if not _HEX64.fullmatch(text):
        raise UsageError(f"{where}: expected 64 hexadecimal digits, got {value!r}")
    return text


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or "/" in value or value in (".", ".."):
        raise UsageError(f"{where}: expected a plain file name, got {value!r}")
    return value


def _archive(value: Any, url: str, where: str) -> tuple[bool, str, int, str]:
    """(unpack, member, strip, into) of an ``archive`` setting; the default follows the URL's suffix."""
    if value is None:
        return is_archive(url), "", 0, ""
    if isinstance(value, bool):
        if value and not is_archive(url):
            raise UsageError(f"{where}: {url!r} does not end in {', '.join(ARCHIVE_SUFFIXES)}")
        return value, "", 0, ""
    if not isinstance(value, dict) or set(value) - {"member", "strip", "into"}:
        raise UsageError(f"{where}: expected true, false or a mapping of member, strip and into, got {value!r}")
    if not is_archive(url):
        raise UsageError(f"{where}: {url!r} does not end in {', '.join(ARCHIVE_SUFFIXES)}")
    member = value.get("member", "")
    if not isinstance(member, str) or (member and _relative(member) is None):
        raise UsageError(f"{where}.member: expected a relative path inside the archive, got {member!r}")
    strip = value.get("strip", 0)
    if isinstance(strip, bool) or not isinstance(strip, int) or strip < 0:
        raise UsageError(f"{where}.strip: expected an integer >= 0, got {strip!r}")
    into = value.get("into", "")
    if not isinstance(into, str) or (into and not _relative(into)):
        raise UsageError(f"{where}.into: expected a relative directory, got {into!r}")
    return True, member.strip("/"), strip, _relative(into) or ""


def is_archive(url: str) -> bool:
    return urllib.parse.urlparse(url).path.lower().endswith(ARCHIVE_SUFFIXES)


# -- fetching ---------------------------------------------------------------------------


def fetch(sources: Sequence[Source], dest: Path | str) -> bool:
    """Bring ``sources`` into ``dest`` unless its stamp already lists exactly them; True if it fetched.

    A plain file already in ``dest`` with the right digest is kept, not downloaded again.
    """
    dest = Path(dest)
    if is_fetched(sources, dest):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = temp_dir_beside(dest, ".fetch")
    try:
        tree = staging / "tree"
        tree.mkdir()
        files: list[str] = []
        for source in sources:
            files += _fetch_one(source, dest, staging, tree)
        _publish(tree, dest)
        atomic_write_json(dest / STAMP, {"sources": [asdict(s) for s in sources], "files": sorted(files)})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def is_fetched(sources: Sequence[Source], dest: Path) -> bool:
    """Whether ``dest``'s stamp records exactly these sources (the workflow's "present" test)."""
    try:
        stamp = json.loads((dest / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("sources") == [asdict(s) for s in sources]


def _fetch_one(source: Source, dest: Path, staging: Path, tree: Path) -> list[str]:
    """Download one source into ``staging``, verify it, and lay its files out under ``tree``."""
    if not source.unpack and _has_digest(dest / source.file_name, source.sha256):
        return [source.file_name]  # present with the right bytes: nothing to download
    download = staging / "download"
    kept = staging / "download.url"  # an archive named by several blocks (one member each) is read once
    if not (download.exists() and kept.read_text() == f"{source.url} {source.sha256}"):
        got = _download(source.url, download)
        if got != source.sha256:
            raise DataError(f"{source.url}: sha256 mismatch: expected {source.sha256}, got {got}")
        kept.write_text(f"{source.url} {source.sha256}")
    if not source.unpack:
        os.replace(download, tree / source.file_name)
        return [source.file_name]
    return unpack(download, tree, source.url, source.member, source.strip, source.into)


def _download(url: str, target: Path) -> str:
    """Stream ``url`` into ``target``; its SHA-256. One line naming the URL if it cannot be read."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, open(target, "wb") as out:
            while chunk := response.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise DataError(f"{url}: cannot download (HTTP {exc.code} {exc.reason})") from None
    except urllib.error.URLError as exc:
        raise DataError(f"{url}: cannot download ({_reason(exc.reason)})") from None
    except (OSError, ValueError) as exc:  # a dropped connection, a timeout, a file:// directory
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise  # the CLI's one line for a full disk
        raise DataError(f"{url}: cannot download ({_reason(exc)})") from None
    return digest.hexdigest()


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return "no such file" if isinstance(reason, FileNotFoundError) else reason.strerror
    return str(reason) or type(reason).__name__


def _has_digest(path: Path, expected: str) -> bool:
    if not path.is_file():
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == expected


def _publish(tree: Path, dest: Path) -> None:
    """Move the staged tree into ``dest``: a rename when ``dest`` is new, else entry by entry."""
    if not dest.exists():
        os.replace(tree, dest)
        return
    for entry in sorted(tree.rglob("*")):
        target = dest / entry.relative_to(tree)
        if entry.is_dir():
            target.mkdir(exist_ok=True)
        else:
            os.replace(entry, target)


# -- safe unpacking -----------------------------------------------------------------------


def unpack(archive: Path, tree: Path, url: str, member: str = "", strip: int = 0, into: str = "") -> list[str]:
    """Unpack ``archive`` (tar, gzip-compressed or not, or zip) into ``tree``; the files written.

    Every entry is checked before anything is written: an absolute path, a ``..`` component, a
    link or a device refuses the archive with one line naming the URL and the entry.
    """
    target = tree / into
    if zipfile.is_zipfile(archive):
        written = _unpack_zip(archive, target, url, member, strip)
    else:
        try:
            with tarfile.open(archive, "r:*") as tar:
                written = _unpack_tar(tar, target, url, member, strip)
        except tarfile.TarError as exc:
            raise DataError(f"{url}: not a readable tar or zip archive ({exc})") from None
    return [f"{into}/{name}" if into else name for name in written]


def _unpack_tar(tar: tarfile.TarFile, tree: Path, url: str, member: str, strip: int) -> list[str]:
    entries = tar.getmembers()
    for entry in entries:
        if not (entry.isfile() or entry.isdir()):
            raise DataError(f"{url}: archive entry {entry.name!r} is a link or special file (not unpacked)")
    plan = _plan(url, [(e.name, e) for e in entries], member, strip)
    for relative, entry in plan:
        stream = tar.extractfile(entry) if entry.isfile() else None
        _write_entry(tree, relative, stream)
    return [r for r, e in plan if e.isfile()]


def _unpack_zip(archive: Path, tree: Path, url: str, member: str, strip: int) -> list[str]:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            if (info.external_attr >> 16) & 0o170000 == 0o120000:  # a symbolic link stored by Info-ZIP
                raise DataError(f"{url}: archive entry {info.filename!r} is a link or special file (not unpacked)")
        plan = _plan(url, [(i.filename, i) for i in infos], member, strip)
        for relative, info in plan:
            with zf.open(info) if not info.is_dir() else _nothing() as stream:
                _write_entry(tree, relative, stream)
    return [r for r, i in plan if not i.is_dir()]


class _nothing:
    """A context manager yielding None (a directory entry has no stream)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _plan(url: str, entries: list[tuple[str, Any]], member: str, strip: int) -> list[tuple[str, Any]]:
    """(path under the destination, entry) for every entry kept; refuses any escaping path first."""
    plan: list[tuple[str, Any]] = []
    for name, entry in entries:
        relative = _relative(name)
        if relative is None:
            raise DataError(f"{url}: archive entry {name!r} escapes the destination (not unpacked)")
        if not relative:
            continue  # the archive's own root ("./")
        if member and relative != member and not relative.startswith(member + "/"):
            continue
        parts = relative.split("/")[strip:]
        if parts:
            plan.append(("/".join(parts), entry))
    if not any(True for _ in _files(plan)):
        kept = f"member {member!r}" if member else "entries"
        raise DataError(f"{url}: archive has no {kept} left after strip {strip}")
    return plan


def _files(plan: list[tuple[str, Any]]) -> Iterator[str]:
    for relative, entry in plan:
        is_dir = entry.isdir() if isinstance(entry, tarfile.TarInfo) else entry.is_dir()
        if not is_dir:
            yield relative


def _relative(name: str) -> str | None:
    """``name`` as a clean relative POSIX path, or None when it is absolute or climbs out."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", name):
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts or ".." in parts:
        return None if ".." in parts else ""
    return "/".join(parts)


def _write_entry(tree: Path, relative: str, stream: IO[bytes] | None) -> None:
    target = tree / relative
    if stream is None:
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        shutil.copyfileobj(stream, out, CHUNK)


# -- the workflow's view ---------------------------------------------------------------------

IMAGENET_HINT = (
    "ImageNet cannot be downloaded without an image-net.org account: unpack ILSVRC2012's train and val "
    "images there as an ImageFolder tree (train/CLASS/*.JPEG, val/CLASS/*.JPEG); see config/README.md"
)


def destination(dataset: str) -> str:
    """Where the workflow fetches dataset ``dataset`` (relative to its working directory)."""
    return f"data/{dataset}"


def stamp_path(dataset: str) -> str:
    """The fetch rule's output: written last, so its presence means every file is in place."""
    return f"{destination(dataset)}/{STAMP}"


def missing_path_message(dataset: dict[str, Any], field: str) -> str:
    """The workflow's one line for a dataset path that does not exist (ImageNet says where to put it)."""
    message = f"path {dataset[field]!r} does not exist"
    if dataset.get("kind") == "imagenet" and field == "root":
        message += f"; {IMAGENET_HINT}"
    return message


def source_problem(name: str, dataset: dict[str, Any], path_keys: Sequence[str]) -> tuple[str, str] | None:
    """(config key, message) of the first problem of a dataset with a ``source``, else None.

    Checked before any job: the blocks themselves, and that every path of the dataset is ``data/NAME``
    or lies under it, where the fetch puts the files (a path elsewhere would never appear).
    """
    try:
        parse_sources(dataset["source"], f"datasets.{name}.source")
    except UsageError as exc:
        key, _, message = str(exc).partition(": ")
        return key, message
    root = PurePosixPath(destination(name))
    for field in path_keys:
        path = PurePosixPath(str(dataset[field])) if field in dataset else root
        if path != root and root not in path.parents:
            return f"datasets.{name}.{field}", f"{dataset[field]!r} is not under {root}/, where the source is fetched"
    return None


def source_args(dataset: dict[str, Any]) -> list[str]:
    """The ``naspipe fetch --source JSON`` arguments of a dataset's ``source`` (one per block)."""
    blocks = dataset["source"] if isinstance(dataset["source"], list) else [dataset["source"]]
    return [json.dumps(block, sort_keys=True) for block in blocks]


def first_source_problem(datasets: dict[str, Any], path_keys: Sequence[str]) -> tuple[str, str] | None:
    """The first :func:`source_problem` among a config's datasets (those with a ``source``)."""
    for name, dataset in datasets.items():
        problem = source_problem(name, dataset, path_keys) if "source" in dataset else None
        if problem is not None:
            return problem
    return None
