"""The costed discrete-event simulator: the runtime's policies and partition in simulated time.

Pure Python, no torch: :mod:`engine` (events and per-stage queues), :mod:`costs`
(uniform, analytic, profiled), :mod:`hardware` (``config/hardware/*.yaml``),
:mod:`residency` (copy engine; the seam where a cache model plugs in), :mod:`memory`
(bytes per stage, largest batch), :mod:`bound` (lower bound on the makespan) and
:mod:`run` (one run, the runtime's metrics schema). :mod:`layers` sizes a space's layers
from its torch-free shape and :mod:`setup` builds a run from a config; neither is imported here.
"""
