"""The modules behind ``naspipe train`` and ``naspipe compare`` (see :mod:`naspipe.cli`).

Each provides ``add_parser(sub)`` and ``run(args) -> int`` and is imported only when its
command is used.
"""
