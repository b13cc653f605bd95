"""The modules behind every ``naspipe`` command, one per command, named after it (see :mod:`naspipe.cli`).

Each provides ``add_parser(sub)`` and ``run(args) -> int`` and is imported only when its
command is used.
"""
