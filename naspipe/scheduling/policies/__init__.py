"""Stage policies: one module per system, all behind :func:`make_policy`."""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.policies.csp_artifact import CSPArtifact
from naspipe.scheduling.policies.csp_no_predictor import CSPNoPredictor
from naspipe.scheduling.policies.csp_no_scheduler import CSPNoScheduler
from naspipe.scheduling.policies.gpipe import GPipe
from naspipe.scheduling.policies.micro import MICRO_POLICIES as CAUSAL_MICRO_POLICIES
from naspipe.scheduling.policies.micro_gpipe import MicroGPipe, MicroVPipe
from naspipe.scheduling.policies.pipedream import PipeDream
from naspipe.scheduling.policies.sequential import Sequential
from naspipe.scheduling.policies.vpipe import VPipe

POLICIES: dict[str, type[StagePolicy]] = {
    cls.name: cls for cls in (Sequential, CSP, GPipe, PipeDream, VPipe, CSPNoScheduler, CSPNoPredictor)
}
POLICIES[CSPArtifact.name] = CSPArtifact  # the artifact's relaxed check (simulator attribution only)
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
MICRO_POLICIES: dict[str, type[StagePolicy]] = {**CAUSAL_MICRO_POLICIES, "gpipe": MicroGPipe, "vpipe": MicroVPipe}
"""Each system's micro-batched schedule (``micro_batches`` > 1 or a split backward); the others refuse one."""


def make_policy(name: str, stage: int, plan: PipelinePlan, options: PolicyOptions) -> StagePolicy:
    """The system's policy for ``stage``; its micro-batched one when ``options`` ask for micro-batches or a
    split backward (only the causal systems have one: ValueError for the others)."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown system {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None
    if options.micro_batched:
        micro = MICRO_POLICIES.get(name)
        if micro is None:
            raise ValueError(f"system {name!r} has no micro-batched schedule (micro_batches > 1 or split_backward "
                             f"are for {', '.join(MICRO_POLICIES)})")
        return micro(stage, plan, options)
    return cls(stage, plan, options)


def supports_micro_batches(name: str) -> bool:
    """Whether system ``name`` runs micro-batched schedules (``micro_batches`` > 1, ``split_backward``)."""
    return name in MICRO_POLICIES


__all__ = ["MICRO_POLICIES", "POLICIES", "POLICY_NAMES", "PolicyOptions", "StagePolicy", "make_policy",
           "supports_micro_batches"]
