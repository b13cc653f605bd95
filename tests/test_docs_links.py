"""Every relative link in README.md and docs/*.md reaches a file that exists, and a ``#section`` in it
reaches a heading of that file.

Why: docs are merged, split and deleted (three performance journals became docs/performance.md), and a
link to a removed file or a renamed section fails silently on a reader. Anchors are GitHub's: the
heading lowercased, punctuation other than ``-`` and ``_`` dropped, spaces as ``-``, a repeated heading
numbered ``-1``, ``-2``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def anchors(text: str) -> set[str]:
    """The ``#fragment`` of each heading of a markdown text, as GitHub renders it."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """``doc: target`` (``doc`` relative to ``root``) for each relative link of ``doc`` whose file or section
    does not exist."""
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        file = (doc.parent / path) if path else doc
        if not file.exists():
            broken.append(f"{doc.relative_to(root)}: {target} (no such file)")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{doc.relative_to(root)}: {target} (no such section)")
    return broken


def test_every_relative_link_in_the_docs_resolves() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [line for doc in docs for line in broken_links(doc)]
    assert not broken, f"links to files or sections that do not exist: {broken}"


def test_the_check_catches_a_missing_file_and_a_missing_section(tmp_path: Path) -> None:
    """The check above can fail: a removed file, a renamed section; links in code and URLs are left alone."""
    (tmp_path / "a.md").write_text("# Title\n\n## The `x` cache (today)\n\n## Same\n\n## Same\n", encoding="utf-8")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#the-x-cache-today) [ok](a.md#same-1) [ok](#here) [url](https://e.org/x.md)\n"
                   "[gone](gone.md) [renamed](a.md#the-cache)\n\n# Here\n\n```\n[code](nowhere.md)\n```\n",
                   encoding="utf-8")
    assert broken_links(doc, tmp_path) == ["b.md: gone.md (no such file)", "b.md: a.md#the-cache (no such section)"]
