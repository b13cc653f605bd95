"""The one YAML reader of the package: safe, UTF-8, and a key given twice is an error.

PyYAML keeps the last of two equal keys without a word, so ``seed: 1`` followed later by
``seed: 2`` in a config (or ``flops`` twice in a hardware spec) silently runs something the
user did not read. Every YAML the package reads (config files, ``--set`` values, hardware
specs) goes through here, and every problem is one :class:`UsageError` naming the file (or
label), line and problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from naspipe.errors import UsageError


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping holding the same key twice, at any depth."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_unique(text: str) -> Any:
    """``yaml.safe_load`` that raises ``yaml.YAMLError`` on a duplicate key, and on nesting deeper than the
    interpreter's recursion limit (PyYAML's recursive parser died with a RecursionError traceback)."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def parse_yaml(text: str, label: str) -> Any:
    """YAML ``text`` as Python data; UsageError ``LABEL line N: not valid YAML (problem)``."""
    try:
        return load_unique(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise UsageError(f"{label}{where}: not valid YAML ({problem})") from None


def read_yaml(path: Path, label: str) -> Any:
    """The YAML file at ``path``; unreadable, not UTF-8 or invalid is one UsageError starting with ``label``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{label}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})") from None
    return parse_yaml(text, label)
