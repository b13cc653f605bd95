"""The one user-error hierarchy: what the command line reports as one line with exit status 2.

Every bad-input error in the package is a :class:`UsageError` (data problems are the
subclass :class:`naspipe.data.errors.DataError`), so the CLI has exactly one handler and
never has to guess from a module name whether a ``ValueError`` is the user's fault. Any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: a flag, a config key or value, a file that is missing or malformed.

    The message names the offending thing (file, key, value); the CLI prints it on one line
    and exits with status 2 without writing anything. It stays a ``ValueError`` so library
    callers that catch ``ValueError`` around an input check keep working.
    """
