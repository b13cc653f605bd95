"""Ablation: NASPipe without its predictor (paper section 5.3, Figure 6).

Scheduling and update semantics are CSP's (bitwise equal to the sequential reference); only
the context manager changes: it fetches a task's layers when the task starts (on demand)
instead of prefetching the predictor's next tasks, and evicts least recently used layers.
With ``cache.enabled`` off it is plain CSP. The gap to :class:`~naspipe.scheduling.policies.csp.CSP`
with the cache on measures what prediction buys.
"""

from __future__ import annotations

from naspipe.scheduling.policies.csp import CSP


class CSPNoPredictor(CSP):
    name = "csp-no-predictor"
    predictor = False
