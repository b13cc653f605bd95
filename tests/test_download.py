"""``naspipe fetch`` and the workflow's fetch rule, with ``file://`` URLs only (no test needs the internet).

The shared Multi30k sample (``../shared/data``) stands in for a public download; the archive
tests build their archives in a temporary directory.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from naspipe.data.download import STAMP, Source, fetch, parse_source, source_problem
from naspipe.errors import UsageError
from tests.conftest import ROOT, SHARED_DATA, run_cli

MULTI30K = SHARED_DATA / "multi30k"
needs_shared = pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/data/multi30k is absent")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(parent: Path) -> list[str]:
    """Everything in ``parent``: a failed fetch must leave nothing (no staging dir, no partial file)."""
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


@needs_shared
def test_good_checksum_fetches_the_file_and_stamps_it(tmp_path: Path) -> None:
    original = MULTI30K / "val.en.gz"
    out = tmp_path / "data" / "multi30k"
    done = run_cli("fetch", "--out", str(out), "--url", original.as_uri(), "--sha256", digest(original))
    assert done.returncode == 0, done.stderr
    assert (out / "val.en.gz").read_bytes() == original.read_bytes()
    stamp = json.loads((out / STAMP).read_text())
    assert stamp["files"] == ["val.en.gz"] and stamp["sources"][0]["sha256"] == digest(original)
    again = run_cli("fetch", "--out", str(out), "--url", original.as_uri(), "--sha256", digest(original))
    assert again.returncode == 0 and "already fetched" in again.stdout


@needs_shared
def test_bad_checksum_names_both_digests_and_writes_nothing(tmp_path: Path) -> None:
    original = MULTI30K / "val.de.gz"
    wrong = "0" * 64
    done = run_cli("fetch", "--out", str(tmp_path / "data" / "m"), "--url", original.as_uri(), "--sha256", wrong)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert original.as_uri() in lines[0] and f"expected {wrong}" in lines[0] and f"got {digest(original)}" in lines[0]
    assert leftovers(tmp_path / "data") == []


@needs_shared
def test_missing_file_names_the_url(tmp_path: Path) -> None:
    url = (MULTI30K / "no-such-file.en.gz").as_uri()
    done = run_cli("fetch", "--out", str(tmp_path / "data" / "m"), "--url", url, "--sha256", "a" * 64)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"naspipe: error: {url}: cannot download (no such file)"]
    assert leftovers(tmp_path / "data") == []


@needs_shared
def test_a_failing_source_keeps_the_earlier_ones_out_too(tmp_path: Path) -> None:
    """All or nothing: the first source verified, the second missing: the destination stays empty."""
    good = MULTI30K / "val.en.gz"
    sources = [Source(good.as_uri(), digest(good), "val.en.gz"), Source((MULTI30K / "gone.gz").as_uri(), "b" * 64)]
    out = tmp_path / "data" / "m"
    with pytest.raises(UsageError, match="gone.gz: cannot download"):
        fetch(sources, out)
    assert leftovers(tmp_path / "data") == []


def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_member_and_strip_are_unpacked(tmp_path: Path) -> None:
    archive = _tar_gz(tmp_path / "corpus.tgz", {
        "corpus/train/a.en": b"hello\n", "corpus/train/a.de": b"hallo\n", "corpus/README": b"not kept\n",
    })
    block = {"url": archive.as_uri(), "sha256": digest(archive), "archive": {"member": "corpus/train", "strip": 1}}
    out = tmp_path / "out"
    assert fetch([parse_source(block, "source")], out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        STAMP, "train/a.de", "train/a.en",
    ]
    assert (out / "train" / "a.de").read_bytes() == b"hallo\n"
    assert not (tmp_path / "corpus.tgz").with_name("out.fetch").exists()


def test_one_archive_split_into_two_directories_is_downloaded_once(tmp_path: Path) -> None:
    """The fast.ai CIFAR-10 layout (cifar10/train, cifar10/test) becomes train/ and val/ (what prepare reads)."""
    archive = _tar_gz(tmp_path / "cifar10.tgz", {"cifar10/train/cat/1.png": b"t", "cifar10/test/cat/2.png": b"v"})
    url, sha = archive.as_uri(), digest(archive)
    blocks = [{"url": url, "sha256": sha, "archive": {"member": "cifar10/train", "strip": 1}},
              {"url": url, "sha256": sha, "archive": {"member": "cifar10/test", "strip": 2, "into": "val"}}]
    out = tmp_path / "out"
    fetch([parse_source(b, "s") for b in blocks], out)
    assert (out / "train" / "cat" / "1.png").read_bytes() == b"t"
    assert (out / "val" / "cat" / "2.png").read_bytes() == b"v"
    assert json.loads((out / STAMP).read_text())["files"] == ["train/cat/1.png", "val/cat/2.png"]


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/evil.txt", "ok/../../evil.txt"])
def test_tar_entry_escaping_the_destination_is_refused(tmp_path: Path, name: str) -> None:
    archive = _tar_gz(tmp_path / "bad.tar.gz", {"fine.txt": b"x", name: b"pwned"})
    out = tmp_path / "sub" / "out"
    done = run_cli("fetch", "--out", str(out), "--url", archive.as_uri(), "--sha256", digest(archive))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"naspipe: error: {archive.as_uri()}: archive entry {name!r} escapes the destination (not unpacked)"
    ]
    assert leftovers(tmp_path / "sub") == [] and not (tmp_path / "evil.txt").exists()


def test_zip_entry_escaping_and_tar_link_are_refused(tmp_path: Path) -> None:
    zipped = tmp_path / "bad.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("../evil.txt", b"pwned")
    with pytest.raises(UsageError, match="escapes the destination"):
        fetch([parse_source({"url": zipped.as_uri(), "sha256": digest(zipped)}, "s")], tmp_path / "z")
    linked = tmp_path / "link.tgz"
    with tarfile.open(linked, "w:gz") as tar:
        info = tarfile.TarInfo("data")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(info)
    with pytest.raises(UsageError, match="'data' is a link or special file"):
        fetch([parse_source({"url": linked.as_uri(), "sha256": digest(linked)}, "s")], tmp_path / "l")
    assert leftovers(tmp_path) == ["bad.zip", "link.tgz"]


@pytest.mark.parametrize(("block", "message"), [
    ({"url": "ftp://host/x.gz", "sha256": "a" * 64}, "s.url: 'ftp://host/x.gz': scheme 'ftp' not supported"),
    ({"url": "file:///x.gz", "sha256": "abc"}, "s.sha256: expected 64 hexadecimal digits, got 'abc'"),
    ({"url": "file:///x.gz", "sha256": "a" * 64, "archive": {"strip": 1}}, "s.archive: 'file:///x.gz' does not end"),
    ({"url": "file:///x.tgz", "sha256": "a" * 64, "archive": {"member": "../up"}}, "s.archive.member: expected a"),
    ({"url": "file:///x.gz", "sha256": "a" * 64, "mirror": 1}, "s.mirror: unknown key"),
])
def test_bad_source_blocks_are_one_line_naming_the_key(block: dict, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_source(block, "s")
    assert str(caught.value).startswith(message)


def test_dataset_paths_must_lie_where_the_source_is_fetched() -> None:
    dataset = {"kind": "wmt", "src": "data/m30k/train.en.gz", "tgt": "elsewhere/train.de.gz",
               "source": {"url": "file:///x/train.en.gz", "sha256": "a" * 64}}
    assert source_problem("m30k", dataset, ["src", "tgt"]) == (
        "datasets.m30k.tgt", "'elsewhere/train.de.gz' is not under data/m30k/, where the source is fetched"
    )


def _snakemake_dry_run(config: Path, workdir: Path) -> tuple[int, str, str]:
    pytest.importorskip("snakemake")
    from tests.test_workflow import snakemake

    done = snakemake("-n", "--configfile", str(config), "--directory", str(workdir))
    return done.returncode, done.stdout, done.stderr


@needs_shared
def test_dry_run_plans_the_fetch_before_prepare(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    original = MULTI30K / "val.en.gz"
    config["datasets"] = {"m30k": {
        "kind": "wmt", "vocab_size": 48, "src": "data/m30k/val.en.gz", "tgt": "data/m30k/val.en.gz",
        "source": [{"url": original.as_uri(), "sha256": digest(original)}],
    }}
    config["spaces"] = {"nlp.tiny": {"dataset": "m30k"}}
    config.pop("simulate")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = _snakemake_dry_run(path, tmp_path)
    assert code == 0, err
    fetch_job = re.search(r"rule fetch:\n(?:\s+.*\n)*?\s+output: (\S+)", out)
    assert fetch_job is not None and fetch_job.group(1) == f"data/m30k/{STAMP}"
    prepare_job = re.search(r"rule prepare:\n\s+input: (\S+)", out)
    assert prepare_job is not None and prepare_job.group(1) == f"data/m30k/{STAMP}"
    assert original.as_uri() in out  # the shell command carries the source


def test_missing_imagenet_says_where_to_put_it(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    config["datasets"]["imagenet"] = {"kind": "imagenet", "root": "data/imagenet"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = _snakemake_dry_run(path, tmp_path)
    assert code == 2
    line = [x for x in err.splitlines() if "config error" in x]
    assert len(line) == 1 and "datasets.imagenet.root: path 'data/imagenet' does not exist" in line[0]
    assert "ImageNet cannot be downloaded" in line[0] and "config/README.md" in line[0]


def test_dry_run_refuses_a_source_dataset_path_outside_its_fetch(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    config["datasets"] = {"m30k": {
        "kind": "wmt", "vocab_size": 48, "src": "data/m30k/train.en.gz", "tgt": "elsewhere/train.de.gz",
        "source": {"url": "file:///nowhere/train.en.gz", "sha256": "a" * 64},
    }}
    config["spaces"] = {"nlp.tiny": {"dataset": "m30k"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = _snakemake_dry_run(path, tmp_path)
    assert code == 2
    assert [x for x in err.splitlines() if "config error" in x] == [
        "naspipe workflow: config error: datasets.m30k.tgt: 'elsewhere/train.de.gz' is not under data/m30k/, "
        "where the source is fetched"
    ]
