"""The single exception type raised for bad input data.

Subclassing ``ValueError`` lets the top-level CLI turn every data problem into a
one-line ``naspipe: error: ...`` message without knowing about this package.
"""

from __future__ import annotations


class DataError(ValueError):
    """Bad or inconsistent input data; the message names the file, line, field or value."""
