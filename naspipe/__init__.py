"""NASPipe: reproducible, fast, parallel supernet training.

The scheduling core (:mod:`naspipe.scheduling`), the subnet stream (:mod:`naspipe.subnet`) and
the space structure (:mod:`naspipe.space.structure`) are pure Python; everything that touches
tensors lives in :mod:`naspipe.space` models and :mod:`naspipe.runtime`.
"""

__version__ = "0.1.0"
