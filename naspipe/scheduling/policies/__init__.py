"""Stage policies: one module per system, all behind :func:`make_policy`."""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.policies.csp_artifact import CSPArtifact
from naspipe.scheduling.policies.csp_no_predictor import CSPNoPredictor
from naspipe.scheduling.policies.csp_no_scheduler import CSPNoScheduler
from naspipe.scheduling.policies.gpipe import GPipe
from naspipe.scheduling.policies.pipedream import PipeDream
from naspipe.scheduling.policies.sequential import Sequential
from naspipe.scheduling.policies.vpipe import VPipe

POLICIES: dict[str, type[StagePolicy]] = {
    cls.name: cls for cls in (Sequential, CSP, GPipe, PipeDream, VPipe, CSPNoScheduler, CSPNoPredictor)
}
POLICIES[CSPArtifact.name] = CSPArtifact  # the artifact's relaxed check (simulator attribution only)
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def make_policy(name: str, stage: int, plan: PipelinePlan, options: PolicyOptions) -> StagePolicy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown system {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None
    return cls(stage, plan, options)


__all__ = ["POLICIES", "POLICY_NAMES", "PolicyOptions", "StagePolicy", "make_policy"]
