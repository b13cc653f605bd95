"""Derive independent 63-bit seeds from tuples such as (seed, layer id).

Every random draw in NASPipe comes from a generator seeded by a tuple that names what the
draw is for, never from a process-global stream: parameter init from (seed, "init", layer),
batch ``i`` from (seed, "batch", i), dropout from (seed, "dropout", subnet, layer). That is
what makes a layer's initial weights independent of which process builds it and makes
recomputation reproduce the forward's masks. Python's ``hash()`` is salted per process, so
a keyed BLAKE2 digest is used instead.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK63 = (1 << 63) - 1


def derive_seed(*parts: int | str) -> int:
    """A non-negative 63-bit seed that is a pure function of ``parts``."""
    text = "\x1f".join(f"{type(p).__name__}:{p}" for p in parts)
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"naspipe-seed").digest()
    return int.from_bytes(digest, "little") & _MASK63


def rng_for(*parts: int | str) -> np.random.Generator:
    """A numpy PCG64 generator seeded by ``derive_seed(*parts)``.

    PCG64 is numpy's documented stable bit generator: the same seed gives the same stream on
    every platform and numpy release.
    """
    return np.random.Generator(np.random.PCG64(derive_seed(*parts)))
