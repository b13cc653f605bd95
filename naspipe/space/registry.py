"""The preset registry: ``make_space("toy", {"blocks": 8})`` builds a space by name.

Each entry maps a preset name to a space's shape class and the options that preset fixes;
user options (``--set space.KEY=VALUE``) override the preset's. The registry and the shapes
are torch-free: :func:`make_shape` gives what planning and the simulator need without torch,
:func:`make_space` the torch space of the same shape (its layers, batches and loss).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from naspipe.errors import UsageError
from naspipe.space.structure import SHARED_POLICIES
from naspipe.space.toy_shape import ToyShape

if TYPE_CHECKING:
    from naspipe.space.base import SearchSpace
    from naspipe.space.shape import SpaceShape

# name -> (shape class, or a torch space class registered directly; preset options)
PRESETS: dict[str, tuple[type[SpaceShape], dict[str, Any]]] = {
    "toy": (ToyShape, {}),
}
_SHAPE_MODULES = ("naspipe.space.nlp_shape", "naspipe.space.cv_shape")


def register_preset(name: str, cls: type[SpaceShape], options: Mapping[str, Any]) -> None:
    PRESETS[name] = (cls, dict(options))


def space_names() -> tuple[str, ...]:
    _load_extra_spaces()
    return tuple(sorted(PRESETS))


def make_shape(name: str, options: Mapping[str, Any] | None = None, shared_policy: str = "frozen") -> SpaceShape:
    """The space ``name`` without its layers (no torch): options checked, structure, costs and sizes."""
    cls, preset = _preset(name, shared_policy)
    return cls(name, {**preset, **(options or {})}, shared_policy)  # type: ignore[arg-type]


def make_space(name: str, options: Mapping[str, Any] | None = None, shared_policy: str = "frozen") -> SearchSpace:
    """The space ``name`` with its layers (imports torch)."""
    cls, preset = _preset(name, shared_policy)
    space = cls.space_class()(name, {**preset, **(options or {})}, shared_policy)  # type: ignore[arg-type]
    return cast("SearchSpace", space)


def _preset(name: str, shared_policy: str) -> tuple[type[SpaceShape], dict[str, Any]]:
    _load_extra_spaces()
    if name not in PRESETS:
        raise UsageError(f"unknown space {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    if shared_policy not in SHARED_POLICIES:
        raise UsageError(f"unknown shared_policy {shared_policy!r}; choose one of {', '.join(SHARED_POLICIES)}")
    return PRESETS[name]


def _load_extra_spaces() -> None:
    """Import the optional space shapes, which register their presets on import."""
    for module in _SHAPE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


__all__ = ["PRESETS", "make_shape", "make_space", "register_preset", "space_names"]
