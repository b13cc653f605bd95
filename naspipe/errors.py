"""Errors that the command line reports as one line with exit status 2."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: a flag, a config key or value, a file that is missing or malformed.

    The message names the offending thing (file, key, value); the CLI prints it on one line
    and exits with status 2 without writing anything.
    """
