"""Search spaces by name: ``make_space("toy", {"blocks": 8})``.

The package is imported lazily: ``naspipe.space.structure`` (what a subnet may contain) is
pure Python and is what the scheduling core imports; a space's shape (``shape``,
``toy_shape``, ``nlp_shape``, ``cv_shape``: options, costs, layer sizes) is pure too and is
what the simulator and the planners build (``make_shape``), while the layers (``base``,
``toy``, ``nlp``, ``cv``) need torch. Importing ``naspipe.space`` therefore loads nothing;
each public name below is resolved from its module on first use, so ``make_space`` imports
torch and ``make_shape`` does not. The preset registry lives in :mod:`naspipe.space.registry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from naspipe.lazy import lazy_attributes, lazy_dir

if TYPE_CHECKING:
    from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State, seeded_dropout
    from naspipe.space.registry import PRESETS, make_shape, make_space, register_preset, space_names
    from naspipe.space.shape import SpaceShape
    from naspipe.space.structure import SHARED_POLICIES, SpaceStructure

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Batch": "naspipe.space.base",
    "LayerContext": "naspipe.space.base",
    "SearchSpace": "naspipe.space.base",
    "SpaceLayer": "naspipe.space.base",
    "State": "naspipe.space.base",
    "seeded_dropout": "naspipe.space.base",
    "PRESETS": "naspipe.space.registry",
    "make_shape": "naspipe.space.registry",
    "make_space": "naspipe.space.registry",
    "register_preset": "naspipe.space.registry",
    "space_names": "naspipe.space.registry",
    "SHARED_POLICIES": "naspipe.space.structure",
    "SpaceStructure": "naspipe.space.structure",
    "SpaceShape": "naspipe.space.shape",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)

__dir__ = lazy_dir(globals(), _EXPORTS)


__all__ = [
    "PRESETS",
    "SHARED_POLICIES",
    "Batch",
    "LayerContext",
    "SearchSpace",
    "SpaceLayer",
    "SpaceShape",
    "SpaceStructure",
    "State",
    "make_shape",
    "make_space",
    "register_preset",
    "seeded_dropout",
    "space_names",
]
