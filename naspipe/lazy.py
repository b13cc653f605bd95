"""Package names resolved on first use (PEP 562), so importing a package loads none of its modules.

``naspipe.space`` and ``naspipe.profile`` export names whose modules need torch, while their pure
submodules (``space.structure``, ``profile.rows``) are what the scheduling core, the simulator and
the training job's profile reader import; resolving each name only when it is used keeps those
imports free of torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the package whose ``globals()`` is ``namespace``: ``name`` is
    imported from the module ``exports[name]`` on first use and kept in ``namespace``, so later
    lookups never reach this function."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__


def lazy_dir(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` that lists the lazy names beside those already loaded (tab completion,
    ``dir()``), without importing any of them."""

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __dir__
