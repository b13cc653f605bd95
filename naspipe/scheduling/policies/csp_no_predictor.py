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
    label = "NASPipe without its predictor"
    report_order = 3
    ablation = "no-predictor"
    # Its semantics are CSP's, but the lower bound has always left the CSP edge out for it (a looser,
    # still valid bound); kept so that every simulated output stays bit for bit (issue 19).
    causal = False
    predictor = False
