"""The preset registry: ``make_space("toy", {"blocks": 8})`` builds a space by name.

Each entry maps a preset name to a space class and the options that preset fixes; user
options (``--set space.KEY=VALUE``) override the preset's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from naspipe.errors import UsageError
from naspipe.space.base import SearchSpace
from naspipe.space.structure import SHARED_POLICIES
from naspipe.space.toy import ToySpace

SpaceFactory = Callable[[str, Mapping[str, Any], str], SearchSpace]

# name -> (class, preset options)
PRESETS: dict[str, tuple[type[SearchSpace], dict[str, Any]]] = {
    "toy": (ToySpace, {}),
}


def register_preset(name: str, cls: type[SearchSpace], options: Mapping[str, Any]) -> None:
    PRESETS[name] = (cls, dict(options))


def space_names() -> tuple[str, ...]:
    _load_extra_spaces()
    return tuple(sorted(PRESETS))


def make_space(name: str, options: Mapping[str, Any] | None = None, shared_policy: str = "frozen") -> SearchSpace:
    _load_extra_spaces()
    if name not in PRESETS:
        raise UsageError(f"unknown space {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    if shared_policy not in SHARED_POLICIES:
        raise UsageError(f"unknown shared_policy {shared_policy!r}; choose one of {', '.join(SHARED_POLICIES)}")
    cls, preset = PRESETS[name]
    return cls(name, {**preset, **(options or {})}, shared_policy)  # type: ignore[arg-type]


def _load_extra_spaces() -> None:
    """Import the optional space modules, which register their presets on import."""
    import importlib

    for module in ("naspipe.space.nlp", "naspipe.space.cv"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


__all__ = ["PRESETS", "make_space", "register_preset", "space_names"]
