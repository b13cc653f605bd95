"""Tables, figures and ``report.md`` regenerated from run directories (paper-style rows).

``naspipe report`` (:mod:`naspipe.commands.report`) loads the inputs once
(:mod:`naspipe.report.inputs`), asks every section in :mod:`naspipe.report.sections` to build
its table or figure in memory, then writes them all: a new table or figure is one module with
a ``build(inputs)`` function plus one line in the registry.
"""
