"""Ablation: NASPipe without its scheduler (paper section 5.3, Figure 6).

Update semantics are CSP's (the version rule, checked per layer; bitwise equal to the
sequential reference), but the scheduler is switched off: a new subnet enters the pipeline
only after the previous one has drained (its last update, on stage 0, is done), so no two
subnets ever overlap and CSP's dependency-aware reordering has nothing to work with. The
gap to :class:`~naspipe.scheduling.policies.csp.CSP` measures what the scheduler buys.
"""

from __future__ import annotations

from naspipe.scheduling.policies.csp import CSP


class CSPNoScheduler(CSP):
    name = "csp-no-scheduler"
    label = "NASPipe without its scheduler"
    report_order = 2
    ablation = "no-scheduler"

    def may_admit(self, subnet: int) -> bool:
        return self.inflight == 0
