"""The exception raised for bad input data (a shard, a text file, a dataset option).

It is a :class:`naspipe.errors.UsageError`, so the top-level CLI reports it like any other
bad input (one ``naspipe: error: ...`` line, exit 2) through its single handler.
"""

from __future__ import annotations

from naspipe.errors import UsageError


class DataError(UsageError):
    """Bad or inconsistent input data; the message names the file, line, field or value."""
