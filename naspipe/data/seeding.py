"""Seeds for data preparation and batching: the project's one derivation (``naspipe.seeding``)."""

from __future__ import annotations

from naspipe.seeding import derive_seed as seed_mix
from naspipe.seeding import rng_for

__all__ = ["rng_for", "seed_mix"]
