"""A mirror: a layer's newest state moving to the stage of its next user (per-subnet partitions)."""

from __future__ import annotations

from typing import NamedTuple


class Mirror(NamedTuple):
    """After ``writer``'s update, ``layer`` at ``version`` (writes applied) must reach stage ``dst``."""

    layer: int
    version: int
    dst: int
    writer: int
