"""The context manager: which layers of a stage are on its device, and what moves when.

:mod:`naspipe.context.cache` is the pure decision model (no torch), shared by the runtime
and the simulator; the runtime drives it with real copies.
"""

from naspipe.context.cache import CacheCapacityError, CacheStats, DeviceCache, Move

__all__ = ["CacheCapacityError", "CacheStats", "DeviceCache", "Move"]
