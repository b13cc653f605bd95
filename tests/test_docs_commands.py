"""Commands live in one place, the docs name only commands that exist, and docs/cli.md documents
every command as its parser does.

Why: commands were renamed, moved and added faster than the prose followed (the README once
called ``commands/`` "train, compare" while a dozen commands lived elsewhere). Here
:data:`naspipe.cli.COMMANDS` is the truth: a ``naspipe NAME`` in README.md or docs/*.md that
is not in it fails, a command missing from docs/cli.md's table fails, and docs/cli.md's
generated reference must equal what the parsers print for ``naspipe NAME --help`` today.

Regenerate that reference after changing a command's flags or help::

    python tests/test_docs_commands.py          # rewrites the generated part of docs/cli.md
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = ROOT / "docs" / "cli.md"
BEGIN = "<!-- BEGIN GENERATED: python tests/test_docs_commands.py rewrites from here to END -->"
END = "<!-- END GENERATED -->"
WIDTH = "100"  # argparse wraps help to the terminal width ($COLUMNS): fixed, so the text is stable

# ``naspipe NAME`` as a command: NAME ends at a space, quote, bracket, comma or the end of the
# code, never at ":" (``naspipe workflow: config error`` is a message) or "/".
MENTION = re.compile(r"(?<![\w.-])naspipe ([a-z][a-z0-9-]*)(?=[\s`'\"),;]|$)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE = re.compile(r"`[^`\n]+`")


def _sub_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """``(naspipe NAME [SUB], help text)`` for a command and, depth first, its own sub-commands."""
    yield f"naspipe {name}", parser.format_help()
    for sub_name, sub in _sub_parsers(parser).items():
        yield from _helps(f"{name} {sub_name}", sub)


def render_reference() -> str:
    """The generated part of docs/cli.md: every command's ``--help``, in :data:`COMMANDS` order."""
    from naspipe.cli import COMMANDS, build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        blocks = []
        for name in COMMANDS:
            for title, text in _helps(name, _sub_parsers(build_parser(name))[name]):
                blocks.append(f"### `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(blocks)


def _generated_part(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def _code(text: str) -> str:
    """The code in a markdown text: fenced blocks, then the inline spans of what is left."""
    fenced = FENCE.findall(text)
    rest = FENCE.sub("", text)
    return "\n".join([*fenced, *INLINE.findall(rest)])


def mentioned_commands(text: str) -> set[str]:
    return set(MENTION.findall(_code(text)))


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_command_named_in_the_docs_exists() -> None:
    from naspipe.cli import COMMANDS

    unknown = {f"{doc.relative_to(ROOT)}: naspipe {name}" for doc in _documents()
               for name in mentioned_commands(doc.read_text(encoding="utf-8")) if name not in COMMANDS}
    assert not unknown, f"commands named in the docs but not in naspipe.cli.COMMANDS: {sorted(unknown)}"


def test_the_check_sees_commands_in_code_only() -> None:
    """The check above can fail, and ignores prose and messages that merely start with 'naspipe'."""
    text = ("Run `naspipe train --out r` then `naspipe nosuch x`.\n\n```bash\n.venv/bin/naspipe compare a b\n"
            "naspipe workflow: config error\n```\nplain / naspipe for CPU time, naspipe subnets/s\n")
    assert mentioned_commands(text) == {"train", "nosuch", "compare"}


def test_every_command_has_a_row_in_the_cli_table() -> None:
    from naspipe.cli import COMMANDS

    rows = set(re.findall(r"^\| `naspipe ([a-z-]+)` \|", CLI_DOC.read_text(encoding="utf-8"), re.M))
    assert rows == set(COMMANDS), f"docs/cli.md table: missing {set(COMMANDS) - rows}, extra {rows - set(COMMANDS)}"


def test_every_command_lives_in_naspipe_commands() -> None:
    """One home, one convention: ``naspipe NAME`` is ``naspipe/commands/NAME.py`` (``-`` as ``_``) with
    ``add_parser`` and ``run``, and every module there is a registered command."""
    import importlib

    from naspipe.cli import COMMANDS

    for name, entry in COMMANDS.items():
        assert entry.module == f"naspipe.commands.{name.replace('-', '_')}", (name, entry.module)
        module = importlib.import_module(entry.module)
        assert callable(module.add_parser) and callable(module.run), entry.module
    files = {p.stem for p in (ROOT / "naspipe" / "commands").glob("*.py") if p.stem != "__init__"}
    assert files == {name.replace("-", "_") for name in COMMANDS}


def test_cli_reference_matches_the_parsers() -> None:
    documented = _generated_part(CLI_DOC.read_text(encoding="utf-8"))
    assert documented == render_reference().strip("\n"), (
        "docs/cli.md is stale: run `python tests/test_docs_commands.py` and commit the result")


def write_reference(path: Path = CLI_DOC) -> None:
    """Replace the generated part of ``path`` (between the markers) with :func:`render_reference`."""
    from naspipe.fsutil import atomic_write_text

    text = path.read_text(encoding="utf-8")
    head, tail = text[: text.index(BEGIN) + len(BEGIN)], text[text.index(END):]
    atomic_write_text(path, f"{head}\n\n{render_reference().strip()}\n\n{tail}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    write_reference()
    print(f"wrote {CLI_DOC.relative_to(ROOT)}")
